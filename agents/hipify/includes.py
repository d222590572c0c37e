"""Includes: CUDA header -> HIP / roc* header, hipify-clang's de-duplication of main headers, and
where ``hip/hip_runtime.h`` is inserted when a file includes no CUDA main header."""

from __future__ import annotations

from hipbot.agents.hipify.cpp_tokens import COMMENT, DIRECTIVE, Token, TokenWindow, tokenize

# CUDA header -> (HIP header, ROC header, kind, API); kind: "main", "main_v2" or "" (plain include).
# An empty HIP header means the include is dropped (nothing to include on HIP). The CUDA samples'
# own helper_cuda.h / helper_math.h are not here: they are project headers (checkCudaErrors,
# findCudaDevice, float3 maths) that get translated with the tree, so their includes stay.
INCLUDES: dict[str, tuple[str, str, str, str]] = {
    "cuda.h": ("hip/hip_runtime.h", "", "main", "runtime"),
    "cuda_runtime.h": ("hip/hip_runtime.h", "", "main", "runtime"),
    "device_launch_parameters.h": ("", "", "", "runtime"),
    "cuda_runtime_api.h": ("hip/hip_runtime_api.h", "", "", "runtime"),
    "channel_descriptor.h": ("hip/channel_descriptor.h", "", "", "runtime"),
    "device_functions.h": ("hip/device_functions.h", "", "", "runtime"),
    "driver_types.h": ("hip/driver_types.h", "", "", "runtime"),
    "cuda_bf16.h": ("hip/hip_bf16.h", "", "", "runtime"),
    "cuda_fp16.h": ("hip/hip_fp16.h", "", "", "runtime"),
    "cuda_fp8.h": ("hip/hip_fp8.h", "", "", "runtime"),
    "cuda_texture_types.h": ("hip/hip_texture_types.h", "", "", "runtime"),
    "texture_fetch_functions.h": ("", "", "", "runtime"),
    "vector_types.h": ("hip/hip_vector_types.h", "", "", "runtime"),
    "cuda_profiler_api.h": ("hip/hip_runtime_api.h", "", "", "runtime"),
    "cooperative_groups.h": ("hip/hip_cooperative_groups.h", "", "", "runtime"),
    "cooperative_groups/reduce.h": ("hip/cooperative_groups/hip_reduce.h", "", "", "runtime"),
    "cooperative_groups/scan.h": ("hip/cooperative_groups/hip_scan.h", "", "", "runtime"),
    "library_types.h": ("hip/library_types.h", "", "", "runtime"),
    "math_constants.h": ("hip/hip_math_constants.h", "", "", "runtime"),
    "cuComplex.h": ("hip/hip_complex.h", "", "main", "complex"),
    "cublas.h": ("hipblas.h", "rocblas.h", "main", "blas"),
    "cublas_v2.h": ("hipblas.h", "rocblas.h", "main_v2", "blas"),
    "cublas_api.h": ("hipblas.h", "rocblas.h", "", "blas"),
    "cublasLt.h": ("hipblaslt.h", "", "", "blas"),
    "curand.h": ("hiprand/hiprand.h", "rocrand/rocrand.h", "main", "rand"),
    "curand_kernel.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_kernel.h", "", "rand"),
    "curand_discrete.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_discrete.h", "", "rand"),
    "curand_discrete2.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_discrete.h", "", "rand"),
    "curand_globals.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_common.h", "", "rand"),
    "curand_lognormal.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_log_normal.h", "", "rand"),
    "curand_mrg32k3a.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_mrg32k3a.h", "", "rand"),
    "curand_mtgp32.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_mtgp32.h", "", "rand"),
    "curand_mtgp32_host.h": ("hiprand/hiprand_mtgp32_host.h", "rocrand/rocrand_mtgp32.h", "", "rand"),
    "curand_mtgp32_kernel.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_mtgp32.h", "", "rand"),
    # hipify-clang: HIP mode names the header bare (hipRAND puts rocRAND's include dir on the path).
    "curand_mtgp32dc_p_11213.h": (
        "rocrand_mtgp32_11213.h",
        "rocrand/rocrand_mtgp32_11213.h",
        "",
        "rand",
    ),
    "curand_normal.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_normal.h", "", "rand"),
    "curand_normal_static.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_normal.h", "", "rand"),
    "curand_philox4x32_x.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_philox4x32_10.h", "", "rand"),
    "curand_poisson.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_poisson.h", "", "rand"),
    "curand_precalc.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_xorwow_precomputed.h", "", "rand"),
    "curand_uniform.h": ("hiprand/hiprand_kernel.h", "rocrand/rocrand_uniform.h", "", "rand"),
    "cudnn.h": ("hipDNN.h", "miopen/miopen.h", "main", "dnn"),
    "cufft.h": ("hipfft/hipfft.h", "", "main", "fft"),
    "cufftXt.h": ("hipfft/hipfftXt.h", "", "", "fft"),
    "cufftw.h": ("hipfft/hipfftw.h", "", "", "fft"),
    "cusparse.h": ("hipsparse.h", "rocsparse.h", "main", "sparse"),
    "cusparse_v2.h": ("hipsparse.h", "rocsparse.h", "main_v2", "sparse"),
    "cusolverDn.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cusolverMg.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cusolverRf.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cusolverSp.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cusolverSp_LOWLEVEL_PREVIEW.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cusolver_common.h": ("hipsolver.h", "rocsolver/rocsolver.h", "main", "solver"),
    "cub/cub.cuh": ("hipcub/hipcub.hpp", "", "main", "cub"),
    "nvrtc.h": ("hip/hiprtc.h", "", "main", "rtc"),
}
HEADER_API_NAMES = {
    "runtime": "CUDA RT API",
    "complex": "cuComplex API",
    "blas": "cuBLAS API",
    "rand": "cuRAND API",
    "dnn": "cuDNN API",
    "fft": "cuFFT API",
    "sparse": "cuSPARSE API",
    "solver": "cuSOLVER API",
    "cub": "CUB API",
    "rtc": "CUDA RTC API",
}
HEADER_API_ROC = {"blas", "sparse", "rand", "solver"}
UNSUPPORTED_HEADERS = {"cufft_device.h"}


