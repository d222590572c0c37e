"""AMD porting lints: each rule fires on the code it is about, with its doc source, and stays quiet
on portable code."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.hipify.lints import RULES, lint, lint_translation


def ids(src: str) -> list[str]:
    return [x.id for x in lint(src)]


@pytest.mark.parametrize(
    ("src", "rule"),
    [
        ("int lane = threadIdx.x % 32;", "AMD001"),
        ("int lane = tid & 31;", "AMD001"),
        ("int warp_id = threadIdx.x >> 5;", "AMD001"),
        ("for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down(v, offset);", "AMD001"),
        ("#define WARP_SIZE 32\n", "AMD002"),
        ("if (warpSize == 32) {}", "AMD002"),
        ("__shared__ float partial[32];", "AMD003"),
        ("__shared__ float tile[32][33];", "AMD003"),
        ("v += __shfl_down_sync(0xffffffff, v, 16);", "AMD004"),
        ("unsigned m = __ballot_sync(mask, p);", "AMD004"),
        ("int m = __activemask();", "AMD004"),
        ('asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));', "AMD005"),
        ("__nanosleep(100);", "AMD006"),
        ("texture<float, 1, cudaReadModeElementType> tex;", "AMD007"),
        ("cudaBindTexture(0, tex, d, n);", "AMD007"),
        ("#if __CUDA_ARCH__ >= 700\n#endif\n", "AMD008"),
        ("auto c = cg::this_cluster();", "AMD009"),
        ("cg::memcpy_async(block, dst, src, n);", "AMD009"),
        ("float buf[warpSize];", "AMD010"),
        ("wmma::fragment<wmma::matrix_a, 16, 16, 16, half> a;", "AMD011"),
        ("__global__ void __launch_bounds__(256, 2) k() {}", "AMD012"),
    ],
)
def test_rule_fires(src: str, rule: str) -> None:
    found = [x for x in lint(src, "k.cu") if x.id == rule]
    assert found, f"{rule} did not fire on {src!r}: {ids(src)}"
    f = found[0]
    assert f.line >= 1 and f.col >= 1 and f.message and f.hint
    assert f.severity == RULES[rule].severity
    assert f.doc.startswith(("HIP/docs/", "HIPIFY/docs/"))


def test_rules_cite_existing_doc_pages(docs_root: Path) -> None:
    for rule in RULES.values():
        assert (docs_root / rule.doc).is_file(), rule.doc


def test_portable_code_is_quiet() -> None:
    src = """
    __global__ void k(float *x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;   // 32 in a comment
      int lane = threadIdx.x % warpSize;
      unsigned long long m = __ballot(i < n);
      __shared__ float tile[256];
      if (i < n) x[i] = x[i] * 32.0f;
      const char *s = "threadIdx.x % 32";
    }
    """
    assert lint(src) == []


def test_positions_and_translation_stage() -> None:
    cuda = "int a;\ncudaBindTexture(0, tex, d, n);\n"
    hip = "int a;\nhipBindTexture(0, tex, d, n);\n"
    found = lint_translation(cuda, hip, "t.cu")
    assert [(x.id, x.line, x.col, x.stage) for x in found] == [
        ("AMD007", 2, 1, "cuda"),
        ("AMD007", 2, 1, "hip"),
    ]
    assert found[0].to_dict()["filename"] == "t.cu"


def test_scanner_is_linear_when_no_candidate_follows() -> None:
    """A long tail with nothing of interest once made the scanner re-run from every offset."""
    from hipbot.agents.hipify.cpp_tokens import candidate_scanner, scan

    scanner = candidate_scanner(("cuda",))
    tail = "void f(float* p) { g(p); }\n" * 20000
    tokens = list(scan("cudaFree(p);\n" + tail, scanner))
    assert [t.text for t in tokens] == ["cudaFree"]
    # Linearity: the regex engine's work for the tail is bounded by counting matches attempted.
    assert sum(1 for _ in scanner.finditer(tail)) <= 3


def test_warp_size_constants_and_mask_variables_from_real_code() -> None:
    # a C++ constant standing in for warpSize (SGEMM-style) and a mask kept in a variable
    assert ids("const int WARPSIZE = 32; // warpSize is not constexpr\n") == ["AMD002"]
    assert ids("constexpr unsigned kWarpSize = 32;\n") == ["AMD002"]
    src = "int mask = 0xffffffff;\nresult[tx] = __any_sync(mask, input[tx]);\n"
    found = lint(src)
    assert [(x.id, x.line) for x in found] == [("AMD004", 2)] and "mask" in found[0].message
    # no false positives: other 32s, other variables set to all-ones, a 64-bit mask variable
    assert ids("int block = 32;\nunsigned bits = 0xffffffff;\nout[0] = bits;\n") == []
    assert ids("unsigned long long m = 0xffffffffffffffffULL;\nv = __shfl_sync(m, v, 0);\n") == []


def test_match_sync_is_in_hip_so_only_its_mask_is_flagged() -> None:
    # HIP's kernel-language reference has __match_any_sync/__match_all_sync (64-bit masks)
    found = lint("unsigned long long m = __match_any_sync(0xffffffffffffffffULL, v);\n")
    assert [x.id for x in found] == []
    assert ids("auto m = __match_all_sync(0xffffffff, v, &pred);\n") == ["AMD004"]
