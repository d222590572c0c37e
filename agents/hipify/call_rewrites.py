"""The argument rewrites hipify-clang applies to some calls, beyond renaming the function.

Each rule belongs to a mode, as in hipify-clang: "hip" (neither ``--roc`` nor ``--miopen``), "roc"
(``--roc`` alone: rocSPARSE signatures) or "miopen" (``--roc --miopen``: MIOpen signatures).
Argument numbers refer to the original call. Operations:

* ``symbol``: wrap the argument in ``HIP_SYMBOL(...)``;
* ``cast_size_t``: wrap it in ``reinterpret_cast<size_t*>(...)``;
* ``add``: insert a constant before argument k, or append it when the call has fewer arguments;
* ``append``: append a constant when the call has exactly k arguments (a missing last one);
* ``replace``: replace the argument with a constant;
* ``remove``: drop the argument (and its comma);
* ``copy``: insert a copy of argument k before argument ``value`` (or append it).

* ``swap``: ``value`` is "j count": arguments k.. and j.. (count of each) trade places, the text
  between arguments staying where it is;
* ``to_end``: move ``value`` arguments from k to the end of the call.
The last two are hipify-clang's argument moves for MIOpen (cuDNN orders some arguments differently).

``ALL_MODES`` holds rewrites of our own that real projects need to compile, in every mode:

* ``append`` of arguments CUDA's C++ API gives a default and HIP's does not (a CUDA call that
  leaves them out does not compile under HIP);
* ``kernel_cast``: a kernel passed by name where HIP takes ``const void*`` (HIP has no template
  overload for these) is wrapped in ``reinterpret_cast<const void*>(...)``; only names the file or
  project declares ``__global__``, so a ``void *`` variable is left as written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hipbot.agents.hipify.cpp_tokens import COMMENT, TokenSeq

SOLVE_AUTO = "rocsparse_solve_policy_auto"
ANALYSIS_FORCE = "rocsparse_analysis_policy_force"

Op = tuple[int, str, str]  # (argument index, operation, value)

HIP: dict[str, list[Op]] = {
    "cudaMemcpyToSymbol": [(0, "symbol", "")],
    "cudaMemcpyToSymbolAsync": [(0, "symbol", "")],
    "cudaGetSymbolSize": [(1, "symbol", "")],
    "cudaGetSymbolAddress": [(1, "symbol", "")],
    "cudaMemcpyFromSymbol": [(1, "symbol", "")],
    "cudaMemcpyFromSymbolAsync": [(1, "symbol", "")],
    "cudaGraphAddMemcpyNodeToSymbol": [(4, "symbol", "")],
    "cudaGraphAddMemcpyNodeFromSymbol": [(5, "symbol", "")],
    "cudaGraphMemcpyNodeSetParamsToSymbol": [(1, "symbol", "")],
    "cudaGraphMemcpyNodeSetParamsFromSymbol": [(2, "symbol", "")],
    "cudaGraphExecMemcpyNodeSetParamsToSymbol": [(2, "symbol", "")],
    "cudaGraphExecMemcpyNodeSetParamsFromSymbol": [(3, "symbol", "")],
    "cudaGetTextureReference": [(1, "symbol", "")],
    "cudaMallocHost": [(2, "append", "hipHostMallocDefault")],
    "cuOccupancyMaxPotentialBlockSize": [(3, "remove", "")],
    "cuOccupancyMaxPotentialBlockSizeWithFlags": [(3, "remove", "")],
    "cusparseSpSM_solve": [(10, "add", "nullptr")],
}

ALL_MODES: dict[str, list[Op]] = {
    "cudaMalloc3DArray": [(3, "append", "0")],
    "cudaStreamWaitEvent": [(2, "append", "0")],
    "cudaLaunchCooperativeKernel": [(4, "append", "0, 0"), (5, "append", "0")],
    "cudaFuncSetAttribute": [(0, "kernel_cast", "")],
    "cudaFuncGetAttributes": [(1, "kernel_cast", "")],
    "cudaFuncSetCacheConfig": [(0, "kernel_cast", "")],
    "cudaFuncSetSharedMemConfig": [(0, "kernel_cast", "")],
}

# Overloads chosen by the number of arguments ("hip" mode only, as in hipify-clang).
OVERLOADS: dict[str, dict[int, str]] = {
    "cudaEventCreate": {1: "hipEventCreate", 2: "hipEventCreateWithFlags"},
    "cudaGraphInstantiate": {5: "hipGraphInstantiate", 3: "hipGraphInstantiateWithFlags"},
}


def _each(prefixes: str, suffix: str, ops: list[Op]) -> dict[str, list[Op]]:
    return {f"cusparse{p}{suffix}": ops for p in prefixes}


ROC: dict[str, list[Op]] = {
    **_each("SDCZ", "gpsvInterleavedBatch", [(9, "copy", "10")]),
    **_each("SDCZ", "gpsvInterleavedBatch_bufferSizeExt", [(9, "copy", "10")]),
    **_each("SDCZ", "gtsvInterleavedBatch", [(7, "copy", "8")]),
    **_each("SDCZ", "gtsvInterleavedBatch_bufferSizeExt", [(7, "copy", "8")]),
    **_each("SDCZ", "csrilu02", [(8, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "csrilu02_analysis", [(8, "replace", ANALYSIS_FORCE), (9, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "csric02_analysis", [(8, "replace", ANALYSIS_FORCE), (9, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "csric02_bufferSize", [(8, "cast_size_t", "")]),
    **_each("SDCZ", "bsrilu02", [(10, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "bsrilu02_analysis", [(10, "replace", ANALYSIS_FORCE), (11, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "bsric02", [(10, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "bsric02_analysis", [(10, "replace", ANALYSIS_FORCE), (11, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "bsric02_bufferSize", [(10, "cast_size_t", "")]),
    **_each("SDCZ", "bsrsm2_bufferSize", [(13, "cast_size_t", "")]),
    **_each("SDCZ", "csrsm2_solve", [(15, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "csrsm2_analysis", [(15, "replace", ANALYSIS_FORCE), (16, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "csrsm2_bufferSizeExt", [(15, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "gemvi_bufferSize", [(5, "cast_size_t", "")]),
    **_each("SDCZ", "csrsv2_solve", [(12, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "csrsv2_analysis", [(9, "replace", ANALYSIS_FORCE), (10, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "csrmv", [(10, "add", "nullptr")]),
    **_each("SDCZ", "bsrsv2_solve", [(14, "replace", SOLVE_AUTO)]),
    **_each("SDCZ", "bsrsv2_analysis", [(11, "replace", ANALYSIS_FORCE), (12, "add", SOLVE_AUTO)]),
    **_each("SDCZ", "csrmm", [(2, "add", "rocsparse_operation_none")]),
    **_each("SDCZ", "csrgeam2", [(19, "remove", "")]),
    **_each("SDCZ", "bsrsv2_bufferSize", [(11, "cast_size_t", "")]),
    **_each("SDCZ", "csrsv2_bufferSize", [(9, "cast_size_t", "")]),
    **_each("SDCZ", "csrgemm2", [(1, "add", "rocsparse_operation_none, rocsparse_operation_none")]),
    **_each("SDCZ", "csrilu02_bufferSize", [(8, "cast_size_t", "")]),
    **_each("SDCZ", "bsrilu02_bufferSize", [(10, "cast_size_t", "")]),
    "cusparseCsr2cscEx2_bufferSize": [(k, "remove", "") for k in (4, 7, 8, 9, 10, 12, 13)],
    "cusparseSparseToDense": [(4, "add", "nullptr")],
    "cusparseSparseToDense_bufferSize": [(5, "add", "nullptr")],
    "cusparseDenseToSparse_bufferSize": [(5, "add", "nullptr")],
    "cusparseDenseToSparse_analysis": [(4, "add", "nullptr")],
    "cusparseSpMM_bufferSize": [(10, "add", "rocsparse_spmm_stage_compute"), (12, "add", "nullptr")],
    "cusparseSpSM_analysis": [(9, "replace", "rocsparse_spsm_stage_compute"), (10, "add", "nullptr")],
    "cusparseSpSM_solve": [
        (9, "replace", "rocsparse_spsm_stage_compute"),
        (10, "add", "nullptr"),
        (11, "add", "nullptr"),
    ],
    "cusparseXcsrgeam2Nnz": [(14, "remove", "")],
    "cusparseSpMM": [(10, "add", "rocsparse_spmm_stage_compute, nullptr")],
    "cusparseSpVV_bufferSize": [(7, "add", "nullptr")],
    "cusparseSpVV": [(6, "add", "nullptr")],
    "cusparseSpMV_bufferSize": [(9, "add", "rocsparse_spmv_stage_buffer_size"), (11, "add", "nullptr")],
    "cusparseSpMV": [(9, "add", "rocsparse_spmv_stage_compute")],
    "cusparseSpMM_preprocess": [(10, "add", "rocsparse_spmm_stage_preprocess, nullptr")],
    "cusparseSpSV_bufferSize": [(8, "replace", "rocsparse_spsv_stage_buffer_size"), (10, "add", "nullptr")],
}

MIOPEN: dict[str, list[Op]] = {
    "cudnnGetConvolutionForwardWorkspaceSize": [(1, "swap", "2 1"), (5, "remove", "")],
    "cudnnGetConvolutionBackwardDataWorkspaceSize": [(1, "swap", "2 1"), (5, "remove", "")],
    "cudnnSoftmaxForward": [(1, "to_end", "2")],
    "cudnnSoftmaxBackward": [(1, "to_end", "2")],
    "cudnnConvolutionForward": [(8, "to_end", "2")],
    "cudnnConvolutionBackwardData": [(2, "swap", "4 2"), (8, "to_end", "2")],
    "cudnnRNNBackwardWeights": [(9, "swap", "11 2")],
    "cudnnFindConvolutionForwardAlgorithmEx": [(13, "add", "true")],
    "cudnnSetPooling2dDescriptor": [(2, "remove", "")],
    "cudnnGetPooling2dDescriptor": [(2, "remove", "")],
    "cudnnSetPoolingNdDescriptor": [(2, "remove", "")],
    "cudnnGetPoolingNdDescriptor": [(3, "remove", "")],
    "cudnnSetLRNDescriptor": [(1, "add", "miopenLRNCrossChannel")],
    "cudnnGetRNNDescriptor_v6": [(0, "remove", "")],
    "cudnnSetRNNDescriptor_v6": [(0, "remove", "")],
}

# Names that hipify-clang maps differently from the tables' HIP column in these modes.
MIOPEN_RENAMES = {"cudaStream_t": "miopenAcceleratorQueue_t"}
ROC_RENAMES = {
    "cuComplex": "rocblas_float_complex",
    "cuFloatComplex": "rocblas_float_complex",
    "cuDoubleComplex": "rocblas_double_complex",
}


def rules(roc: bool, miopen: bool) -> dict[str, list[Op]]:
    if roc and miopen:
        return {**ALL_MODES, **MIOPEN}
    if roc:
        return {**ALL_MODES, **ROC}
    if miopen:
        return dict(ALL_MODES)
    return {**ALL_MODES, **HIP}


Edit = tuple[int, int, str]  # (start, end, replacement) in the source text
# (span to replace, span whose translated text goes there, or None to delete); a zero-width span
# appends ", text": applied after the scan, once every rename inside the arguments is known
Move = tuple[tuple[int, int], tuple[int, int] | None]


@dataclass
class CallRewrite:
    """What one call's rewrite asks of the translator."""

    edits: list[Edit] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    overload: str | None = None  # the name the number of arguments selects (``OVERLOADS``)


