"""``hipbot port`` on CUDA 12/13 code ROCm 5.2 spells differently or lacks (cooperative groups'
new member names, the graph calls' edgeData argument, half max/min), and on the ways a rule's
edit used to fall short (a typed pointer cast one call a round, the shim included after code that
needs it, a library header ROCm keeps in a folder). Real hipcc (ROCm 5.2 here, gfx90a): each unit
fails with the rules off and compiles with them."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures_port import assert_fixed_by, port_both, unit

from hipbot.agents.port import rocm
from hipbot.agents.port.fixes import insert_after_hip_include
from hipbot.agents.port.newer_cuda import drop_null_edge_data
from hipbot.agents.port.ptx import rewrite_ptx
from hipbot.agents.port.report import PortReport
from hipbot.agents.port.rules import cast_first_arguments

HEAD = "#include <cuda_runtime.h>\n#include <cstdio>\n"
CHECK = '#define CHECK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) printf("%d\\n", (int)err_); } while (0)\n'
FILES = {
    "cg12.cu": HEAD
    + "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
    + "__global__ void k(float* out) {\n  cg::thread_block block = cg::this_thread_block();\n"
    + "  cg::grid_group grid = cg::this_grid();\n"
    + "  auto token = block.barrier_arrive();\n"
    + "  out[grid.block_rank()] = block.num_threads() + grid.num_threads() + grid.num_blocks();\n"
    + "  block.barrier_wait(std::move(token));\n"
    + "  out[0] += block.dim_threads().x + grid.dim_blocks().y + cg::this_grid().block_index().z;\n}\n",
    "manyalloc.cu": HEAD
    + CHECK
    + "void f(size_t n) {\n  float *a, *b, *c, *d, *e, *g, *da, *db, *dc, *dd, *de, *dg;\n"
    + "".join(f"  CHECK(cudaHostAlloc(&{v}, n, cudaHostAllocMapped));\n" for v in "abcdeg")
    + "".join(f"  CHECK(cudaHostGetDevicePointer(&d{v}, {v}, 0));\n" for v in "abcdeg")
    + "}\n",
    "graph13.cu": HEAD
    + CHECK
    + "void f(cudaGraph_t g, cudaGraphNode_t a, cudaGraphNode_t b) {\n  size_t n = 0;\n"
    + "  CHECK(cudaGraphAddDependencies(g, &a, &b, nullptr, 1));\n"
    + "  CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));\n"
    + "  CHECK(cudaGraphNodeGetDependencies(b, nullptr, nullptr, &n));\n"
    + "  CHECK(cudaGraphRemoveDependencies(g, &a, &b, nullptr, 1));\n}\n",
    "hmax.cu": HEAD
    + "#include <cuda_fp16.h>\n__global__ void k(__half2* x, __half* y) {\n"
    + "  x[0] = __hmax2(x[0], x[1]);\n  x[1] = __hmin2(x[0], x[1]);\n  y[0] = __hmax(y[0], y[1]);\n}\n"
    + "float host(__half2 a, __half2 b) { return __low2float(__hmax2(a, b)); }\n",
    "late.cu": HEAD
    + "__global__ void k(float* x) {\n  x[threadIdx.x] += 1.0f;\n  __syncwarp();\n}\n"
    + "#include <cooperative_groups.h>\n"
    + "__global__ void j(float* x) { cooperative_groups::this_thread_block().sync(); }\n",
    "sparse.cu": HEAD
    + "#include <cusparse.h>\nint f() {\n  cusparseHandle_t h;\n  return cusparseCreate(&h) == CUSPARSE_STATUS_SUCCESS;\n}\n",
    "ptx.cu": HEAD
    + "__global__ void k(const float* x, float* y, unsigned int* u) {\n  float v, w, r;\n  unsigned int lane, t, p;\n"
    + '  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));\n  asm("mov.u32 %0, %tid.x;" : "=r"(t));\n'
    + '  asm("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(x + t));\n'
    + '  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(w) : "l"(x) : "memory");\n'
    + '  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(v), "f"(w), "f"(1.0f));\n'
    + '  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(p) : "r"(lane), "r"(t), "r"(0x3210));\n'
    + '  asm("st.global.wt.f32 [%0], %1;" : : "l"(y + t), "f"(r));\n'
    + '  asm volatile("membar.gl;");\n  asm volatile("bar.sync 0;" ::: "memory");\n  u[t] = p;\n}\n',
    # PTX only nvcc's device pass sees (hipcc defines no __CUDA_ARCH__): no cause for the build
    "deadptx.cu": HEAD
    + "__device__ int up(int x, int d) {\n  int r = x;\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 300\n"
    + '  asm("{ .reg .pred p; shfl.up.b32 %0|p, %1, %2, 0; }" : "=r"(r) : "r"(x), "r"(d));\n'
    + "#else\n  r = __shfl_up(x, d);\n#endif\n  return r;\n}\n",
    # an exercise with its blanks still in it
    "blank.cu": HEAD + "__global__ void k(int* x) {\n  int index = ...;\n  x[index] = 1;\n}\n",
    # a stray character pasted into the source: nvcc refuses it as well
    "stray.cu": HEAD + "__global__ void k(int* x) { x[0] = 1; }\u23ce\n",
}
FIXED_BY_RULES = {
    "cg12.cu": "cooperative-groups",
    "manyalloc.cu": "overload",
    "graph13.cu": "graph-edges",
    "hmax.cu": "half-minmax",
    "late.cu": "rocm-shim",
    "sparse.cu": "library-header",
    "ptx.cu": "inline-ptx",
}


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> tuple[PortReport, PortReport]:
    return port_both(FILES, tmp_path_factory.mktemp("newer"))


@pytest.mark.hipcc
@pytest.mark.parametrize("source", sorted(FIXED_BY_RULES))
def test_fails_before_and_compiles_after(ports: tuple[PortReport, PortReport], source: str) -> None:
    assert_fixed_by(ports, source, FIXED_BY_RULES[source])


@pytest.mark.hipcc
def test_what_the_edits_wrote(ports: tuple[PortReport, PortReport]) -> None:
    plain, fixed = ports
    out = Path(fixed.out)
    cg12 = (out / "cg12.hip").read_text()
    assert "(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))" in cg12
    assert "block.size() + grid.size()" in cg12 and "block.sync();" in cg12
    # twelve typed pointers, all cast in the one round the rule took
    alloc = unit(fixed, "manyalloc.cu")
    assert (out / "manyalloc.hip").read_text().count("(void**)&") == 12
    assert alloc.rounds <= 2
    graph = (out / "graph13.hip").read_text()
    assert "hipGraphAddDependencies(g, &a, &b, 1)" in graph and "hipGraphGetEdges(g, NULL, NULL, &n)" in graph
    assert "hipbot_hmax2(x[0], x[1])" in (out / "hmax.hip").read_text()
    assert "__host__ __device__ inline __half2 hipbot_hmax2" in (out / "hip_compat_fp16.h").read_text()
    late = (out / "late.hip").read_text()
    assert late.index('#include "hip_compat.h"') < late.index("__syncwarp")
    assert "#include <hipsparse/hipsparse.h>" in (out / "sparse.hip").read_text()
    assert unit(plain, "deadptx.cu").status == "compiled"
    dead = unit(fixed, "deadptx.cu")
    assert dead.status == "compiled" and dead.stage == "translation" and not dead.edits
    blank = unit(fixed, "blank.cu")
    assert (
        blank.cause.kind == "not-valid-cuda"
        and "unfinished ('...' placeholder at blank.hip:4)" in blank.cause.text
    )
    stray = unit(fixed, "stray.cu")
    assert stray.cause.kind == "not-valid-cuda" and "a stray character (U+23CE)" in stray.cause.text


def test_cast_every_call_but_declarations_and_casts() -> None:
    text = (
        "CHECK(hipHostAlloc(&a, n, 0));\nhipError_t hipHostAlloc(void** p, size_t n, unsigned f);\n"
        "x = hipHostAlloc(  (void**)&b, n, 0);\nreturn hipHostAlloc( &d, n, 0);\nobj.hipHostAlloc(&e);\n"
    )
    assert cast_first_arguments(text, "hipHostAlloc") == (
        "CHECK(hipHostAlloc((void**)&a, n, 0));\nhipError_t hipHostAlloc(void** p, size_t n, unsigned f);\n"
        "x = hipHostAlloc(  (void**)&b, n, 0);\nreturn hipHostAlloc( (void**)&d, n, 0);\nobj.hipHostAlloc(&e);\n"
    )


def test_edge_data_dropped_only_when_null() -> None:
    text = (
        "hipGraphAddDependencies(g, f(a, b), &b, nullptr, 1);\n"
        "hipGraphAddDependencies(g, &a, &b, edges, 1);\nhipGraphAddDependencies(g, &a, &b, 1);\n"
    )
    assert drop_null_edge_data(text, "hipGraphAddDependencies") == (
        "hipGraphAddDependencies(g, f(a, b), &b, 1);\n"
        "hipGraphAddDependencies(g, &a, &b, edges, 1);\nhipGraphAddDependencies(g, &a, &b, 1);\n"
    )


def test_shim_goes_after_the_head_includes() -> None:
    text = "/**\n * doc\n */\n#include <hip/hip_runtime.h>\nint a;\n#include <hip/hip_cooperative_groups.h>\n"
    assert insert_after_hip_include(text, '#include "s.h"') == (
        '/**\n * doc\n */\n#include <hip/hip_runtime.h>\n#include "s.h"\nint a;\n'
        "#include <hip/hip_cooperative_groups.h>\n"
    )


def test_one_instruction_ptx_rewritten_and_the_rest_left() -> None:
    text = (
        'asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));\n'
        'asm("ld.global.nc.f32 %0, [%1];" : "=f"(val) : "l"(&data[idx]));\n'
        'asm("st.global.wt.f32 [%0], %1;" : : "l"(y + idx), "f"(r0));\n'
        'asm("cvt.rni.s32.f32 %0, %1;" : "=r"(i) : "f"(a));\n'
        'asm volatile("bar.sync 0;" ::: "memory");\n'
        'asm("ld.global.ca.f32 %0, [%1+4];" : "=f"(y1) : "l"(y));\n'
        'asm("{ .reg .pred p; setp.ne.u32 p, %1, 0; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "r"(x));\n'
        'asm("mul.lo.s32 %0, %1;" : "=r"(m) : "r"(a), "r"(b));\n'
    )
    out, ops = rewrite_ptx(text)
    assert ops == ["mov.u32", "ld.global.nc.f32", "st.global.wt.f32", "cvt.rni.s32.f32", "bar.sync 0"]
    lines = out.split("\n")
    assert lines[0] == "id = __lane_id(); /* hipbot port: was PTX mov.u32 */"
    assert lines[1].startswith("val = __ldg((const float*)(&data[idx]));")
    assert lines[2].startswith("*(volatile float*)(y + idx) = r0;")
    assert lines[3].startswith("i = __float2int_rn(a);") and lines[4].startswith("__syncthreads();")
    # an offset address, several instructions, a wrong operand count: left as they were
    assert lines[5:8] == text.split("\n")[5:8]


def _ptx_bfe(a: int, pos: int, length: int, signed: bool) -> int:
    """The PTX ISA's bfe pseudo-code (32-bit)."""
    pos, length = pos & 0xFF, length & 0xFF
    sbit = 0 if (not signed or length == 0) else (a >> min(pos + length - 1, 31)) & 1
    d = 0
    for i in range(32):
        bit = (a >> (pos + i)) & 1 if (i < length and pos + i <= 31) else sbit
        d |= bit << i
    return d


