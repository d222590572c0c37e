"""Sources written to make the translator slow (issue 15): every one of them translates in time
linear in its size. These are size checks (20,000 repeats, which took hours when each launch
re-read the file); bench/bench_hostile_hipify.py prints the timings. The time limit given to
``translate`` only turns a regression into a failure instead of a hung test run."""

from __future__ import annotations

import pytest

from hipbot.agents.hipify.translate import HipifyOptions, TranslationTimeout, translate

N = 20_000
HIP_SYNTAX = HipifyOptions(hip_kernel_execution_syntax=True)
GUARD_SECONDS = 120


def test_twenty_thousand_unclosed_launches_each_get_their_error() -> None:
    result = translate("k<<<g,b>>>(" * N, HIP_SYNTAX, "m.cu", time_limit=GUARD_SECONDS)
    assert len(result.report.errors) == N
    assert all("argument list is not closed" in e for e in result.report.errors)
    assert "hipLaunchKernelGGL" not in result.text


def test_twenty_thousand_launches_on_one_line_are_all_rewritten() -> None:
    result = translate("k<<<g,b>>>(x);" * N, HIP_SYNTAX, "m.cu", time_limit=GUARD_SECONDS)
    assert result.report.errors == [] and result.report.kernel_launches == N
    assert result.text.count("hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, 0, x);") == N


@pytest.mark.parametrize(
    ("piece", "translated", "errors"),
    [
        # a call whose arguments are rewritten, never closed
        ("cudaMemcpyToSymbol(", "hipMemcpyToSymbol(", 0),
        # a lint's look around each call on one long line
        ("__shfl_down_sync(", "__shfl_down_sync(", 0),
        # a launch in each macro, each looking for the macro's uses
        ("#define L(k) k<<<1,1>>>()\n", "#define L(k) k<<<1,1>>>()\n", 0),
        # template arguments looked for back over all the earlier launches
        ("> <<<1,1>>>()", "> <<<1,1>>>()", N),
        # a template head looked for before each kernel
        ("__global__ ", "__global__ ", 0),
        ("__CUDA_ARCH__ ", "__CUDA_ARCH__ ", 0),
        ("x = 0xffffffff ", "x = 0xffffffff ", 0),
    ],
)
def test_repeated_pieces_translate_in_linear_time(piece: str, translated: str, errors: int) -> None:
    result = translate(piece * N, HIP_SYNTAX, "m.cu", time_limit=GUARD_SECONDS)
    assert result.text.count(translated) == N
    assert len(result.report.errors) == errors


def test_one_macro_holding_twenty_thousand_launches() -> None:
    body = "#define L(k) \\\n" + "k<<<1,1>>>(); \\\n" * N + "\nL(kern);\n"
    result = translate(body, HIP_SYNTAX, "m.cu", time_limit=GUARD_SECONDS)
    assert "hipLaunchKernelGGL(kern, dim3(1), dim3(1), 0, 0)" in result.text
    assert result.report.kernel_launches == N


def test_twenty_thousand_distinct_unknown_names_are_each_reported() -> None:
    source = "".join(f"cudaNotAnApi{i}(); " for i in range(N))
    result = translate(source, HIP_SYNTAX, "m.cu", time_limit=GUARD_SECONDS)
    assert len(result.report.unconverted) == N


def test_a_time_limit_stops_the_translation_with_a_typed_error() -> None:
    with pytest.raises(TranslationTimeout, match="longer than its 0 s limit") as info:
        translate("k<<<g,b>>>(" * N, HIP_SYNTAX, "m.cu", time_limit=0.0)
    assert info.value.hint and info.value.http_status == 422
    assert translate("cudaMalloc(&p, n);", time_limit=30).text.strip().endswith("hipMalloc(&p, n);")
