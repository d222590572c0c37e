"""``hipbot hipify`` and its hipify-clang option spellings, files, trees, stdin and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hipbot.cli import main

KERNEL = """#include <cuda_runtime.h>
__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }
int main() { float *d; cudaMalloc(&d, 64); k<<<1, 16>>>(d); cudaFree(d); return 0; }
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_file_prints_translation_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    code, out, err = run(capsys, "hipify", str(src))
    assert code == 0
    assert out == KERNEL.replace("cuda_runtime.h", "hip/hip_runtime.h").replace(
        "cudaMalloc", "hipMalloc"
    ).replace("cudaFree", "hipFree")
    assert src.read_text() == KERNEL


def test_hipify_clang_spellings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL + "cublasHandle_t h;\n")
    out_file = tmp_path / "out" / "k.hip"
    code, out, err = run(
        capsys,
        "hipify",
        f"-o={out_file}",
        "-roc",
        "--hip-kernel-execution-syntax",
        "--amap",
        "--skip-excluded-preprocessor-conditional-blocks",
        "--default-preprocessor",
        "--experimental",
        "--use-hip-data-types",
        "--cuda-kernel-execution-syntax",
        str(src),
        "--",
        "-std=c++17",
        "-I",
        "/usr/local/cuda/include",
    )
    assert code == 0, err
    assert out == ""
    text = out_file.read_text()
    assert "hipLaunchKernelGGL(k, dim3(1), dim3(16), 0, 0, d);" in text
    assert "rocblas_handle h;" in text


def test_tree_to_o_dir_and_inplace_with_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "proj"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.cu").write_text(KERNEL)
    (tree / "sub" / "b.cuh").write_text("cudaStream_t s;\n")
    (tree / "notes.txt").write_text("cudaMalloc")
    out_dir = tmp_path / "hip"
    code, _, err = run(capsys, "hipify", str(tree), "-o-dir", str(out_dir), "--no-lints")
    assert code == 0, err
    assert sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file()) == [
        "a.hip",
        "sub/b.cuh",
    ]
    assert "hipStream_t s;" in (out_dir / "sub" / "b.cuh").read_text()
    code, _, err = run(capsys, "hipify", "--inplace", str(tree))
    assert code == 0, err
    assert "hipMalloc" in (tree / "a.cu").read_text()
    assert (tree / "a.cu.prehip").read_text() == KERNEL