def _ptx_bfi(a: int, b: int, pos: int, length: int) -> int:
    """The PTX ISA's bfi pseudo-code (32-bit)."""
    pos, length, f = pos & 0xFF, length & 0xFF, b
    for i in range(length):
        if pos + i > 31:
            break
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f


def _ptx_prmt(a: int, b: int, s: int) -> int:
    """The PTX ISA's prmt, default mode: bytes of b:a, sign replication on selector bit 3."""
    t, r = (b << 32) | a, 0
    for i in range(4):
        sel = (s >> (4 * i)) & 0xF
        byte = (t >> (8 * (sel & 7))) & 0xFF
        r |= ((0xFF if byte & 0x80 else 0) if sel & 8 else byte) << (8 * i)
    return r


@pytest.mark.hipcc
def test_ptx_helpers_follow_the_isa(tmp_path: Path) -> None:
    """The shim's bfe/bfi, built for the host with hipcc's own clang, against the ISA's pseudo-code
    on operands around the edges (position and length 0, 31, 32, past 255)."""
    cxx = shutil.which("clang++-15") or shutil.which("c++")
    assert cxx, "no C++ compiler beside hipcc"
    shim = rocm.shim_text()
    helpers = shim[shim.index("__device__ inline unsigned int __hipbot_ptx_mask") :].replace(
        "__device__ ", ""
    )
    values = (0, 1, 7, 31, 32, 33, 255, 256 + 3)
    words = (0x0, 0xFFFFFFFF, 0x80000001, 0x12345678)
    cases = list(itertools.product(words, values, values))
    main = "#include <cstdio>\n" + helpers + "int main() {\n"
    for a, pos, n in cases:
        main += (
            f'  printf("%u %u %u %u\\n", __hipbot_ptx_bfe_u32({a}u, {pos}u, {n}u), '
            f"(unsigned)__hipbot_ptx_bfe_s32((int){a}u, {pos}u, {n}u), "
            f"__hipbot_ptx_bfi_b32({a}u, 0x0F0F0F0Fu, {pos}u, {n}u), "
            f"__hipbot_ptx_prmt_b32({a}u, 0x80F1E2D3u, {pos * 0x1111 + n * 0x0F1D}u));\n"
        )
    (tmp_path / "t.cpp").write_text(main + "}\n")
    subprocess.run([cxx, "-O1", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout.split("\n")
    for (a, pos, n), line in zip(cases, out, strict=False):
        got = tuple(int(x) for x in line.split())
        want = (
            _ptx_bfe(a, pos, n, False),
            _ptx_bfe(a, pos, n, True),
            _ptx_bfi(a, 0x0F0F0F0F, pos, n),
            _ptx_prmt(a, 0x80F1E2D3, (pos * 0x1111 + n * 0x0F1D) & 0xFFFFFFFF),
        )
        assert got == want, (a, pos, n)