def call_args(win: TokenSeq, i: int) -> tuple[int, list[tuple[int, int]]] | None:
    """For a name at ``win.get(i)`` followed by ``(``: (index of ``)``, token index ranges of args).
    Nested brackets are passed in one step each (their partners are known), so the cost is the
    number of the call's own top-level tokens."""
    j = i + 1
    while (t := win.get(j)) is not None and t.kind == COMMENT:
        j += 1
    if t is None or t.text != "(":
        return None
    close = win.partner(j)
    if close < 0:
        return None
    args: list[tuple[int, int]] = []
    first = -1
    k = j + 1
    while k < close:
        t = win.get(k)
        if t is None:
            return None
        if t.kind == COMMENT:
            k += 1
            continue
        if t.text == ",":
            args.append((first, k - 1))
            first = -1
        elif t.text == ";":
            return None
        else:
            if first < 0:
                first = k
            if t.text in ("(", "[", "{"):
                k = max(k, win.partner(k))
        k += 1
    if first >= 0:
        args.append((first, close - 1))
    return close, args


def rewrite_call(
    src: str,
    win: TokenSeq,
    ops: list[Op],
    overloads: dict[int, str] | None,
    is_kernel: Callable[[str], bool],
) -> CallRewrite:
    """hipify-clang's argument rewrites ``ops`` for the call whose name is ``win.get(0)``, or the
    overload (of ``overloads``) the number of arguments selects; ``is_kernel`` tells the kernels
    the file or project declares ``__global__``."""
    out = CallRewrite()
    call = call_args(win, 0)
    if call is None or not call[1]:
        return out
    close, args = call
    if overloads is not None:
        out.overload = overloads.get(len(args))
        return out
    n = len(args)
    close_at = win.get(close).start

    def first(k: int) -> int:
        return win.get(args[k][0]).start

    def last(k: int) -> int:
        return win.get(args[k][1]).end

    for k, op, value in ops:
        if op in ("symbol", "cast_size_t") and k < n:
            opener = "HIP_SYMBOL(" if op == "symbol" else "reinterpret_cast<size_t*>("
            out.edits.append((first(k), first(k), opener))
            out.edits.append((last(k), last(k), ")"))
        elif op == "add":
            if k < n:
                out.edits.append((first(k), first(k), value + ", "))
            else:
                out.edits.append((close_at, close_at, ", " + value))
        elif op == "append" and k == n:
            out.edits.append((close_at, close_at, ", " + value))
        elif op == "kernel_cast" and k < n:
            j = k  # `kernel<T, 256>`: the template arguments' commas split it; join them back
            while j + 1 < n and src.count("<", first(k), last(j)) > src.count(">", first(k), last(j)):
                j += 1
            arg = src[first(k) : last(j)]
            if is_kernel(arg.split("<")[0].strip()) and arg.count("<") == arg.count(">"):
                out.edits.append((first(k), first(k), "reinterpret_cast<const void*>("))
                out.edits.append((last(j), last(j), ")"))
        elif op == "replace" and k < n:
            out.edits.append((first(k), last(k), value))
        elif op == "remove" and k < n:
            if k + 1 < n:
                out.edits.append((first(k), first(k + 1), ""))
            elif k > 0:
                out.edits.append((last(k - 1), close_at, ""))
        elif op == "swap":
            j, count = (int(v) for v in value.split())
            if max(k, j) + count <= n:
                for i in range(count):
                    a, b = (first(k + i), last(k + i)), (first(j + i), last(j + i))
                    out.moves += [(a, b), (b, a)]
        elif op == "to_end":
            count = int(value)
            if k + count < n:  # moved arguments leave with their trailing comma
                out.moves.append(((first(k), first(k + count)), None))
                out.moves.append(((close_at, close_at), (first(k), last(k + count - 1))))
        elif op == "copy" and k < n:
            text = src[first(k) : last(k)]
            to = int(value)
            if to < n:
                out.edits.append((first(to), first(to), text + ", "))
            else:
                out.edits.append((close_at, close_at, ", " + text))
    return out
