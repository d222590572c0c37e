"""Behaviours hipify-clang shows in its own unit tests, checked on small inputs written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.hipify import pp_blocks
from hipbot.agents.hipify.translate import HipifyOptions, translate
from hipbot.cli import main

SKIP = HipifyOptions(skip_excluded_blocks=True, hip_kernel_execution_syntax=True, lint=False)

CONDITIONALS = """#define HAVE_FAST 1
__global__ void k(int *p) {}
void f(int *p) {
#ifdef NOT_DEFINED_ANYWHERE
  cudaDeviceSynchronize();
  k<<<1, 2>>>(p);
#elif HAVE_FAST && !defined(ALSO_MISSING)
  cudaFree(p);
#else
  cudaMalloc(&p, 4);
#endif
#ifndef NOT_DEFINED_ANYWHERE
  k<<<3, 4>>>(p);
#endif
#if defined(__CUDACC__)
  cudaStreamSynchronize(0);
#else
  cudaDeviceReset();
#endif
}
"""


def test_skip_excluded_blocks_keeps_launches_in_branches_ruled_out_by_the_files_macros() -> None:
    out = translate(CONDITIONALS, SKIP).text
    # ruled out: names are still renamed (hipify-clang's raw-token pass), the launch is not rewritten
    assert "  hipDeviceSynchronize();\n  k<<<1, 2>>>(p);\n" in out
    assert "  hipFree(p);\n" in out
    assert "  hipMalloc(&p, 4);\n" in out
    assert "hipLaunchKernelGGL(k, dim3(3), dim3(4), 0, 0, p);" in out
    # __CUDACC__ comes from the compiler: unknown here, so both branches are translated
    assert "hipStreamSynchronize(0);" in out and "hipDeviceReset();" in out


def test_without_the_option_every_branch_is_translated() -> None:
    out = translate(CONDITIONALS, HipifyOptions(hip_kernel_execution_syntax=True, lint=False)).text
    assert "hipLaunchKernelGGL(k, dim3(1), dim3(2), 0, 0, p);" in out


def test_excluded_blocks_keep_includes_and_call_argument_rewrites_but_rename_macro_bodies() -> None:
    src = (
        "#include <cuda_runtime.h>\n__device__ int sym;\n#ifdef USE_DOUBLE\n#include <cublas_v2.h>\n"
        "#define CPLX cuDoubleComplex\nvoid g(int *h) { cudaMemcpyToSymbol(sym, h, 4); }\n#else\n"
        "#define CPLX cuFloatComplex\nvoid g(int *h) { cudaMemcpyToSymbol(sym, h, 4); }\n#endif\n"
    )
    out = translate(src, SKIP).text
    assert "#include <cublas_v2.h>" in out
    assert "#define CPLX hipDoubleComplex" in out and "#define CPLX hipFloatComplex" in out
    assert "{ hipMemcpyToSymbol(sym, h, 4); }\n#else" in out
    assert "{ hipMemcpyToSymbol(HIP_SYMBOL(sym), h, 4); }\n#endif" in out


def test_excluded_blocks_follow_nesting_and_undef() -> None:
    src = "#define A\n#undef A\n#ifdef A\nx\n#if 1\ny\n#endif\nz\n#endif\nw\n"
    blocks = pp_blocks.excluded_blocks(src)
    assert [src[a:b] for a, b in blocks] == ["x\n#if 1\ny\n#endif\nz\n"]
    assert pp_blocks.excluded_blocks("#if SOME_VERSION >= 3\na\n#else\nb\n#endif\n") == []


def test_malloc_host_spells_out_the_default_flag_whatever_the_pointer() -> None:
    src = (
        "void f(size_t n) {\n  float *typed;\n  void *raw;\n"
        "  cudaMallocHost(&typed, n);\n  cudaMallocHost((void **)&typed, n);\n"
        "  cudaMallocHost(&raw, n);\n  cudaMallocHost(&typed, n, cudaHostAllocMapped);\n}\n"
    )
    out = translate(src, HipifyOptions(lint=False)).text
    assert "hipHostMalloc(&typed, n, hipHostMallocDefault);" in out
    assert "hipHostMalloc((void **)&typed, n, hipHostMallocDefault);" in out
    assert "hipHostMalloc(&raw, n, hipHostMallocDefault);" in out
    assert "hipHostMalloc(&typed, n, hipHostMallocMapped);" in out


@pytest.mark.parametrize(
    "flag", ["--skip-excluded-preprocessor-conditional-blocks", "--default-preprocessor"]
)
def test_cli_skip_flag_spellings(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "c.cu"
    src.write_text("__global__ void k();\nvoid f() {\n#ifdef NEVER_SET\n  k<<<1, 1>>>();\n#endif\n}\n")
    assert main(["hipify", flag, "--hip-kernel-execution-syntax", str(src)]) == 0
    out = capsys.readouterr().out
    assert "  k<<<1, 1>>>();" in out and "hipLaunchKernelGGL" not in out
    assert main(["hipify", "--hip-kernel-execution-syntax", str(src)]) == 0
    assert "hipLaunchKernelGGL(k, dim3(1), dim3(1), 0, 0);" in capsys.readouterr().out


MIOPEN = HipifyOptions(roc=True, miopen=True, lint=False)


def test_miopen_argument_moves() -> None:
    src = (
        "void f() {\n"
        "  s = cudnnSoftmaxForward(h, CUDNN_SOFTMAX_FAST, CUDNN_SOFTMAX_MODE_INSTANCE, a, xd, x, b, yd, y);\n"
        "  s = cudnnConvolutionForward(h, a, xd, x, wd, w, cd, algo, ws, wsn, b, yd, y);\n"
        "  s = cudnnConvolutionBackwardData(h, a, wd, w, dyd, dy, cd, algo, ws, wsn, b, dxd, dx);\n"
        "  s = cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &n);\n"
        "  s = cudnnRNNBackwardWeights(h, r, l, xd, x, hd, hx, yd, y, ws, wsn, dwd, dw, rs, rsn);\n"
        "}\n"
    )
    out = translate(src, MIOPEN).text
    assert (
        "miopenSoftmaxForward_V2(h, a, xd, x, b, yd, y, MIOPEN_SOFTMAX_FAST, MIOPEN_SOFTMAX_MODE_INSTANCE);"
        in out
    )
    assert "miopenConvolutionForward(h, a, xd, x, wd, w, cd, algo, b, yd, y, ws, wsn);" in out
    assert "miopenConvolutionBackwardData(h, a, dyd, dy, wd, w, cd, algo, b, dxd, dx, ws, wsn);" in out
    assert "miopenConvolutionForwardGetWorkSpaceSize(h, wd, xd, cd, yd, &n);" in out
    assert "miopenRNNBackwardWeights(h, r, l, xd, x, hd, hx, yd, y, dwd, dw, ws, wsn, rs, rsn);" in out


def test_moved_arguments_keep_the_line_layout_of_the_rest() -> None:
    src = "void f() {\n  cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_LOG, m, a,\n      yd, y, dyd, dy, b, dxd, dx);\n}\n"
    out = translate(src, MIOPEN).text
    assert (
        "  miopenSoftmaxBackward_V2(h, a,\n      yd, y, dyd, dy, b, dxd, dx, MIOPEN_SOFTMAX_LOG, m);\n" in out
    )
    # hipDNN (no --roc --miopen) keeps cuDNN's order
    plain = translate(src, HipifyOptions(lint=False)).text
    assert "hipdnnSoftmaxBackward(h, HIPDNN_SOFTMAX_LOG, m, a," in plain


def test_a_file_with_its_own_headers_leaves_undefined_names_unknown() -> None:
    body = "__global__ void k();\nvoid f() {\n#ifdef USE_FAST_PATH\n  k<<<1, 1>>>();\n#endif\n}\n"
    alone = translate(body, SKIP).text
    assert "  k<<<1, 1>>>();" in alone
    with_config = translate('#include "config.h"\n' + body, SKIP).text
    assert "hipLaunchKernelGGL(k, dim3(1), dim3(1), 0, 0);" in with_config
    # a CUDA header is not the project's own: the macro is still known to be undefined
    with_cuda = translate('#include "cuda_runtime.h"\n' + body, SKIP).text
    assert "  k<<<1, 1>>>();" in with_cuda


def _bench_filecheck():
    """bench/filecheck.py scores the conformance figure; load it as the bench script does."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "filecheck.py"
    spec = importlib.util.spec_from_file_location("bench_filecheck", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    import sys

    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("checks", "output", "ok"),
    [
        ("// CHECK: a\n// CHECK: b\n", "a b\n", True),  # a later match on the same line counts
        ("// CHECK: a\n// CHECK-NEXT: b\n", "a b\nb\n", False),  # first b is on the same line
        ("// CHECK: a\n// CHECK-NEXT: b\n", "a\nx\nb\n", False),
        ("// CHECK: a\n// CHECK-SAME: c\n", "a b c\n", True),
        ("// CHECK-DAG: y\n// CHECK-DAG: x\n// CHECK: z\n", "x\ny\nz\n", True),
        ("// CHECK-DAG: x\n// CHECK-DAG: x\n", "x\n", False),
        ("// CHECK: a\n// CHECK-NOT: q\n// CHECK: b\n", "q a\nb\nq\n", True),
        ("// CHECK: a\n// CHECK-NOT: q\n// CHECK: b\n", "a\nq\nb\n", False),
        ("// CHECK: v=[[V:[0-9]+]]\n// CHECK: w=[[V]]\n", "v=12\nw=13\n", False),
        ("// CHECK: a{{[0-9]+}}b\n// CHECK-NEXT : never\n", "xa12b\n", True),
        ("// CHECK: x\n", "y // x\n", False),  # comments are blanked as run_test.sh does
    ],
)
def test_bench_filecheck_follows_filecheck_rules(tmp_path: Path, checks: str, output: str, ok: bool) -> None:
    test = tmp_path / "t.cu"
    test.write_text(checks)
    result = _bench_filecheck().score(test, output)
    assert (not result.failed) is ok, result.failed


def test_mtgp32_parameter_header_is_bare_in_hip_mode_and_rocrand_prefixed_with_roc() -> None:
    src = '#include "curand_kernel.h"\n#include "curand_mtgp32dc_p_11213.h"\n'
    hip = translate(src, HipifyOptions(lint=False)).text
    roc = translate(src, HipifyOptions(roc=True, lint=False)).text
    assert '#include "rocrand_mtgp32_11213.h"' in hip
    assert '#include "rocrand/rocrand_mtgp32_11213.h"' in roc
