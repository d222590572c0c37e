"""``hipbot port`` with the real hipcc (ROCm 5.2 here, target gfx90a) on a small project with CMake,
a Makefile and a shell script: each repair rule has a unit that fails after translation alone
(the port with rules off) and compiles after the rules; units no rule can fix name their cause."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixtures_port import assert_fixed_by, port_both, unit

from hipbot.agents.port.pipeline import PortOptions, port
from hipbot.agents.port.report import PortReport
from hipbot.cli import main

pytestmark = pytest.mark.hipcc

KERNEL_HEAD = "#include <cuda_runtime.h>\n"
FILES = {
    "CMakeLists.txt": (
        "cmake_minimum_required(VERSION 3.18)\nproject(demo LANGUAGES CXX CUDA)\n"
        "set(CMAKE_CUDA_ARCHITECTURES 80)\nadd_executable(warp warp.cu)\nadd_executable(cgred cgred.cu)\n"
        "add_executable(hdr hdr.cu)\nadd_executable(omp omp.cu)\nadd_executable(drv drv.cu)\n"
        "add_executable(nvtx nvtx.cu)\nadd_executable(timer timer.cu)\nadd_executable(cgdim cgdim.cu)\nadd_executable(extc extc.cu)\nadd_executable(props props.cu)\nadd_executable(macros macros.cu)\nadd_executable(std std.cu)\nadd_executable(alloc alloc.cu)\nadd_executable(blas blas.cu)\nadd_executable(ptx ptx.cu)\nadd_executable(newapi newapi.cu)\n"
        "add_executable(prio more/prio.cu)\nadd_executable(bfe more/bfe.cu)\n"
        "add_executable(bf16 more/bf16.cu)\nadd_executable(dep more/dep.cu)\nadd_executable(half more/half.cu)\nadd_executable(prof_a more/prof_a.cu)\nadd_executable(prof_b more/prof_b.cu)\n"
        "add_executable(alias more/alias.cu)\nadd_executable(palloc more/palloc.cu)\nadd_executable(mapped more/mapped.cu)\n"
        "add_executable(vmain more/vmain.cu)\nadd_executable(gl more/gl.cu)\nadd_executable(win more/win.cu)\n"
        "add_executable(noinc more/noinc.cu)\nadd_executable(event more/event.cu)\n"
        "add_executable(space more/space.cu)\nadd_executable(flags_a more/flags_a.cu)\nadd_executable(flags_b more/flags_b.cu)\n"
        "target_include_directories(flags_a PRIVATE aliasinc)\ntarget_include_directories(flags_b PRIVATE aliasinc)\n"
        "target_link_libraries(blas CUDA::cublas)\n"
    ),
    "warp.cu": KERNEL_HEAD
    + "__global__ void sum(float* x) {\n  float v = x[threadIdx.x];\n"
    + "  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);\n"
    + "  if (__all_sync(0xffffffff, v > 0)) x[0] = v;\n}\n",
    "cgred.cu": KERNEL_HEAD
    + "#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
    + "namespace cg = cooperative_groups;\n"
    + "__global__ void k(int* x) {\n  auto t = cg::tiled_partition<32>(cg::this_thread_block());\n"
    + "  x[0] = cg::reduce(t, x[threadIdx.x], cg::plus<int>());\n}\n",
    "hdr.cu": KERNEL_HEAD + "#include <device_launch_parameters.h>\n#include <sm_61_intrinsics.h>\n"
    "__global__ void k(int* x) { x[threadIdx.x] = blockIdx.x; }\n",
    "omp.cu": KERNEL_HEAD
    + "#ifdef _OPENMP\n#include <omp.h>\n#endif\n__global__ void k(int* x) { x[0] = 1; }\n"
    + "int threads() { return omp_get_max_threads(); }\n",
    "nvtx.cu": KERNEL_HEAD
    + '#include <nvtx3/nvToolsExt.h>\nvoid f() {\n  nvtxRangePushA("step");\n  nvtxRangePop();\n}\n',
    "timer.cu": KERNEL_HEAD
    + "#include <helper_timer.h>\n#include <helper_cuda.h>\nfloat f() {\n  StopWatchInterface* t = nullptr;\n"
    + "  sdkCreateTimer(&t);\n  sdkStartTimer(&t);\n  float* p;\n  checkCudaErrors(cudaMalloc((void**)&p, 4));\n"
    + "  sdkStopTimer(&t);\n  float ms = sdkGetTimerValue(&t);\n  sdkDeleteTimer(&t);\n  return ms;\n}\n",
    "cgdim.cu": KERNEL_HEAD
    + "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
    + "__device__ int index(const cg::thread_block& b) { return b.group_index().x; }\n"
    + "__global__ void k(int* x) {\n  cg::thread_block b = cg::this_thread_block();\n"
    + "  x[0] = b.group_dim().x + index(b);\n}\n",
    "extc.cu": KERNEL_HEAD + 'extern "C"__global__ void saxpy(float* y) { y[0] = 1; }\n',
    "props.cu": KERNEL_HEAD
    + "int f() {\n  cudaDeviceProp p;\n  cudaGetDeviceProperties(&p, 0);\n"
    + "  return p.deviceOverlap + (int)p.sharedMemPerMultiprocessor;\n}\n",
    "macros.cu": "#define T 256\n#define N 4\n#include <assert.h>\n__global__ void k(float* x) { x[0] = T * N; }\n",
    "std.cu": KERNEL_HEAD + "auto twice(int v) { return 2 * v; }\n",
    "alloc.cu": KERNEL_HEAD
    + "void f(float** out) {\n  float* a;\n  cudaHostAlloc((float**)&a, 64, cudaHostAllocMapped);\n  *out = a;\n}\n",
    "drv.cu": "#include <cuda.h>\nconst char* text(CUresult r) {\n  const char* s;\n"
    "  cuGetErrorString(r, &s);\n  return s;\n}\n",
    "blas.cu": KERNEL_HEAD + "#include <cublas_v2.h>\nvoid f() { cublasHandle_t h; cublasCreate(&h); }\n",
    "ptx.cu": KERNEL_HEAD + "__global__ void lane(unsigned* out) {\n  unsigned id;\n"
    '  asm volatile("activemask.b32 %0;" : "=r"(id));\n  out[threadIdx.x] = id;\n}\n',
    "newapi.cu": KERNEL_HEAD
    + "void f(cudaGraph_t g, cudaGraphNode_t* n, cudaGraphNodeParams* p) {\n"
    + "  cudaGraphAddNode(n, g, nullptr, 0, p);\n}\n",
    "more/prio.cu": KERNEL_HEAD
    + "int f(const cudaDeviceProp& p) {\n  int s = p.streamPrioritiesSupported;\n"
    + "".join(f"  s += (int)p.sharedMemPerBlockOptin * {i};\n" for i in range(5))
    + "  return s;\n}\n",
    "more/bfe.cu": KERNEL_HEAD
    + "__device__ unsigned bfe(unsigned x, unsigned bit, unsigned n) {\n  unsigned r;\n"
    + '  asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(bit), "r"(n));\n  return r;\n}\n',
    "more/bf16.cu": KERNEL_HEAD
    + "#include <cuda_bf16.h>\n__global__ void k(__nv_bfloat16* x) { x[0] = x[1]; }\n",
    "more/dep.cu": KERNEL_HEAD
    + "template <int W> struct Base {\n  enum { AREA = W * W, LOW = -W / 2 };\n};\n"
    + "template <typename T, int W> struct Avg : Base<W> {\n"
    + "  __device__ T operator()(const T* a) const {\n    T s = T();\n"
    + "    for (int i = LOW; i < AREA + LOW; ++i) s += a[i];\n    return s / AREA;\n  }\n};\n"
    + "__global__ void k(float* x) { x[0] = Avg<float, 3>()(x + 4); }\n",
    "more/half.cu": KERNEL_HEAD + "void f(float* x) { fill_data(x, 4); }\n",
    "lib/fill.cpp": "void fill_data(float* x, int n) {\n  for (int i = 0; i < n; ++i) x[i] = i;\n}\n",
    "more/prof.h": "#pragma once\n#ifdef __NVCC__\nvoid report(cudaError_t e);\n#endif\n",
    "more/prof_a.cu": KERNEL_HEAD + '#include "prof.h"\nvoid a() { report(cudaSuccess); }\n',
    "more/prof_b.cu": KERNEL_HEAD + '#include "prof.h"\nvoid b() { report(cudaErrorUnknown); }\n',
    # the project's own CUDA->HIP alias becomes '#define hipDeviceMapHost hipDeviceMapHost' once translated
    "more/compat.h": "#pragma once\n#ifdef __HIPCC__\n#define cudaDeviceMapHost hipDeviceMapHost\n#endif\n",
    "more/alias.cu": KERNEL_HEAD
    + '#include "compat.h"\nvoid f() { cudaSetDeviceFlags(cudaDeviceMapHost); }\n',
    "more/palloc.cu": KERNEL_HEAD
    + "#define PINNED_ALLOC cudaHostAlloc\nvoid f(float** out) {\n  float* a;\n"
    + "  PINNED_ALLOC(&a, 64, cudaHostAllocMapped);\n  *out = a;\n}\n",
    "more/mapped.cu": KERNEL_HEAD
    + "float* f(float* host) {\n  float* dev;\n  cudaHostGetDevicePointer(&dev, host, 0);\n  return dev;\n}\n",
    "more/vmain.cu": KERNEL_HEAD + '#include <stdio.h>\nvoid main() { printf("%d\\n", 1); }\n',
    "more/gl.cu": KERNEL_HEAD
    + "#include <cuda_gl_interop.h>\ncudaGraphicsResource_t reg(unsigned int buffer) {\n"
    + "  cudaGraphicsResource_t r;\n  cudaGLSetGLDevice(0);\n  cudaGraphicsGLRegisterBuffer(&r, buffer, cudaGraphicsMapFlagsNone);\n"
    + "  return r;\n}\n",
    "more/event.cu": KERNEL_HEAD
    + "#define EVENT_CREATE cudaEventCreate\nvoid f(cudaEvent_t* e) { EVENT_CREATE(e, cudaEventDisableTiming); }\n",
    # a header two units include with <...> from a folder the build file names
    "aliasinc/devflags.h": "#pragma once\n#ifdef __HIPCC__\n#define cudaDeviceMapHost hipDeviceMapHost\n#endif\n",
    "more/flags_a.cu": KERNEL_HEAD
    + "#include <devflags.h>\nvoid a() { cudaSetDeviceFlags(cudaDeviceMapHost); }\n",
    "more/flags_b.cu": KERNEL_HEAD
    + "#include <devflags.h>\nvoid b() { cudaSetDeviceFlags(cudaDeviceMapHost); }\n",
    "more/space.cu": KERNEL_HEAD
    + "struct Lock {\n  void acquire();\n  int* p;\n};\n"
    + "inline __device__ void\nLock::acquire() { while (atomicCAS(p, 0, 1)); }\n",
    "more/win.cu": KERNEL_HEAD + "#include <conio.h>\nint key() { return _getch(); }\n",
    "more/noinc.cu": KERNEL_HEAD + "cublasHandle_t handle;\n",
    "tools/Makefile": "all:\n\tnvcc -arch=sm_70 app.cu -o app\n",
    "tools/app.cu": KERNEL_HEAD
    + '#include "helpers.cuh"\n__global__ void k(float* x) { x[0] = twice(x[0]); }\n',
    "common/helpers.cuh": "#pragma once\n__device__ inline float twice(float v) { return 2 * v; }\n",
    "mpi/build.sh": "#!/bin/sh\nnvcc -O2 ring.cu -o ring\n",
    "mpi/ring.cu": KERNEL_HEAD
    + "#include <mpi.h>\nint rank() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }\n",
}
FIXED_BY_RULES = {
    "warp.cu": "rocm-shim",
    "cgred.cu": "rocm-shim",
    "hdr.cu": "cuda-header",
    "omp.cu": "openmp",
    "alloc.cu": "overload",
    "std.cu": "std",
    "props.cu": "device-prop",
    "extc.cu": "literal-suffix",
    "timer.cu": "samples-helpers",
    "nvtx.cu": "nvtx",
    "cgdim.cu": "cooperative-groups",
    "macros.cu": "hip-first",
    "drv.cu": "rocm-shim",
    "tools/app.cu": "own-header",
    "mpi/ring.cu": "mpi",
    "more/prio.cu": "device-prop",
    "more/bfe.cu": "inline-ptx",
    "more/dep.cu": "dependent-base",
    "more/alias.cu": "identity-define",
    "more/palloc.cu": "overload",
    "more/mapped.cu": "overload",
    "more/vmain.cu": "void-main",
    "more/gl.cu": "cuda-header",
    "more/event.cu": "overload",
}


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> tuple[PortReport, PortReport]:
    return port_both(FILES, tmp_path_factory.mktemp("port"))


@pytest.mark.parametrize("source", sorted(FIXED_BY_RULES))
def test_rule_fails_before_and_compiles_after(ports: tuple[PortReport, PortReport], source: str) -> None:
    assert_fixed_by(ports, source, FIXED_BY_RULES[source])


def test_causes_of_units_no_rule_fixes(ports: tuple[PortReport, PortReport]) -> None:
    _, fixed = ports
    blas = unit(fixed, "blas.cu")
    assert blas.status == "failed" and blas.cause.kind == "library"
    assert "needs hipBLAS, which is not installed" in blas.cause.text
    ptx = unit(fixed, "ptx.cu")
    assert ptx.cause.kind == "inline-ptx" and "ptx.hip:4" in ptx.cause.text
    newapi = unit(fixed, "newapi.cu")
    assert newapi.cause.kind == "rocm-version"
    assert "hipGraphNodeParams needs ROCm 6.1 (target 5.2" in newapi.cause.text
    bf16 = unit(fixed, "more/bf16.cu")
    assert bf16.cause.kind == "rocm-version" and "<hip/hip_bf16.h> is not in ROCm 5.2" in bf16.cause.text
    half = unit(fixed, "more/half.cu")
    assert half.cause.kind == "not-valid-cuda" and "lib/fill.cpp defines it" in half.cause.text
    win = unit(fixed, "more/win.cu")
    assert win.cause.kind == "windows-only" and "<conio.h> is a Windows header" in win.cause.text
    space = unit(fixed, "more/space.cu")
    assert (
        space.cause.kind == "nvcc-only" and "Lock::acquire is defined __device__/__host__" in space.cause.text
    )
    noinc = unit(fixed, "more/noinc.cu")
    assert noinc.cause.kind == "library" and "needs hipBLAS" in noinc.cause.text
    assert "'hipblasHandle_t' is used with no hipBLAS header included" in noinc.cause.text


def test_macro_hidden_alloc_gets_the_template_not_a_cast(ports: tuple[PortReport, PortReport]) -> None:
    """The call's name comes from a macro, so no cast can be put at the call: hip_compat.h's T**
    template serves it; the identity #define is gone from the project's header."""
    _, fixed = ports
    out = Path(fixed.out)
    assert '#include "../hip_compat.h"' in (out / "more" / "palloc.hip").read_text()
    assert "template <class T> inline hipError_t hipHostAlloc(T** p" in (out / "hip_compat.h").read_text()
    assert "#define hipDeviceMapHost hipDeviceMapHost\n" not in (out / "more" / "compat.h").read_text()
    assert "(void**)&dev" in (out / "more" / "mapped.hip").read_text()
    assert "hipSetDevice(0);" in (out / "more" / "gl.hip").read_text()
    assert "0 /* cudaGraphicsMapFlagsNone */" in (out / "more" / "gl.hip").read_text()
    assert "same-as" in {e.rule for e in unit(fixed, "more/gl.cu").edits}


