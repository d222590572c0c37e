"""The translator's lookup tables: CUDA name -> ``Rename`` (HIPIFY's mapping rows, read through
``mappings.load()``, plus hipify-clang's own extras), CUDA header -> HIP / roc* header, and the
header guards and macros no table lists."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from hipbot.agents.hipify import call_rewrites, mappings
from hipbot.i18n import N_

# Library -> (priority in hipify-clang's union map, display name as in hipify's statistics)
LIBRARIES: dict[str, tuple[int, str]] = {
    "CUDA_Driver_API_functions": (0, "CUDA Driver API"),
    "CUDA_Runtime_API_functions": (1, "CUDA RT API"),
    "cuComplex_API": (2, "cuComplex API"),
    "CUBLAS_API": (3, "cuBLAS API"),
    "CURAND_API": (4, "cuRAND API"),
    "CUDNN_API": (5, "cuDNN API"),
    "CUFFT_API": (6, "cuFFT API"),
    "CUSPARSE_API": (7, "cuSPARSE API"),
    "CUB_API": (8, "CUB API"),
    "CUDA_RTC_API": (9, "CUDA RTC API"),
    "CUDA_Device_API": (10, "CUDA Device API"),
    "CUSOLVER_API": (11, "cuSOLVER API"),
}
ROC_LIBRARIES = frozenset({"CUBLAS_API", "CUSPARSE_API", "CURAND_API", "CUSOLVER_API"})
MIOPEN_LIBRARIES = frozenset({"CUDNN_API"})

DATA_TYPE_NAMES = ("cudaDataType_t", "cudaDataType")

# Prefixes of CUDA API names; identifiers with them that no table lists are reported as unknown.
CUDA_PREFIXES = ("cuda", "cublas", "curand", "cudnn", "cufft", "cusparse", "cusolver", "CUDA_", "CUBLAS_",
                  "CURAND_", "CUDNN_", "CUFFT_", "CUSPARSE_", "CUSOLVER_", "CU_", "cu")  # fmt: skip


# Include guards and marker macros of CUDA headers that code tests with ``#ifdef`` to see whether a
# header was included (helper_cuda.h's ``#ifdef __DRIVER_TYPES_H__`` around checkCudaErrors, ...).
# No mapping table lists them; without a rename the guarded code silently disappears under HIP.
# Targets are the guards of the HIP headers the includes are translated to (stable since ROCm 5).
HEADER_GUARDS = {
    "__DRIVER_TYPES_H__": "HIP_INCLUDE_HIP_DRIVER_TYPES_H",
    "__CUDA_RUNTIME_H__": "HIP_INCLUDE_HIP_HIP_RUNTIME_H",
    "__CUDA_RUNTIME_API_H__": "HIP_INCLUDE_HIP_HIP_RUNTIME_API_H",
    "__cuda_cuda_h__": "HIP_INCLUDE_HIP_HIP_RUNTIME_H",
    "__VECTOR_TYPES_H__": "HIP_INCLUDE_HIP_HIP_VECTOR_TYPES_H",
    "__CUDA_FP16_H__": "HIP_INCLUDE_HIP_HIP_FP16_H",
    "CU_COMPLEX_H_": "HIP_INCLUDE_HIP_HIP_COMPLEX_H",
}
# Calling-convention macros (``void CUDART_CB callback(void *)``): empty on Linux, ``__stdcall``
# on Windows; HIP has none and needs none, so they are dropped.
CALLING_CONVENTION_MACROS = {"CUDART_CB": ""}
# Warp functions HIP's kernel-language reference lists under the same names (64-bit masks) though
# the mapping tables still mark them unsupported: kept as written, with when ROCm has them.
WARP_SYNC_BUILTINS = frozenset(
    {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__all_sync", "__any_sync",
     "__ballot_sync", "__match_any_sync", "__match_all_sync"}
)  # fmt: skip
WARP_SYNC_DETAIL = N_(
    "kept as written: HIP has it from ROCm 6.2 (define HIP_ENABLE_WARP_SYNC_BUILTINS; always on from 6.3) "
    "with a 64-bit lane mask; older ROCm has only the mask-less __shfl_down/__any/__ballot forms"
)
# Thrust's CUDA backend namespaces and their rocThrust names (after ``thrust::``); the backend's
# headers ``thrust/system/cuda/...`` are ``thrust/system/hip/...`` in rocThrust.
THRUST_BACKENDS = {"cuda": "hip", "cuda_cub": "hip_rocprim"}
# Library headers' guards: only where the include becomes the hip* wrapper (not with --roc).
LIBRARY_HEADER_GUARDS = {
    "CUBLAS_API_H_": "HIPBLAS_H",
    "CUBLAS_V2_H_": "HIPBLAS_H",
    "CURAND_H_": "HIPRAND_H_",
    "_CUFFT_H_": "HIPFFT_H_",
    "CUSPARSEAPI": "HIPSPARSE_EXPORT",
}


@dataclass(frozen=True)
class Rename:
    cuda: str
    target: str | None  # None: left as is (see reason)
    reason: str | None  # "unsupported", "experimental", "unknown" or None when translated
    library: str
    section: str
    doc: str  # the mapping table the row comes from
    api: str = ""  # display name, e.g. "CUDA RT API"
    kind: str = ""  # the table section in short, e.g. "memory management"


def _row_target(row: mappings.ApiMapping, to_roc: bool) -> tuple[str | None, str | None]:
    if to_roc:
        return row.roc, row.roc_experimental
    return row.hip, row.hip_experimental


@cache
def rename_table(roc: bool, miopen: bool, experimental: bool, use_hip_data_types: bool) -> dict[str, Rename]:
    """CUDA name -> Rename, one entry per name, libraries in hipify-clang's lookup order."""
    table = mappings.load()
    out: dict[str, Rename] = {}
    for name, rows in table.by_cuda.items():
        rows = sorted(rows, key=lambda r: (LIBRARIES.get(r.library, (99, ""))[0], r.hip is None))
        row = rows[0]
        to_roc = (roc and row.library in ROC_LIBRARIES) or (miopen and row.library in MIOPEN_LIBRARIES)
        target, exp = _row_target(row, to_roc)
        reason = None
        if target is None:
            reason = "unsupported"
        elif exp and not experimental:
            target, reason = None, "experimental"
        api = LIBRARIES.get(row.library, (0, row.library))[1]
        out[name] = Rename(
            name, target, reason, row.library, row.section, row.table, api, section_kind(row.section)
        )
    if roc:
        for name, target in call_rewrites.ROC_RENAMES.items():
            if name in out:
                out[name] = replace(out[name], target=target, reason=None)
    if miopen:
        for name, target in call_rewrites.MIOPEN_RENAMES.items():
            if name in out:
                out[name] = replace(out[name], target=target, reason=None)
    guards = {**HEADER_GUARDS, **CALLING_CONVENTION_MACROS}
    if not roc:
        guards.update(LIBRARY_HEADER_GUARDS)
    for name, target in guards.items():
        if name not in out:
            out[name] = Rename(
                name, target, None, "CUDA_RUNTIME_API", "header guards", "", "CUDA RT API", "include guard"
            )
    if use_hip_data_types:
        for name in DATA_TYPE_NAMES:
            if name in out:
                out[name] = replace(out[name], target="hipDataType", reason=None)
    return out


@cache
def blas_v2_only() -> frozenset[str]:
    """cuBLAS names that also exist as ``NAME_v2``: with the legacy ``cublas.h`` they are the v1
    (handle-less) functions, which hipBLAS/rocBLAS do not provide."""
    names = mappings.load().by_cuda
    return frozenset(n for n, rows in names.items() if rows[0].library == "CUBLAS_API" and n + "_v2" in names)


def section_kind(section: str) -> str:
    """'11. Memory Management' -> 'memory management'."""
    head, _, rest = section.partition(". ")
    text = rest if head.isdigit() else section
    return text.replace("[DEPRECATED]", "").replace("[REMOVED]", "").strip().lower() or "other"
