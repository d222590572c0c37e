"""CUDA -> HIP source translation, token by token, the way hipify-clang rewrites a file.

Pure library code: the CLI, the Discord bot and the agent call ``translate()``. What it does:

* identifiers are replaced as whole tokens from the HIPIFY mapping tables (``mappings.load()``);
  ``--roc`` picks the rocBLAS/rocSPARSE/rocRAND/rocSOLVER names, ``--miopen`` the MIOpen ones;
  names HIP lacks, experimental names (without ``--experimental``) are left as they are and
  reported with their line and column;
* comments are never touched; inside plain string literals only space-separated words that are
  exactly a CUDA API name are rewritten (hipify-clang's rule; ``translate_strings=False`` keeps them);
* includes are rewritten (``cuda_runtime.h`` -> ``hip/hip_runtime.h``, library headers to hip* or
  roc*), repeated main headers are dropped, and ``hip/hip_runtime.h`` is inserted when the file does
  not include a CUDA main header;
* ``<<<...>>>`` launches stay unless ``hip_kernel_execution_syntax`` (see ``kernel_launch``);
* the argument rewrites hipify-clang makes for a few calls (``HIP_SYMBOL(...)`` around symbols,
  ``cudaEventCreate`` with flags, ``cudaGraphInstantiate`` with flags, ``cudaMallocHost``'s flag).

Everything is one linear scan over the tokens plus dictionary lookups.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path

from hipbot.agents.hipify import call_rewrites, mappings, pp_blocks
from hipbot.agents.hipify.cpp_tokens import (
    CHAR,
    COMMENT,
    DIRECTIVE,
    IDENT,
    INCLUDE,
    PUNCT,
    STRING,
    LineIndex,
    Token,
    TokenWindow,
    candidate_scanner,
    include_target,
    match_token,
    tokenize,
)
from hipbot.agents.hipify.kernel_launch import (
    Launch,
    LaunchError,
    hip_launch_call,
    hip_launch_text,
    parse_launch,
)
from hipbot.errors import HipbotError

MAX_INPUT_BYTES = 16 * 1024 * 1024

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
_HEADER_API_NAMES = {
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
_HEADER_API_ROC = {"blas", "sparse", "rand", "solver"}
_UNSUPPORTED_HEADERS = {"cufft_device.h"}

DATA_TYPE_NAMES = ("cudaDataType_t", "cudaDataType")

# Prefixes of CUDA API names; identifiers with them that no table lists are reported as unknown.
_CUDA_PREFIXES = ("cuda", "cublas", "curand", "cudnn", "cufft", "cusparse", "cusolver", "CUDA_", "CUBLAS_",
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
WARP_SYNC_DETAIL = (
    "kept as written: HIP has it from ROCm 6.2 (define HIP_ENABLE_WARP_SYNC_BUILTINS; always on from 6.3) "
    "with a 64-bit lane mask; older ROCm has only the mask-less __shfl_down/__any/__ballot forms"
)
# Thrust's CUDA backend namespaces and their rocThrust names (after ``thrust::``); the backend's
# headers ``thrust/system/cuda/...`` are ``thrust/system/hip/...`` in rocThrust.
THRUST_BACKENDS = {"cuda": "hip", "cuda_cub": "hip_rocprim"}
_THRUST_QUALIFIER = re.compile(r"\bthrust[ \t]*::[ \t]*(?:system[ \t]*::[ \t]*)?$")
# Library headers' guards: only where the include becomes the hip* wrapper (not with --roc).
LIBRARY_HEADER_GUARDS = {
    "CUBLAS_API_H_": "HIPBLAS_H",
    "CUBLAS_V2_H_": "HIPBLAS_H",
    "CURAND_H_": "HIPRAND_H_",
    "_CUFFT_H_": "HIPFFT_H_",
    "CUSPARSEAPI": "HIPSPARSE_EXPORT",
}


_TEMPLATE_WORD = re.compile(r"\btemplate\b")
_KERNEL_NAME = re.compile(
    r"\b__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*|[\w:]+\s+)*?(?!__launch_bounds__\b)(\w+)\s*\("
)
# How a file defines its own helpers: `#define NAME` and `TYPE NAME(` at the start of a line.
_DEFINE = r"^[ \t]*#[ \t]*define[ \t]+"
_FUNCTION = (
    r"^[ \t]*(?:(?:static|inline|extern|__host__|__device__|const)[ \t]+)*"
    r"(?:void|int|bool|float|double|char|auto|size_t|unsigned|long|cudaError_t)[ \t*&]+"
)
_DEFINE_HEAD = re.compile(_DEFINE + "$")
_FUNCTION_HEAD = re.compile(_FUNCTION + "$")
_OWN_MACRO = re.compile(_DEFINE + r"([A-Za-z_]\w*)", re.MULTILINE)
_OWN_FUNCTION = re.compile(_FUNCTION + r"([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
_SCOPE = re.compile(r"[ \t]*::")


@dataclass
class HipifyOptions:
    """hipify-clang's options that change the translation (the others are accepted by the CLI)."""

    roc: bool = False  # rocBLAS/rocSPARSE/rocRAND/rocSOLVER instead of hipBLAS/...
    miopen: bool = False  # MIOpen instead of hipDNN for cuDNN
    experimental: bool = False  # also translate APIs HIP marks experimental
    hip_kernel_execution_syntax: bool = False  # <<<>>> -> hipLaunchKernelGGL
    cuda_kernel_execution_syntax: bool = False  # keep <<<>>> (the default; wins only if given alone)
    use_hip_data_types: bool = False  # cudaDataType_t -> hipDataType even with --roc
    translate_strings: bool = True  # exact CUDA API names inside string literals (hipify-clang)
    insert_runtime_header: bool = True  # add hip/hip_runtime.h when no CUDA main header is included
    # macros/functions other files of the same project define (see ``project_names``): not "unknown"
    project_names: frozenset[str] = frozenset()
    project_kernels: frozenset[str] = frozenset()  # __global__ functions of the other files
    # (path, output file name) of the tree's files whose translation gets another name (x.cu ->
    # x.hip; beside the sources also x.h -> x.hip.h): includes of them follow the rename
    renamed_sources: tuple[tuple[str, str], ...] = ()
    lint: bool = True  # run the AMD porting lints on input and output
    undocumented_features: bool = True  # half2 .x/.y -> reinterpret_cast<half&>(...) like hipify-clang
    skip_excluded_blocks: bool = False  # #if branches known not taken: names only, no launch/call rewrite


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