def duplicate_header(seen: set[str], hip: str, kind: str, api: str) -> bool:
    """hipify-clang's de-duplication: each main header once, a v2 header after its v1 dropped.
    ``seen`` holds the headers (and APIs) included so far and is updated."""
    if kind == "main":
        key = hip if api == "rand" else api
        if key in seen:
            return True
        seen.add(key)
        return False
    if kind == "main_v2":
        if api + "_v2" in seen:
            return True
        seen.add(api + "_v2")
        if api in seen:
            return True
        seen.add(api)
        return False
    if not hip:
        return True
    if hip == "hiprand/hiprand_kernel.h" or (api == "rand" and hip.startswith("rocrand/")):
        if hip in seen:
            return True
        seen.add(hip)
    return False


def runtime_header_point(src: str, last_directive: Token | None, pragma_once: int, first_include: int) -> int:
    """Where ``#include <hip/hip_runtime.h>`` goes: just after the include guard's ``#ifndef X`` or
    ``#pragma once`` (the earlier), else at the first include, else at the top."""
    guard = _include_guard(src, last_directive)
    if guard >= 0 and pragma_once >= 0:
        return min(guard, pragma_once)
    if guard >= 0:
        return guard
    if pragma_once >= 0:
        return pragma_once
    return first_include if first_include >= 0 else 0


def _include_guard(src: str, last_directive: Token | None) -> int:
    """End offset of X in a leading ``#ifndef X`` / ``#define X`` ... trailing ``#endif``, else -1."""
    if last_directive is None or last_directive.text.split("#")[-1].strip() != "endif":
        return -1
    if any(t.kind != COMMENT for t in tokenize(src, last_directive.end)):
        return -1
    win = TokenWindow(src, 0)
    code = []
    k = 0
    while len(code) < 4 and (t := win.get(k)) is not None:
        if t.kind != COMMENT:
            code.append(t)
        k += 1
    if len(code) < 4:
        return -1
    if not (code[0].kind == DIRECTIVE and code[0].text.split("#")[-1].strip() == "ifndef"):
        return -1
    if not (code[2].kind == DIRECTIVE and code[2].text.split("#")[-1].strip() == "define"):
        return -1
    if code[1].text != code[3].text:
        return -1
    return code[1].end