def test_a_header_included_from_a_build_folder_fixed_once_serves_everyunit(
    ports: tuple[PortReport, PortReport],
) -> None:
    """<devflags.h> comes from a target_include_directories folder: the unit whose rule did not edit
    it is compiled again once the other unit's rule has."""
    plain, fixed = ports
    units = [unit(fixed, f"more/flags_{n}.cu") for n in "ab"]
    assert all(unit(plain, u.source).status == "failed" for u in units)
    assert all(u.status == "compiled" and u.stage == "rules" for u in units), [u.errors for u in units]
    assert sum("identity-define" in {e.rule for e in u.edits} for u in units) == 1


def test_a_shared_header_fixed_once_serves_everyunit(ports: tuple[PortReport, PortReport]) -> None:
    """Two units include the same header; one unit's rule edits it (its __NVCC__ guard), the other,
    whose errors are in its own lines, is compiled again."""
    plain, fixed = ports
    units = [unit(fixed, f"more/prof_{n}.cu") for n in "ab"]
    assert all(unit(plain, u.source).status == "failed" for u in units)
    assert all(u.status == "compiled" and u.stage == "rules" for u in units), [u.errors for u in units]
    assert sum("nvcc-guard" in {e.rule for e in u.edits} for u in units) == 1


def test_ptx_becomes_the_compat_function(ports: tuple[PortReport, PortReport]) -> None:
    _, fixed = ports
    out = Path(fixed.out)
    assert "r = __hipbot_ptx_bfe_u32(x, bit, n);" in (out / "more" / "bfe.hip").read_text()
    assert "(a >> (pos & 0xff)) & __hipbot_ptx_mask(n)" in (out / "hip_compat.h").read_text()


