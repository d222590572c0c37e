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
    [(b"", "empty"), (b"\x7fELF\x00\x00\x01", "binary"), (b"int caf\xe9;\n", "not valid UTF-8")],
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
