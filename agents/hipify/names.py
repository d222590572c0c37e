"""Which identifiers of a source are CUDA's and which the project's own: names a file defines
(``#define cudaCheck``, ``void cuda_check(``), the kernels it declares, and what looks like a CUDA
API spelling."""

from __future__ import annotations

import re

_KERNEL_NAME = re.compile(
    r"\b__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*|[\w:]+\s+){0,16}?(?!__launch_bounds__\b)(\w+)\s*\("
)
# How a file defines its own helpers: `#define NAME` and `TYPE NAME(` at the start of a line.
_DEFINE_PREFIX = r"^[ \t]*#[ \t]*define[ \t]+"
_FUNCTION = (
    r"^[ \t]*(?:(?:static|inline|extern|__host__|__device__|const)[ \t]+)*"
    r"(?:void|int|bool|float|double|char|auto|size_t|unsigned|long|cudaError_t)[ \t*&]+"
)
_OWN_MACRO = re.compile(_DEFINE_PREFIX + r"([A-Za-z_]\w*)", re.MULTILINE)
_OWN_FUNCTION = re.compile(_FUNCTION + r"([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)


def looks_cuda(name: str) -> bool:
    """``cudaFoo``/``cublasFoo``/``CUDA_FOO``/``CU_FOO``/``cuFoo``: a CUDA API spelling, not ``cute``."""
    if name.startswith(("cuda", "cublas", "curand", "cudnn", "cufft", "cusparse", "cusolver")):
        # camelCase like the APIs; snake_case (cuda_check, cublas_handle) is the project's own
        rest = name[4:] if name.startswith("cuda") else name.lstrip("abcdefghijklmnopqrstuvwxyz")
        return bool(rest) and rest[0].isupper()
    if name.startswith(("CUDA_", "CUBLAS_", "CURAND_", "CUDNN_", "CUFFT_", "CUSPARSE_", "CUSOLVER_", "CU_")):
        return name.isupper() or "_" in name[3:]
    return len(name) > 3 and name[:2] == "cu" and name[2].isupper() and name[3].islower()


def own_names(source: str) -> frozenset[str]:
    """Names a source defines itself: ``#define NAME`` and ``TYPE NAME(`` function heads."""
    return frozenset(_OWN_MACRO.findall(source)) | frozenset(_OWN_FUNCTION.findall(source))


def kernel_names(source: str) -> frozenset[str]:
    """Names declared ``__global__`` (``__launch_bounds__(...)`` and template heads allowed)."""
    return frozenset(_KERNEL_NAME.findall(source))