def test_inplace_refuses_a_file_that_did_not_translate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.cu"
    text = "void f() { k<<<1, 2(x); cudaFree(p); }\n"
    bad.write_text(text)
    code, _, err = run(capsys, "hipify", "--inplace", "--hip-kernel-execution-syntax", str(bad))
    assert code == 1
    assert "unbalanced '<<<'" in err and "left unchanged" in err and "Traceback" not in err
    assert bad.read_text() == text
    assert not (tmp_path / "bad.cu.prehip").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "empty"), (b"\x7fELF\x00\x00\x01", "binary")],
)
def test_bad_input_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, message: str
) -> None:
    f = tmp_path / "x.cu"
    f.write_bytes(data)
    code, out, err = run(capsys, "hipify", str(f))
    assert code == 1 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_huge_input_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "big.cu"
    f.write_bytes(b"int x;\n" * (17 * 1024 * 1024 // 7 + 1))
    code, _, err = run(capsys, "hipify", str(f))
    assert code == 1 and "limit" in err


def test_stdin_json_report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys

    src = KERNEL + "void g() { cudaLaunchAttributeValue v; int lane = threadIdx.x % 32; }\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.encode())))
    code, out, err = run(capsys, "hipify", "-", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "hipMalloc(&d, 64)" in data["text"]
    assert data["report"]["converted_by_name"]["cudaMalloc"] == 1
    assert data["report"]["converted_by_api"]["CUDA RT API"] >= 3
    assert any(lint["id"] == "AMD001" for lint in data["lints"])


def test_print_stats_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    code, out, err = run(
        capsys, "hipify", "--print-stats", "--print-stats-csv", "-o", str(tmp_path / "k.hip"), str(src)
    )
    assert code == 0
    assert "CONVERTED refs count: 3" in err
    csv_text = (tmp_path / "k.hip.csv").read_text()
    assert "CONVERTED refs count;3" in csv_text
    code, out, err = run(capsys, "hipify", "--examine", str(src))
    assert code == 0 and out == "" and "TOTAL lines of code: 3" in err


@pytest.mark.hipcc
@pytest.mark.hipcc
def test_check_arch_runs_hipcc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL.replace("cudaFree(d);", "cudaFree(d); not_declared();"))
    code, out, err = run(capsys, "hipify", "--check", "gfx90a", str(src))
    assert code == 1
    assert "hipcc check (gfx90a): FAILED" in err and "not_declared" in err
    assert "hipMalloc" in out


# A small multi-file CUDA project of our own: a .cuh header with an error-check macro behind
# CUDA's header guard, a template kernel launched over several lines, a spaced launch, streams,
# events; cuRAND and cuSPARSE host calls in a file of their own (translated and checked as text
# only: this machine's hipRAND/hipSPARSE packages lack the rocRAND/rocSPARSE headers they include).
PROJECT_HEADER = """#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#ifdef __DRIVER_TYPES_H__
#define CUDA_CHECK(call)                                                        \\
  do {                                                                          \\
    cudaError_t err_ = (call);                                                  \\
    if (err_ != cudaSuccess) {                                                  \\
      fprintf(stderr, "%s:%d %s\\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \\
      exit(1);                                                                  \\
    }                                                                           \\
  } while (0)
#endif

template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale(T *x, T a, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] *= a;
}

__global__ void fill(float *x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}
"""

PROJECT_LIBS = """#include <curand.h>
#include <cusparse.h>

void rng(float *d, int n, cudaStream_t stream) {
  curandGenerator_t gen;
  curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_DEFAULT);
  curandSetPseudoRandomGeneratorSeed(gen, 1234ULL);
  curandSetStream(gen, stream);
  curandGenerateUniform(gen, d, n);
  curandDestroyGenerator(gen);
  cusparseHandle_t sparse;
  if (cusparseCreate(&sparse) == CUSPARSE_STATUS_SUCCESS) cusparseDestroy(sparse);
}
"""

PROJECT_MAIN = """#include "kernels.cuh"

int main() {
  const int n = 1 << 12;
  float *d = nullptr;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaFuncSetAttribute(scale<float, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
  CUDA_CHECK(cudaEventRecord(start, stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream, start));
  fill << <(n + 255) / 256, 256, 0, stream >> > (d, 1.0f, n);
  scale<float,
        256>
      <<<(n + 255) / 256, 256, 0, stream>>>(d, 2.0f, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(d));
  printf("%f ms\\n", ms);
  return 0;
}
"""


@pytest.mark.hipcc
def test_multi_file_project_translates_to_a_tree_that_hipcc_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "proj"
    (project / "include").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "include" / "kernels.cuh").write_text(PROJECT_HEADER)
    (project / "src" / "main.cu").write_text(PROJECT_MAIN)
    out_dir = tmp_path / "hip"
    # -I names the CUDA include folder, as in the project's Makefile: --check uses its translation
    args = ["hipify", str(project), "-o-dir", str(out_dir), "--check", "gfx90a", "--json"]
    code, out, err = run(capsys, *args, "--", "-I", str(project / "include"))
    assert code == 0, out + err
    records = {Path(r["file"]).name: r for r in json.loads(out)["files"]}
    assert records["main.cu"]["check"]["ok"] and "check" not in records["kernels.cuh"]
    header = (out_dir / "include" / "kernels.cuh").read_text()
    main_hip = (out_dir / "src" / "main.hip").read_text()
    assert "#ifdef HIP_INCLUDE_HIP_DRIVER_TYPES_H" in header and "hipGetErrorString(err_)" in header
    assert "fill <<<(n + 255) / 256, 256, 0, stream >>> (d, 1.0f, n);" in main_hip
    assert "hipFuncSetAttribute(reinterpret_cast<const void*>(scale<float, 256>)," in main_hip
    libs = tmp_path / "libs.cu"
    libs.write_text(PROJECT_LIBS)
    code, text, _ = run(capsys, "hipify", str(libs))
    assert code == 0
    assert "#include <hiprand/hiprand.h>" in text and "hiprandGenerateUniform(gen, d, n)" in text
    assert "hipsparseCreate(&sparse) == HIPSPARSE_STATUS_SUCCESS" in text


def test_tree_names_defined_in_a_sibling_header_are_not_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "common.h").write_text(
        "#include <cuda_runtime.h>\n"
        "void cuda_check(cudaError_t e, const char *f, int l) {}\n"
        "#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))\n"
    )
    (tmp_path / "k.cu").write_text(
        '#include "common.h"\nint main() { cudaCheck(cudaFree(0)); cudaOddity(); }\n'
    )
    code, out, _ = run(capsys, "hipify", str(tmp_path), "--o-dir", str(tmp_path / "out"), "--json")
    assert code == 0
    files = {Path(r["file"]).name: r for r in json.loads(out)["files"]}
    unknown = [u["name"] for u in files["k.cu"]["report"]["unconverted"]]
    assert unknown == ["cudaOddity"]
    assert "cudaCheck(hipFree(0))" in (tmp_path / "out" / "k.hip").read_text()


def test_tree_includes_of_translated_cu_files_follow_the_rename(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    (src / "detail").mkdir(parents=True)
    (src / "detail" / "kernel.cu").write_text("__global__ void k(float *x) { x[0] = 1; }\n")
    main_cu = '#include "detail/kernel.cu"\n#include "other/absent.cu"\nint main() { k<<<1, 1>>>(0); }\n'
    (src / "main.cu").write_text(main_cu)
    code, _, err = run(capsys, "hipify", str(src), "-o-dir", str(tmp_path / "out"))
    assert code == 0, err
    text = (tmp_path / "out" / "main.hip").read_text()
    assert '#include "detail/kernel.hip"\n#include "other/absent.cu"\n' in text
    assert (tmp_path / "out" / "detail" / "kernel.hip").exists()
    # one file alone: the included .cu is not translated with it, so the include stays
    code, out, _ = run(capsys, "hipify", str(src / "main.cu"))
    assert code == 0 and '#include "detail/kernel.cu"' in out


def test_tree_translated_beside_its_sources_includes_the_translated_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "common").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "common" / "check.h").write_text("#define CHECK(x) x\n")
    (tmp_path / "common" / "ops.cuh").write_text("__device__ float twice(float v) { return 2 * v; }\n")
    (tmp_path / "app" / "main.cu").write_text(
        '#include "../common/check.h"\n#include <ops.cuh>\nint main() { CHECK(cudaDeviceSynchronize()); }\n'
    )
    code, _, err = run(capsys, "hipify", str(tmp_path))
    assert code == 0, err
    text = (tmp_path / "app" / "main.hip").read_text()
    assert '#include "../common/check.hip.h"\n#include <ops.hip.cuh>\n' in text
    assert (tmp_path / "common" / "check.hip.h").exists() and (tmp_path / "common" / "ops.hip.cuh").exists()
