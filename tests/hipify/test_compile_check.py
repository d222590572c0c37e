"""Compile checks with the real hipcc in its sandbox (a few runs only: each costs ~1-2 s).

The snippet is hostile in tests/hipify/test_sandbox.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.hipify.compile_check import check, compiler_args
from hipbot.agents.hipify.translate import HipifyOptions, translate

CUDA_SAXPY = """#include <cuda_runtime.h>
#include <cstdio>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T>
__global__ void fill(T *p, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main() {
  const int n = 1 << 20;
  float *x, *y;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaStream_t s;
  cudaStreamCreate(&s);
  fill<float><<<(n + 255) / 256, 256, 0, s>>>(x, 1.0f, n);
  saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) printf("%s\\n", cudaGetErrorString(err));
  cudaFree(x);
  cudaFree(y);
  return 0;
}
"""


@pytest.mark.hipcc
def test_translated_kernels_compile_for_gfx90a_both_launch_syntaxes() -> None:
    for hip_syntax in (False, True):
        hip = translate(CUDA_SAXPY, HipifyOptions(hip_kernel_execution_syntax=hip_syntax)).text
        result = check(hip, "gfx90a", timeout=120)
        assert result.ok, [d.format() for d in result.diagnostics] + [result.error]
        assert result.errors == []


@pytest.mark.hipcc
def test_diagnostics_point_at_translated_lines() -> None:
    hip = translate(CUDA_SAXPY.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + undefined_thing;")).text
    result = check(hip, "gfx90a", timeout=120)
    assert not result.ok
    err = result.errors[0]
    assert "undefined_thing" in err.message
    assert hip.splitlines()[err.line - 1].strip() == err.source_line
    assert "undefined_thing" in err.source_line
    assert result.to_dict()["diagnostics"][0]["line"] == err.line


def test_bad_arch_and_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "not an AMD GPU target" in check("int x;", "sm_80").error
    monkeypatch.setenv("HIPBOT_HIPCC", "/nonexistent/hipcc")
    result = check("int x;\n", "gfx90a")
    assert not result.ok and not result.available


@pytest.mark.hipcc
def test_time_limit_kills_the_compiler() -> None:
    # deep template recursion keeps the front end busy far longer than the limit
    src = (
        "template <int N> struct F { static const long v = F<N - 1>::v + F<N - 2>::v; };\n"
        "template <> struct F<1> { static const long v = 1; };\n"
        "template <> struct F<0> { static const long v = 0; };\n"
        '#define X(n) static_assert(F<n>::v > 0, "");\n'
        + "".join(
            f"template <int N> struct G{i} {{ static const long v = G{i}<N - 1>::v + 1; }};\n"
            f"template <> struct G{i}<0> {{ static const long v = 0; }};\n"
            f'static_assert(G{i}<900>::v == 900, "");\n'
            for i in range(400)
        )
    )
    result = check(src, "gfx90a", timeout=0.5)
    assert not result.ok
    assert "longer than" in (result.error or "")


def test_clang_arguments_after_the_separator_keep_only_what_hipcc_needs(tmp_path: Path) -> None:
    inc = tmp_path / "include"
    args = ["--cuda-path=/usr/local/cuda", "-x", "cuda", "-I", str(inc), "-Isrc", "-D", "USE_FP16", "-DN=4"]
    args += ["-std=c++17", "-include", "pre.h", "--cuda-gpu-arch=sm_80"]
    assert compiler_args(args) == [
        f"-I{inc}",
        f"-I{(Path.cwd() / 'src')}",
        "-DUSE_FP16",
        "-DN=4",
        "-std=c++17",
        "-include",
        "pre.h",
    ]