def test_summary_and_layout(ports: tuple[PortReport, PortReport]) -> None:
    plain, fixed = ports
    s = fixed.summary()
    assert s["units"] == 36 and s["compiled_after_translation"] == 0
    assert s["compiled_after_rules"] == 28 and s["failed"] == 8
    assert plain.summary()["compiled_after_rules"] == 0
    out = Path(fixed.out)
    cmake = (out / "CMakeLists.txt").read_text()
    assert "LANGUAGES CXX HIP" in cmake and "add_executable(warp warp.hip)" in cmake
    assert "CMAKE_HIP_ARCHITECTURES gfx90a" in cmake and "roc::hipblas" in cmake
    assert (out / "tools" / "Makefile").read_text() == "all:\n\thipcc --offload-arch=gfx90a app.hip -o app\n"
    assert (out / "hip_compat.h").is_file()
    warp = unit(fixed, "warp.cu")
    assert warp.cwd == str(out.resolve()) and warp.command[-1] == "warp.hip"


def test_escaping_include_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "leak.cu").write_text('#include "../../../../etc/hostname"\n__global__ void k() {}\n')
    report = port(src, tmp_path / "out", PortOptions(rocm="5.2"))
    (leak,) = report.units
    assert leak.status == "failed" and leak.cause.kind == "refused"
    assert "outside the project" in leak.cause.text and leak.command == []


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(Path(__file__), src / "not_cuda.py")
    (src / "ok.cu").write_text(
        KERNEL_HEAD + "__global__ void k(int* x) { x[0] = __shfl_xor_sync(0xffffffff, 1, 1); }\n"
    )
    code = main(["port", str(src), "-o", str(tmp_path / "out"), "--rocm", "5.2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    (record,) = data["units"]
    assert set(record) >= {"source", "output", "status", "stage", "cause", "command", "cwd", "edits"}
    assert record["source"] == "ok.cu" and record["output"] == "ok.hip" and record["status"] == "compiled"
    assert record["command"][1:3] == ["--offload-arch=gfx90a", "-fsyntax-only"]
    assert data["summary"]["compiled_after_rules"] == 1 and data["summary"]["rocm"] == "5.2"
    assert main(["port", str(src), "-o", str(tmp_path / "out")]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert main(["port", str(src), "-o", str(tmp_path / "o2"), "--rocm", "five"]) == 1
    assert "not a ROCm version" in capsys.readouterr().err and not (tmp_path / "o2").exists()