@dataclass
class Unconverted:
    name: str
    line: int
    col: int
    reason: str  # "unsupported" | "experimental" | "unknown"
    api: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class HipifyReport:
    """What was converted, and every CUDA identifier left as it was, for one file."""

    filename: str
    total_lines: int = 0
    total_bytes: int = 0
    converted: Counter = field(default_factory=Counter)  # CUDA name -> count
    by_api: Counter = field(default_factory=Counter)  # "CUDA RT API" -> count
    by_type: Counter = field(default_factory=Counter)  # table section / include / kernel_launch
    unconverted: list[Unconverted] = field(default_factory=list)
    changed_lines: set[int] = field(default_factory=set)
    replaced_bytes: int = 0
    kernel_launches: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def converted_count(self) -> int:
        return sum(self.converted.values())

    @property
    def conversion_percent(self) -> int:
        total = self.converted_count + len(self.unconverted)
        return 100 if total == 0 else round(100 * self.converted_count / total)

    def to_dict(self) -> dict:
        return {
            "file": self.filename,
            "converted_refs": self.converted_count,
            "unconverted_refs": len(self.unconverted),
            "conversion_percent": self.conversion_percent,
            "replaced_bytes": self.replaced_bytes,
            "total_bytes": self.total_bytes,
            "changed_lines": len(self.changed_lines),
            "total_lines": self.total_lines,
            "kernel_launches": self.kernel_launches,
            "converted_by_api": dict(sorted(self.by_api.items())),
            "converted_by_type": dict(sorted(self.by_type.items())),
            "converted_by_name": dict(sorted(self.converted.items())),
            "unconverted": [u.to_dict() for u in self.unconverted],
            "errors": list(self.errors),
        }

    def stats_rows(self) -> list[tuple[str, str]]:
        """hipify-clang's --print-stats figures as (name, value) rows."""
        rows = [
            ("CONVERTED refs count", str(self.converted_count)),
            ("UNCONVERTED refs count", str(len(self.unconverted))),
            ("CONVERSION %", str(self.conversion_percent)),
            ("REPLACED bytes", str(self.replaced_bytes)),
            ("TOTAL bytes", str(self.total_bytes)),
            ("CHANGED lines of code", str(len(self.changed_lines))),
            ("TOTAL lines of code", str(self.total_lines)),
        ]
        rows += [(f"type: {k}", str(v)) for k, v in sorted(self.by_type.items())]
        rows += [(f"API: {k}", str(v)) for k, v in sorted(self.by_api.items())]
        rows += [(f"name: {k}", str(v)) for k, v in sorted(self.converted.items())]
        unconv = Counter(u.name for u in self.unconverted)
        rows += [(f"unconverted: {k}", str(v)) for k, v in sorted(unconv.items())]
        return rows


@dataclass
class HipifyResult:
    text: str
    report: HipifyReport
    lints: list = field(default_factory=list)  # lints.Lint on the CUDA input and the HIP output

    @property
    def ok(self) -> bool:
        return not self.report.errors

    def to_dict(self) -> dict:
        return {
            "report": self.report.to_dict(),
            "lints": [lint.to_dict() for lint in self.lints],
        }


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
            name, target, reason, row.library, row.section, row.table, api, _section_kind(row.section)
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
def _blas_v2_only() -> frozenset[str]:
    """cuBLAS names that also exist as ``NAME_v2``: with the legacy ``cublas.h`` they are the v1
    (handle-less) functions, which hipBLAS/rocBLAS do not provide."""
    names = mappings.load().by_cuda
    return frozenset(n for n, rows in names.items() if rows[0].library == "CUBLAS_API" and n + "_v2" in names)


def _call_args(win: TokenWindow, i: int) -> tuple[int, list[tuple[int, int]]] | None:
    """For a name at ``win.get(i)`` followed by ``(``: (index of ``)``, token index ranges of args)."""
    j = i + 1
    while (t := win.get(j)) is not None and t.kind == COMMENT:
        j += 1
    if t is None or t.text != "(":
        return None
    depth = 0
    args: list[tuple[int, int]] = []
    first = -1
    k = j - 1
    while (t := win.get(k := k + 1)) is not None:
        if t.kind == COMMENT:
            continue
        text = t.text
        if text in ("(", "[", "{"):
            depth += 1
            if depth == 1:
                continue
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                if first >= 0:
                    args.append((first, k - 1))
                return k, args
        elif text == "," and depth == 1:
            args.append((first, k - 1))
            first = -1
            continue
        elif text == ";" and depth <= 1:
            return None
        if first < 0:
            first = k
    return None


