"""Headers a unit needs that are not there, named as the library a porter installs (or the fact
that HIP has no counterpart)."""

from __future__ import annotations

import re
from pathlib import Path

from hipbot.agents.port.report import Cause
from hipbot.i18n import N_

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


# Windows SDK / MSVC runtime headers: a unit that needs them is written for Windows, where ROCm's
# hipcc (Linux) does not run it
_WINDOWS = frozenset(
    [
        "windows.h",
        "conio.h",
        "tlhelp32.h",
        "direct.h",
        "io.h",
        "process.h",
        "tchar.h",
        "winbase.h",
        "windef.h",
        "winsock2.h",
        "intrin.h",
        "crtdbg.h",
        "psapi.h",
        "shlwapi.h",
    ]
)


def header_cause(header: str) -> Cause | None:
    """The cause for a missing header, or None when it is not a library's."""
    low = header.lower()
    if low in _WINDOWS:
        return Cause(
            "windows-only",
            N_(
                "<{header}> is a Windows header: this unit is written for Windows (MSVC), not for Linux where ROCm runs",
                header=header,
            ),
        )

    def hit(key: str) -> bool:
        tail = "" if key == "npp" else "(?![a-z0-9])"  # nppi.h, npps.h, nppcore.h
        return re.match(rf"{re.escape(key.lower())}{tail}", low) is not None

    for key, what in _NO_HIP.items():
        if hit(key):
            if key.startswith("helper_"):
                return Cause("missing-header", N_("needs {what}", what=what))
            return Cause("no-hip-equivalent", N_("{what}: no HIP equivalent", what=what))
    for key, (lib, pkg) in _LIBS.items():
        if hit(key):
            if pkg:
                return Cause(
                    "library",
                    N_(
                        "needs {library}, which is not installed (apt install {package})",
                        library=lib,
                        package=pkg,
                    ),
                )
            return Cause("library", N_("needs {library}, which is not installed", library=lib))
    if low.startswith(("cublas", "cufft", "curand", "cusparse", "cusolver", "cub/")):
        return Cause(
            "no-hip-equivalent",
            N_("<{header}>: a CUDA library header hipify has no HIP name for", header=header),
        )
    return None


HEADER_CAUSES = tuple(_LIBS) + tuple(_NO_HIP)

# the names hipify gives a library's API -> the header key of :data:`_LIBS`
_API_PREFIXES = ("hipblas", "hipfft", "hipsolver", "hipcub", "rocblas", "hipsparse", "hiprand", "nccl")


def identifier_cause(
    name: str, include_dirs: tuple[str, ...] = ("/usr/include", "/opt/rocm/include")
) -> Cause | None:
    """A library's type or function used with no header of it included: when the library is not
    installed, that is the first thing the porter needs (the unit includes no header of it, so
    nvcc needs one too)."""
    low = name.lower()
    key = next((p for p in _API_PREFIXES if low.startswith(p)), None)
    if key is None:
        return None
    lib, pkg = _LIBS[key]
    if any(Path(d, key).exists() or Path(d, key + ".h").exists() for d in include_dirs):
        return Cause(
            "not-valid-cuda",
            N_(
                "'{name}' is {library}'s, and the unit includes no {library} header (nvcc refuses it too)",
                name=name,
                library=lib,
            ),
        )
    return Cause(
        "library",
        N_(
            "needs {library}, which is not installed (apt install {package}); "
            "'{name}' is used with no {library} header included",
            library=lib,
            package=pkg,
            name=name,
        ),
    )
