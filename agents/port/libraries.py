"""Headers a unit needs that are not there, named as the library a porter installs (or the fact
that HIP has no counterpart)."""

from __future__ import annotations

import re

from hipbot.agents.port.report import Cause

# header (as hipify writes it, or the CUDA name it left) -> (library, ROCm package or None)
_LIBS: dict[str, tuple[str, str | None]] = {
    "hipblas": ("hipBLAS", "hipblas-dev"),
    "hipblaslt": ("hipBLASLt", "hipblaslt-dev"),
    "rocblas": ("rocBLAS", "rocblas-dev"),
    "hipfft": ("hipFFT", "hipfft-dev"),
    "rocfft": ("rocFFT", "rocfft-dev"),
    "hipcub": ("hipCUB", "hipcub-dev"),
    "cub": ("hipCUB", "hipcub-dev"),
    "thrust": ("rocThrust", "rocthrust-dev"),
    "hipsolver": ("hipSOLVER", "hipsolver-dev"),
    "rocsolver": ("rocSOLVER", "rocsolver-dev"),
    "miopen": ("MIOpen", "miopen-hip-dev"),
    "hipdnn": ("MIOpen", "miopen-hip-dev"),
    "rccl": ("RCCL", "rccl-dev"),
    "nccl": ("RCCL", "rccl-dev"),
    "roctracer": ("roctracer (roctx)", "roctracer-dev"),
    "rocwmma": ("rocWMMA", "rocwmma-dev"),
    "rocrand": ("rocRAND", "librocrand-dev"),
    "hiprand": ("hipRAND", "libhiprand-dev"),
    "rocsparse": ("rocSPARSE", "librocsparse-dev"),
    "hipsparse": ("hipSPARSE", "libhipsparse-dev"),
    "rocprim": ("rocPRIM", "librocprim-dev"),
    "rocm_smi": ("ROCm SMI", "rocm-smi-lib"),
    "hipsparselt": ("hipSPARSELt", "hipsparselt-dev"),
    "GL": ("OpenGL/GLUT (Mesa)", "freeglut3-dev libglew-dev"),
    "mpi.h": ("MPI", "libopenmpi-dev"),
    "omp.h": ("OpenMP for clang", "libomp-15-dev, the version of hipcc's clang"),
    "torch": ("PyTorch C++ extension headers", None),
    "pybind11": ("pybind11", "pybind11-dev"),
    # host-side libraries CUDA projects often use
    "gflags": ("gflags", "libgflags-dev"),
    "glog": ("glog", "libgoogle-glog-dev"),
    "gtest": ("GoogleTest", "libgtest-dev"),
    "boost": ("Boost", "libboost-dev"),
    "Eigen": ("Eigen", "libeigen3-dev"),
    "opencv2": ("OpenCV", "libopencv-dev"),
}
_NO_HIP: dict[str, str] = {
    "npp": "NPP (NVIDIA Performance Primitives)",
    "nvml.h": "NVML (use ROCm SMI: rocm_smi/rocm_smi.h)",
    "cudla.h": "cuDLA",
    "nvjpeg.h": "nvJPEG (rocJPEG is a separate library)",
    "cufile.h": "cuFile / GPUDirect Storage",
    "nvrtc.h": "NVRTC (hipRTC has a different API)",
    "cuda_gl_interop.h": "CUDA-OpenGL interop (hip_gl_interop.h is not in this ROCm)",
    "cudnn": "cuDNN (MIOpen's API differs)",
    "cutlass": "CUTLASS",
    "cute": "CuTe (CUTLASS)",
    "mma.h": "nvcuda::wmma (use rocWMMA)",
    "nvshmem": "NVSHMEM (rocSHMEM is a separate library)",
    "optix": "OptiX",
    "nvtx3": "NVTX (roctx from roctracer)",
    "cuda": "libcu++ (<cuda/...> headers)",
    "nvToolsExt.h": "NVTX (roctx from roctracer)",
    "helper_cuda.h": "cuda-samples' helper_cuda.h (not part of this project)",
    "helper_functions.h": "cuda-samples' helper_functions.h (not part of this project)",
    "helper_string.h": "cuda-samples' helper_string.h (not part of this project)",
    "helper_timer.h": "cuda-samples' helper_timer.h (not part of this project)",
    "helper_image.h": "cuda-samples' helper_image.h (not part of this project)",
}


def header_cause(header: str) -> Cause | None:
    """The cause for a missing header, or None when it is not a library's."""
    low = header.lower()

    def hit(key: str) -> bool:
        tail = "" if key == "npp" else "(?![a-z0-9])"  # nppi.h, npps.h, nppcore.h
        return re.match(rf"{re.escape(key.lower())}{tail}", low) is not None

    for key, what in _NO_HIP.items():
        if hit(key):
            if key.startswith("helper_"):
                return Cause("missing-header", f"needs {what}")
            return Cause("no-hip-equivalent", f"{what}: no HIP equivalent")
    for key, (lib, pkg) in _LIBS.items():
        if hit(key):
            hint = f" (apt install {pkg})" if pkg else ""
            return Cause("library", f"needs {lib}, which is not installed{hint}")
    if low.startswith(("cublas", "cufft", "curand", "cusparse", "cusolver", "cub/")):
        return Cause("no-hip-equivalent", f"<{header}>: a CUDA library header hipify has no HIP name for")
    return None


HEADER_CAUSES = tuple(_LIBS) + tuple(_NO_HIP)