@cache
def _scanner(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    return candidate_scanner(prefixes)


def _ident_prefixes(renames: dict[str, Rename]) -> tuple[str, ...]:
    """Identifier beginnings worth looking up: CUDA's prefixes plus the few renamed names without them."""
    base = ("cu", "CU", "_", "nv", "NV", "half2")
    extra = {
        name for name, r in renames.items() if r.target and r.target != name and not name.startswith(base)
    }
    return base + tuple(sorted(extra))


class _Translator:
    def __init__(self, source: str, options: HipifyOptions, filename: str) -> None:
        self.src = source
        self.opt = options
        self.renames = rename_table(
            options.roc, options.miopen, options.experimental, options.use_hip_data_types
        )
        self.report = HipifyReport(filename, total_lines=source.count("\n"), total_bytes=len(source.encode()))
        self.edits: list[tuple[int, int, str]] = []
        self.lines = LineIndex(source)
        self.inserted: set[str] = set()
        self.scanner = _scanner(_ident_prefixes(self.renames))
        self._own: dict[str, bool] = {}
        self._kernels: frozenset[str] | None = None
        self.calls = call_rewrites.rules(options.roc, options.miopen)
        self.overloads = call_rewrites.OVERLOADS if not (options.roc or options.miopen) else {}
        self.special = frozenset(self.calls) | frozenset(self.overloads) | _blas_v2_only()
        # argument moves, applied after the scan: (span to replace, span whose translated text goes
        # there, or None to delete); a zero-width span appends ", text"
        self.moves: list[tuple[tuple[int, int], tuple[int, int] | None]] = []

    def _renamed(self, name: str) -> str | None:
        """The output name of the tree file an include names (None when it is not renamed)."""
        target = "/" + name.lstrip("./")
        for src, out_name in self.opt.renamed_sources:
            if src.endswith(target):
                return out_name
        return None

    def _kernel_names(self) -> frozenset[str]:
        """``__global__`` functions of this file and (``project_kernels``) of its project."""
        if self._kernels is None:
            self._kernels = kernel_names(self.src) | self.opt.project_kernels
        return self._kernels

    def _is_own(self, name: str) -> bool:
        """Whether the file (or, via ``project_names``, its project) defines ``name`` itself
        (``#define cudaCheck(err)``, ``void cuda_check(...)``): CUDA-looking, but the project's, so
        never reported as an unknown API. Looks only at the name's own occurrences (cached)."""
        known = self._own.get(name)
        if known is None:
            known = name in self.opt.project_names or _defines(self.src, name)
            self._own[name] = known
        return known

    # -- edits -----------------------------------------------------------------------------
    def edit(self, start: int, end: int, text: str) -> None:
        self.edits.append((start, end, text))

    def render(self, start: int, end: int) -> str:
        """Source text of [start, end) with the edits that lie inside it applied."""
        edits = self.edits
        i = bisect_left(edits, (start, start, ""))
        out = []
        pos = start
        while i < len(edits) and edits[i][0] < end:
            s, e, text = edits[i]
            if s >= pos and e <= end:
                out.append(self.src[pos:s])
                out.append(text)
                pos = e
            i += 1
        out.append(self.src[pos:end])
        return "".join(out)

    # -- passes ----------------------------------------------------------------------------
    def run(self) -> str:
        renames = self.renames
        launches: list[int] = []
        template_kernels: set[str] = set()
        first_include = -1
        pragma_once = -1
        last_directive: Token | None = None
        src = self.src
        edits = self.edits
        report = self.report
        special = self.special
        half2_vars: set[str] = set()
        skipped: list[tuple[int, int]] = []  # comments and literals, for the half2 pass
        excluded = []
        if self.opt.skip_excluded_blocks:
            own_headers = any(name not in INCLUDES for name in _QUOTED_INCLUDE.findall(src))
            excluded = pp_blocks.excluded_blocks(src, open_world=own_headers)
        ex_i = 0
        ex_start, ex_end = excluded[0] if excluded else (-1, -1)
        for m in self.scanner.finditer(src):
            kind = m.lastgroup
            if excluded:
                at = m.end()
                while at > ex_end and ex_i < len(excluded):
                    skipped.append(excluded[ex_i])
                    ex_i += 1
                    ex_start, ex_end = excluded[ex_i] if ex_i < len(excluded) else (-1, -1)
                if ex_start < at <= ex_end:
                    self._excluded_token(m)
                    continue
            if kind == "ident":
                text = m.group("ident")
                r = renames.get(text)
                if r is not None and r.target is not None and text not in special:
                    # the common case, kept lean: a supported name, no argument rewrite
                    if r.target != text:
                        edits.append((m.start("ident"), m.end("ident"), r.target))
                    report.converted[text] += 1
                    report.by_api[r.api] += 1
                    report.by_type[r.kind] += 1
                    continue
                tok = Token(IDENT, text, m.start("ident"), m.end("ident"))
                if r is not None:
                    self._rename(tok, r)
                elif text == "__global__":
                    name = self._template_kernel(tok)
                    if name:
                        template_kernels.add(name)
                elif text == "cub":
                    self._cub_namespace(tok)
                elif text in THRUST_BACKENDS:
                    self._thrust_backend(tok)
                elif text == "half2" and self.opt.undocumented_features:
                    self._half2_declaration(tok, half2_vars)
                elif _looks_cuda(text) and not self._is_own(text):
                    self._unconverted(tok, text, "unknown", "", "not in the HIPIFY mapping tables")
                continue
            tok = match_token(src, m)
            if tok is None:
                continue
            kind = tok.kind
            if kind in (COMMENT, STRING, CHAR):
                skipped.append((tok.start, tok.end))
            if kind == PUNCT:
                launches.append(tok.start)
            elif kind == STRING:
                if self.opt.translate_strings and tok.text.startswith('"'):
                    self._rewrite_string(tok)
            elif kind == INCLUDE:
                last_directive = tok
                if first_include < 0:
                    first_include = tok.start + tok.text.index("#")
                self._include(tok)
            elif kind == DIRECTIVE:
                last_directive = tok
                if pragma_once < 0 and tok.text.endswith("pragma"):
                    nxt = TokenWindow(self.src, tok.end).get(0)
                    if nxt is not None and nxt.text == "once":
                        pragma_once = nxt.end
        skipped.extend(excluded[ex_i:])
        skipped.sort()
        if half2_vars:
            self._half2_members(half2_vars, skipped)
        self.edits.sort(key=lambda e: (e[0], e[1]))
        if self.moves:
            self._move_arguments()
        self._launches(launches, template_kernels, skipped)
        if self.opt.insert_runtime_header and "runtime" not in self.inserted:
            where = self._header_insert_point(last_directive, pragma_once, first_include)
            self.edits.append((where, where, "\n#include <hip/hip_runtime.h>\n"))
            self.edits.sort(key=lambda e: (e[0], e[1]))
        return self._apply()

    def _excluded_token(self, m: re.Match[str]) -> None:
        """A token in a conditional block the compiler skips: like hipify-clang, which rewrites such
        blocks only with its raw-token pass, names are renamed (strings too) but no launch, include or
        call argument is rewritten."""
        kind = m.lastgroup
        if kind == "ident":
            text = m.group("ident")
            r = self.renames.get(text)
            if r is not None and r.target is not None:
                tok = Token(IDENT, text, m.start("ident"), m.end("ident"))
                if r.target != text:
                    self.edit(tok.start, tok.end, r.target)
                self._count(text, r.api, r.kind)
            return
        tok = match_token(self.src, m)
        if tok is not None and tok.kind == STRING and self.opt.translate_strings and tok.text.startswith('"'):
            self._rewrite_string(tok)

    def _apply(self) -> str:
        out = []
        pos = 0
        src = self.src
        report = self.report
        for s, e, text in self.edits:
            if s < pos:  # covered by an earlier, wider edit (a rewritten kernel launch)
                continue
            out.append(src[pos:s])
            out.append(text)
            pos = e
            report.replaced_bytes += e - s
            report.changed_lines.add(self.lines.position(s)[0])
        out.append(src[pos:])
        return "".join(out)

    def _unconverted(self, tok: Token, name: str, reason: str, library: str, detail: str) -> None:
        line, col = self.lines.position(tok.start)
        api = LIBRARIES.get(library, (0, library))[1]
        self.report.unconverted.append(Unconverted(name, line, col, reason, api, detail))

    def _count(self, name: str, api: str, kind: str) -> None:
        self.report.converted[name] += 1
        self.report.by_api[api] += 1
        self.report.by_type[kind] += 1

    def _rename(self, tok: Token, r: Rename) -> None:
        legacy_blas = "blas" in self.inserted and "blas_v2" not in self.inserted
        if r.target is not None and legacy_blas and tok.text in _blas_v2_only():
            # legacy cublas.h: the handle-less v1 function, which HIP does not have
            detail = "only the v2 API is supported; include cublas_v2.h"
            self._unconverted(tok, tok.text, "unsupported", r.library, detail)
            return
        if r.target is None:
            if not r.cuda.startswith((*_CUDA_PREFIXES, "__")):
                return  # a math function name (norm, max ...): likely the user's own, not CUDA's
            if r.reason == "experimental":
                detail = "experimental in HIP; translate it with --experimental"
            elif tok.text in WARP_SYNC_BUILTINS:
                detail = WARP_SYNC_DETAIL
            else:
                where = "ROC" if self.opt.roc and r.library in ROC_LIBRARIES else "HIP"
                if self.opt.miopen and r.library in MIOPEN_LIBRARIES:
                    where = "MIOpen"
                detail = f"no {where} equivalent"
            self._unconverted(tok, tok.text, r.reason or "unsupported", r.library, detail)
            return
        target = r.target
        if tok.text in self.calls or tok.text in self.overloads:
            target = self._call_rewrite(tok) or target
        if target != tok.text:
            self.edit(tok.start, tok.end, target)
        self._count(tok.text, r.api, r.kind)

    def _call_rewrite(self, tok: Token) -> str | None:
        """hipify-clang's per-call argument rewrites (``call_rewrites``); returns the overload's
        name when the number of arguments selects one."""
        name = tok.text
        win = TokenWindow(self.src, tok.start)
        call = _call_args(win, 0)
        if call is None or not call[1]:
            return None
        close, args = call
        if name in self.overloads:
            return self.overloads[name].get(len(args))
        n = len(args)
        close_at = win.get(close).start

        def first(k: int) -> int:
            return win.get(args[k][0]).start

        def last(k: int) -> int:
            return win.get(args[k][1]).end

        for k, op, value in self.calls.get(name, ()):
            if op in ("symbol", "cast_size_t") and k < n:
                opener = "HIP_SYMBOL(" if op == "symbol" else "reinterpret_cast<size_t*>("
                self.edit(first(k), first(k), opener)
                self.edit(last(k), last(k), ")")
            elif op == "add":
                if k < n:
                    self.edit(first(k), first(k), value + ", ")
                else:
                    self.edit(close_at, close_at, ", " + value)
            elif op == "append" and k == n:
                self.edit(close_at, close_at, ", " + value)
            elif op == "kernel_cast" and k < n:
                j = k  # `kernel<T, 256>`: the template arguments' commas split it; join them back
                while j + 1 < n and self.src.count("<", first(k), last(j)) > self.src.count(
                    ">", first(k), last(j)
                ):
                    j += 1
                arg = self.src[first(k) : last(j)]
                if arg.split("<")[0].strip() in self._kernel_names() and arg.count("<") == arg.count(">"):
                    self.edit(first(k), first(k), "reinterpret_cast<const void*>(")
                    self.edit(last(j), last(j), ")")
            elif op == "replace" and k < n:
                self.edit(first(k), last(k), value)
            elif op == "remove" and k < n:
                if k + 1 < n:
                    self.edit(first(k), first(k + 1), "")
                elif k > 0:
                    self.edit(last(k - 1), close_at, "")
            elif op == "swap":
                j, count = (int(v) for v in value.split())
                if max(k, j) + count <= n:
                    for i in range(count):
                        a, b = (first(k + i), last(k + i)), (first(j + i), last(j + i))
                        self.moves += [(a, b), (b, a)]
            elif op == "to_end":
                count = int(value)
                if k + count < n:  # moved arguments leave with their trailing comma
                    self.moves.append(((first(k), first(k + count)), None))
                    self.moves.append(((close_at, close_at), (first(k), last(k + count - 1))))
            elif op == "copy" and k < n:
                text = self.src[first(k) : last(k)]
                to = int(value)
                if to < n:
                    self.edit(first(to), first(to), text + ", ")
                else:
                    self.edit(close_at, close_at, ", " + text)
        return None

    def _move_arguments(self) -> None:
        """Apply the argument moves once every rename inside the arguments is known; the renames
        inside a replaced span are dropped (its new text already carries them)."""
        new_edits = []
        for (a, b), source in self.moves:
            if source is None:
                new_edits.append((a, b, ""))
                continue
            text = self.render(*source)
            new_edits.append((a, b, ", " + text if a == b else text))
        spans = sorted((a, b) for a, b, _ in new_edits if a < b)
        starts = [a for a, _ in spans]
        kept = []
        for e in self.edits:
            i = bisect_left(starts, e[0] + 1) - 1
            if i >= 0 and e[0] < spans[i][1] and e[1] <= spans[i][1]:
                continue  # inside a replaced span (an insertion right after it stays)
            kept.append(e)
        self.edits = sorted(kept + new_edits, key=lambda e: (e[0], e[1]))

    def _half2_declaration(self, tok: Token, names: set[str]) -> None:
        """Remember variables declared ``half2 name`` (not pointers) for ``_half2_members``."""
        win = TokenWindow(self.src, tok.end)
        k = 0
        while (name := win.get(k)) is not None and name.kind == IDENT:
            after = win.get(k + 1)
            if after is None or after.text not in (";", "=", ",", ")", "[", "{", "("):
                return
            names.add(name.text)
            if after.text != ",":
                return
            k += 2
            # `half2 a, b;` declares both; skip an initializer-free list only

    def _half2_members(self, names: set[str], skipped: list[tuple[int, int]]) -> None:
        """hipify-clang's undocumented-feature fix: ``h.x`` on a ``half2`` is ``unsigned short`` in
        HIP, so it becomes ``reinterpret_cast<half&>(h.x)``."""
        pattern = re.compile(
            r"(?<![\w$.>])(?:" + "|".join(map(re.escape, sorted(names))) + r")[ \t]*\.[ \t]*[xy](?![\w$])"
        )
        starts = [s for s, _ in skipped]
        src = self.src
        for m in pattern.finditer(src):
            i = bisect_left(starts, m.start() + 1) - 1
            if i >= 0 and skipped[i][0] <= m.start() < skipped[i][1]:
                continue  # inside a comment or literal
            if src[max(0, m.start() - 23) : m.start()].endswith("reinterpret_cast<half&>("):
                continue
            self.edit(m.start(), m.start(), "reinterpret_cast<half&>(")
            self.edit(m.end(), m.end(), ")")
            self._count("half2", "CUDA Device API", "half2 member")

    def _cub_namespace(self, tok: Token) -> None:
        """``cub::`` and ``using namespace cub`` -> hipcub (hipCUB mirrors CUB's names)."""
        src = self.src
        qualifier = _SCOPE.match(src, tok.end) is not None
        if qualifier or src[max(0, tok.start - 64) : tok.start].rstrip().endswith("namespace"):
            self.edit(tok.start, tok.end, "hipcub")
            self._count("cub", "CUB API", "namespace")

    def _thrust_backend(self, tok: Token) -> None:
        """``thrust::cuda::par.on(stream)`` -> ``thrust::hip::par.on(stream)`` (rocThrust's backend
        namespace; also ``thrust::system::cuda`` and ``thrust::cuda_cub``)."""
        if _THRUST_QUALIFIER.search(self.src, max(0, tok.start - 48), tok.start):
            self.edit(tok.start, tok.end, THRUST_BACKENDS[tok.text])
            self._count(tok.text, "CUDA RT API", "namespace")

    def _rewrite_string(self, tok: Token) -> None:
        """hipify-clang's rule: each word starting with "cu" up to the next space is looked up whole."""
        s = tok.text[1:-1] if tok.text.endswith('"') and len(tok.text) > 1 else tok.text[1:]
        renames = self.renames
        begin = s.find("cu")
        while begin != -1:
            end = s.find(" ", begin + 4)
            name = s[begin:] if end == -1 else s[begin:end]
            r = renames.get(name)
            if r is not None and r.target is not None:
                pos = tok.start + 1 + begin
                if r.target != name:
                    self.edit(pos, pos + len(name), r.target)
                self._count(name, r.api, "literal")
            if end == -1:
                break
            begin = s.find("cu", end + 1)

    def _include(self, tok: Token) -> None:
        name, angled, at = include_target(tok.text)
        if name in _UNSUPPORTED_HEADERS:
            self._unconverted(tok, name, "unsupported", "", "header has no HIP equivalent")
            return
        entry = INCLUDES.get(name)
        if entry is None:
            if name == "hip/hip_runtime.h":
                self.inserted.add("runtime")  # already HIP: do not add a second one
            elif name.startswith("thrust/system/cuda/"):
                start = tok.start + at + 1 + len("thrust/system/")
                self.edit(start, start + len("cuda"), "hip")
                self._count(name, _HEADER_API_NAMES["runtime"], "include")
            elif self.opt.renamed_sources and (out_name := self._renamed(name)) is not None:
                # `#include "kernels.cu"` of a file translated with the tree to kernels.hip
                base = tok.start + at + 1 + name.rfind("/") + 1
                self.edit(base, tok.start + at + 1 + len(name), out_name)
            return
        hip, roc, kind, api = entry
        to_roc = (self.opt.roc and api in _HEADER_API_ROC) or (self.opt.miopen and api == "dnn")
        new = (roc or hip) if to_roc else hip
        self._count(name, _HEADER_API_NAMES[api], "include")
        if self._exclude(new if to_roc else hip, kind, api):
            hash_at = tok.start + tok.text.index("#")
            self.edit(hash_at, tok.end, "")
            return
        delim = ("<", ">") if angled else ('"', '"')
        text = delim[0] + new + delim[1]
        if name.startswith("cooperative_groups") and "runtime" not in self.inserted:
            # HIP's cooperative-groups headers need hip_runtime.h first (ROCm 5 fails on
            # hipBlockDim_x otherwise); CUDA's nvcc pre-includes the runtime, so code omits it
            self.inserted.add("runtime")
            text = "<hip/hip_runtime.h>\n#include " + text
        self.edit(tok.start + at, tok.end, text)

    def _exclude(self, hip: str, kind: str, api: str) -> bool:
        """hipify-clang's de-duplication: each main header once, a v2 header after its v1 dropped."""
        seen = self.inserted
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

    def _template_kernel(self, tok: Token) -> str | None:
        """Name of the kernel declared by ``__global__`` at ``tok`` if it is a template."""
        src = self.src
        begin = max(src.rfind(";", 0, tok.start), src.rfind("{", 0, tok.start), src.rfind("}", 0, tok.start))
        if not _TEMPLATE_WORD.search(src, begin + 1, tok.start):
            return None
        win = TokenWindow(src, tok.end)
        for k in range(64):
            t = win.get(k)
            if t is None or t.text in (";", "{", "}"):
                return None
            if t.text == "(":
                prev = win.get(k - 1)
                return prev.text if prev is not None and prev.kind == IDENT else None
        return None

    def _macro_launches(
        self,
        launch: Launch,
        macro: tuple[str, list[str], int],
        skipped: list[tuple[int, int]],
        template_kernels: set[str],
    ) -> list[tuple[int, int, str]]:
        """``#define L(k, g, b, ...) k<<<g, b>>>(__VA_ARGS__)`` used as ``L(kern, g, b, x)``: each use
        becomes ``hipLaunchKernelGGL(kern, dim3(g), dim3(b), 0, 0, x)``; the definition stays."""
        name, params, define_end = macro
        src = self.src
        starts = [a for a, _ in skipped]
        out = []
        for m in re.finditer(r"(?<![\w$])" + re.escape(name) + r"[ \t]*\(", src[define_end:]):
            at = define_end + m.start()
            k = bisect_left(starts, at + 1) - 1
            if k >= 0 and skipped[k][0] <= at < skipped[k][1]:
                continue
            win = TokenWindow(src, at)
            call = _call_args(win, 0)
            if call is None:
                continue
            close, arg_ranges = call
            values = [self.render(win.get(a).start, win.get(b).end).strip() for a, b in arg_ranges]
            mapping = dict(zip([p for p in params if p != "..."], values, strict=False))
            if params and params[-1] == "...":
                mapping["__VA_ARGS__"] = ", ".join(values[len(params) - 1 :])

            def subst(text: str, mapping: dict[str, str] = mapping) -> str:
                return _IDENT.sub(lambda mm: mapping.get(mm.group(0), mm.group(0)), text)

            kernel = subst(src[launch.kernel[0] : launch.kernel[1]])
            config = [subst(src[a:b]) for a, b in launch.config]
            args = subst(src[launch.args[0] : launch.args[1]]) if launch.args else None
            base = kernel.split("<")[0].split("::")[-1].strip()
            templated = "<" in kernel or base in template_kernels
            out.append((at, win.get(close).end, hip_launch_call(kernel, config, args, templated)))
        return out

    def _launches(
        self, launches: list[int], template_kernels: set[str], skipped: list[tuple[int, int]]
    ) -> None:
        hip_syntax = self.opt.hip_kernel_execution_syntax
        new_edits = []
        last_end = -1
        src = self.src
        for pos in launches:
            win = TokenWindow(src, _statement_line_start(src, pos))
            at = win.index_at(pos)
            if src[pos : pos + 3] != "<<<" and _prev_text(win, at) == "operator":
                continue  # 'operator<< <T>(...)': a template operator, not a launch
            try:
                launch = parse_launch(win, at)
            except LaunchError as exc:
                line, col = self.lines.position(exc.offset)
                self.report.errors.append(f"{self.report.filename}:{line}:{col}: {exc}")
                continue
            self.report.kernel_launches += 1
            self.report.by_type["kernel_launch"] += 1
            if launch.spaced and not hip_syntax:
                new_edits.append((launch.open[0], launch.open[1], "<<<"))
                new_edits.append((launch.close[0], launch.close[1], ">>>"))
            if not hip_syntax or launch.start < last_end:
                continue
            kernel_text = src[launch.kernel[0] : launch.kernel[1]].strip()
            macro = _macro_around(src, pos)
            if macro is not None and kernel_text in macro[1]:
                # the kernel is a macro parameter: like hipify-clang, rewrite each use of the macro
                new_edits.extend(self._macro_launches(launch, macro, skipped, template_kernels))
                continue
            base = kernel_text.split("<")[0].split("::")[-1].strip()
            text = hip_launch_text(launch, self.render, base in template_kernels)
            new_edits.append((launch.start, launch.end, text))
            last_end = launch.end
        if new_edits:
            new_edits.sort(key=lambda e: (e[0], e[1]))
            kept = []
            j = 0
            for e in self.edits:  # drop the edits a rewritten launch already carries
                while j < len(new_edits) and new_edits[j][1] <= e[0]:
                    j += 1
                if (
                    j < len(new_edits)
                    and new_edits[j][0] <= e[0] < new_edits[j][1]
                    and e[1] <= new_edits[j][1]
                ):
                    continue
                kept.append(e)
            self.edits = sorted(kept + new_edits, key=lambda e: (e[0], e[1]))

    def _header_insert_point(self, last_directive: Token | None, pragma_once: int, first_include: int) -> int:
        guard = _include_guard(self.src, last_directive)
        if guard >= 0 and pragma_once >= 0:
            return min(guard, pragma_once)
        if guard >= 0:
            return guard
        if pragma_once >= 0:
            return pragma_once
        return first_include if first_include >= 0 else 0


_DEFINE = re.compile(r"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]*)"', re.MULTILINE)


def _macro_around(src: str, pos: int) -> tuple[str, list[str], int] | None:
    """(name, parameters, end offset) of the function-like ``#define`` whose body holds ``pos``."""
    start = src.rfind("\n", 0, pos) + 1
    while start > 1 and src[max(0, start - 3) : start].rstrip("\r\n").endswith("\\"):
        start = src.rfind("\n", 0, start - 1) + 1
    m = _DEFINE.match(src, start)
    if m is None:
        return None
    end = pos
    while True:
        nl = src.find("\n", end)
        if nl == -1:
            end = len(src)
            break
        if src[max(0, nl - 2) : nl].rstrip("\r").endswith("\\"):
            end = nl + 1
            continue
        end = nl
        break
    params = [p.strip() for p in m.group(2).split(",") if p.strip()]
    return m.group(1), params, end


def _statement_line_start(src: str, pos: int) -> int:
    """Where the statement holding the ``<<<`` at ``pos`` begins (just after the last ``;``, ``{``
    or ``}``): a kernel name with template arguments may sit lines above its ``<<<``. The look-back
    is bounded, so the scan stays linear."""
    floor = max(0, pos - 4096)
    cut = max(src.rfind(";", floor, pos), src.rfind("{", floor, pos), src.rfind("}", floor, pos))
    if cut >= 0:
        return cut + 1
    return src.rfind("\n", 0, floor) + 1 if floor else 0


def _defines(src: str, name: str) -> bool:
    """``#define NAME`` or a ``TYPE NAME(`` function head somewhere in ``src``."""
    at = src.find(name)
    while at != -1:
        end = at + len(name)
        if (at == 0 or not (src[at - 1].isalnum() or src[at - 1] == "_")) and not (
            end < len(src) and (src[end].isalnum() or src[end] == "_")
        ):
            head = src[src.rfind("\n", 0, at) + 1 : at]
            if _DEFINE_HEAD.search(head) or (
                _FUNCTION_HEAD.search(head) and src[end : end + 64].lstrip().startswith("(")
            ):
                return True
        at = src.find(name, end)
    return False


def _prev_text(win: TokenWindow, i: int) -> str:
    while i > 0:
        i -= 1
        t = win.get(i)
        if t is not None and t.kind != COMMENT:
            return t.text
    return ""


def _looks_cuda(name: str) -> bool:
    """``cudaFoo``/``cublasFoo``/``CUDA_FOO``/``CU_FOO``/``cuFoo``: a CUDA API spelling, not ``cute``."""
    if name.startswith(("cuda", "cublas", "curand", "cudnn", "cufft", "cusparse", "cusolver")):
        # camelCase like the APIs; snake_case (cuda_check, cublas_handle) is the project's own
        rest = name[4:] if name.startswith("cuda") else name.lstrip("abcdefghijklmnopqrstuvwxyz")
        return bool(rest) and rest[0].isupper()
    if name.startswith(("CUDA_", "CUBLAS_", "CURAND_", "CUDNN_", "CUFFT_", "CUSPARSE_", "CUSOLVER_", "CU_")):
        return name.isupper() or "_" in name[3:]
    return len(name) > 3 and name[:2] == "cu" and name[2].isupper() and name[3].islower()


def _section_kind(section: str) -> str:
    """'11. Memory Management' -> 'memory management'."""
    head, _, rest = section.partition(". ")
    text = rest if head.isdigit() else section
    return text.replace("[DEPRECATED]", "").replace("[REMOVED]", "").strip().lower() or "other"


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


def check_text(data: bytes, filename: str = "<stdin>") -> str:
    """Decode input bytes, refusing what is not C/C++ text (binary, non-UTF-8, empty, huge)."""
    if not data.strip():
        raise HipbotError(f"{filename}: input is empty")
    if len(data) > MAX_INPUT_BYTES:
        raise HipbotError(
            f"{filename}: input is {len(data) // (1024 * 1024)} MiB; the limit is {MAX_INPUT_BYTES // (1024 * 1024)} MiB"
        )
    if b"\0" in data[:65536]:
        raise HipbotError(f"{filename}: looks like a binary file (NUL bytes), not CUDA source")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise HipbotError(
            f"{filename}: not valid UTF-8 (line {line}, byte offset {exc.start})",
            hint="convert the file to UTF-8 first, e.g. iconv -f latin1 -t utf-8",
        ) from exc
    return text.removeprefix("\ufeff")


def translate(source: str, options: HipifyOptions | None = None, filename: str = "<stdin>") -> HipifyResult:
    """Translate CUDA source text to HIP. Never raises for odd input: problems go in ``report.errors``."""
    options = options or HipifyOptions()
    problem = None
    if not source.strip():
        problem = "input is empty"
    elif len(source) > MAX_INPUT_BYTES:
        problem = f"input is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB"
    elif "\0" in source[:65536]:
        problem = "input looks binary (NUL characters), not CUDA source"
    if problem:
        report = HipifyReport(filename)
        report.errors.append(f"{filename}: {problem}")
        return HipifyResult(source, report, [])
    translator = _Translator(source, options, filename)
    text = translator.run()
    result = HipifyResult(text, translator.report)
    if options.lint:
        from hipbot.agents.hipify import lints

        result.lints = lints.lint_translation(source, text, filename)
    return result


SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cxx", ".cc", ".c", ".h", ".hpp", ".hxx", ".inl")


@dataclass
class FileOutcome:
    source: Path
    output: Path | None
    result: HipifyResult | None
    error: str | None = None


def output_path(source: Path, root: Path | None, out_dir: Path | None, inplace: bool) -> Path:
    """Where the translation of ``source`` goes: ``x.cu`` -> ``x.hip`` beside it or under ``out_dir``
    (keeping the tree below ``root``), or the file itself with ``inplace``."""
    if inplace:
        return source
    name = source.with_suffix(".hip").name if source.suffix in (".cu",) else source.name
    if out_dir is None:
        if source.suffix != ".cu":
            return source.with_name(source.stem + ".hip" + source.suffix)
        return source.with_name(name)
    rel = source.relative_to(root).parent if root is not None else Path()
    return out_dir / rel / name


def own_names(source: str) -> frozenset[str]:
    """Names a source defines itself: ``#define NAME`` and ``TYPE NAME(`` function heads."""
    return frozenset(_OWN_MACRO.findall(source)) | frozenset(_OWN_FUNCTION.findall(source))


def kernel_names(source: str) -> frozenset[str]:
    """Names declared ``__global__`` (``__launch_bounds__(...)`` and template heads allowed)."""
    return frozenset(_KERNEL_NAME.findall(source))


def project_names(sources: list[Path]) -> tuple[frozenset[str], frozenset[str]]:
    """``own_names`` and ``kernel_names`` over a whole tree, so that ``cudaCheck`` defined in
    ``common.h`` is not reported as an unknown CUDA API in the ``.cu`` files that use it, and a
    kernel declared in a ``.cuh`` is known where it is passed by name. Unreadable files are skipped
    here (translating them reports why)."""
    names: set[str] = set()
    kernels: set[str] = set()
    for path in sources:
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        names |= own_names(text)
        kernels |= kernel_names(text)
    return frozenset(names), frozenset(kernels)


def collect_sources(paths: list[Path]) -> list[tuple[Path, Path | None]]:
    """Files to translate, each with the directory it was found under (None for a file argument)."""
    found: list[tuple[Path, Path | None]] = []
    for p in paths:
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for f in sorted(filenames):
                    if f.endswith(SOURCE_SUFFIXES):
                        found.append((Path(dirpath) / f, p))
        elif p.is_file():
            found.append((p, None))
        else:
            raise HipbotError(f"no such file or directory: {p}")
    return found


def translate_path(
    source: Path,
    options: HipifyOptions | None = None,
    *,
    root: Path | None = None,
    out_dir: Path | None = None,
    inplace: bool = False,
    write: bool = True,
) -> FileOutcome:
    """Translate one file and write the result (``.prehip`` backup when in place). A file that did not
    translate cleanly (bad bytes, unbalanced ``<<<``) is never written in place."""
    source = Path(source)
    try:
        text = check_text(source.read_bytes(), str(source))
    except HipbotError as exc:
        return FileOutcome(source, None, None, str(exc))
    except OSError as exc:
        return FileOutcome(source, None, None, f"{source}: cannot read ({exc.strerror})")
    result = translate(text, options, str(source))
    target = output_path(source, root, out_dir, inplace)
    if not result.ok:
        return FileOutcome(source, None, result, "; ".join(result.report.errors))
    if write:
        if inplace:
            backup = source.with_name(source.name + ".prehip")
            backup.write_bytes(source.read_bytes())
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".hipbot-tmp")
        tmp.write_text(result.text, encoding="utf-8")
        tmp.replace(target)
    return FileOutcome(source, target, result)
