"""Figures for the CUDA -> HIP translator.

    .venv/bin/python bench/bench_hipify.py                 # throughput + snippet latency
    .venv/bin/python bench/bench_hipify.py --lines 400000  # a bigger generated corpus
    .venv/bin/python bench/bench_hipify.py --hipify-perl /opt/rocm/bin/hipify-perl   # compare
    .venv/bin/python bench/bench_hipify.py --unit-tests DIR  # FileCheck pass rate on HIPIFY's tests

Throughput: lines per second (median of runs) over a generated corpus of realistic CUDA (runtime,
driver, cuBLAS/cuRAND/cuFFT/cuSPARSE calls, kernels, launches, macros, comments, strings), split
into files like a project. Latency: one 200-line snippet through ``translate()`` once warm.
Linearity: the time per line of the largest file against the corpus average.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hipbot.agents.hipify.translate import HipifyOptions, translate

HEADER = """// generated benchmark file {n}: realistic CUDA host + device code
#include <cuda_runtime.h>
#include <cuda.h>
#include <cublas_v2.h>
#include <curand_kernel.h>
#include <cufft.h>
#include <cusparse.h>
#include <cstdio>
#include <vector>

#define CUDA_CHECK(call) do {{ cudaError_t err_ = (call); if (err_ != cudaSuccess) {{ \\
    fprintf(stderr, "CUDA error %s at %s:%d\\n", cudaGetErrorString(err_), __FILE__, __LINE__); \\
    exit(1); }} }} while (0)
#define WARP_SIZE 32
"""

BLOCKS = [
    """
template <typename T, int BLOCK>
__global__ void reduce_{i}(const T *__restrict__ in, T *out, int n) {{
  __shared__ T partial[BLOCK];
  int tid = threadIdx.x;
  int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
  T v = (i < n ? in[i] : T(0)) + (i + blockDim.x < n ? in[i + blockDim.x] : T(0));
  partial[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 32; s >>= 1) {{
    if (tid < s) partial[tid] = v = v + partial[tid + s];
    __syncthreads();
  }}
  if (tid < 32) {{
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
  }}
  if (tid == 0) atomicAdd(out, v);  // one atomic per block
}}
""",
    """
__global__ void saxpy_{i}(int n, float a, const float *x, float *y) {{
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (idx < n) y[idx] = a * x[idx] + y[idx] + (lane == 0 ? warp * 0.0f : 0.0f);
}}

void run_saxpy_{i}(int n, cudaStream_t stream) {{
  float *d_x = nullptr, *d_y = nullptr;
  std::vector<float> h(n, 1.0f);
  CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&d_y, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpyAsync(d_x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreateWithFlags(&stop, cudaEventBlockingSync);
  cudaEventRecord(start, stream);
  saxpy_{i}<<<(n + 255) / 256, 256, 0, stream>>>(n, 2.0f, d_x, d_y);
  reduce_{i}<float, 256><<<dim3(64), dim3(256), 256 * sizeof(float), stream>>>(d_x, d_y, n);
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  printf("saxpy took %f ms (cudaMemcpyAsync + kernels)\\n", ms);
  CUDA_CHECK(cudaMemcpy(h.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(d_x);
  cudaFree(d_y);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}}
""",
    """
void gemm_{i}(cublasHandle_t handle, int m, int n, int k, const float *A, const float *B, float *C) {{
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, A, m, B, n, &beta, C, m);
  if (st != CUBLAS_STATUS_SUCCESS) {{ fprintf(stderr, "cublasSgemm failed\\n"); }}
  cublasSetStream(handle, 0);
  cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST);
  int idx = 0;
  cublasIsamax(handle, n, A, 1, &idx);
}}

__global__ void init_rng_{i}(curandState *states, unsigned long long seed) {{
  int id = threadIdx.x + blockIdx.x * blockDim.x;
  curand_init(seed, id, 0, &states[id]);
  float r = curand_uniform(&states[id]);
  states[id].d += (unsigned)r;
}}
""",
    """
int fft_{i}(cufftComplex *data, int nx, int batch) {{
  cufftHandle plan;
  if (cufftPlan1d(&plan, nx, CUFFT_C2C, batch) != CUFFT_SUCCESS) return -1;
  cufftExecC2C(plan, data, data, CUFFT_FORWARD);
  cufftDestroy(plan);
  cusparseHandle_t sp;
  cusparseCreate(&sp);
  cusparseMatDescr_t descr;
  cusparseCreateMatDescr(&descr);
  cusparseSetMatIndexBase(descr, CUSPARSE_INDEX_BASE_ZERO);
  cusparseDestroy(sp);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  CUdevice dev;
  CUcontext ctx;
  cuInit(0);
  cuDeviceGet(&dev, 0);
  cuCtxCreate(&ctx, 0, dev);
  cuCtxDestroy(ctx);
  return prop.warpSize == 32 ? 0 : 1;
}}
""",
]


def generate_corpus(directory: Path, lines: int, file_lines: int = 2000, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    files = []
    total = 0
    n = 0
    while total < lines:
        parts = [HEADER.format(n=n)]
        count = parts[0].count("\n")
        i = 0
        while count < file_lines:
            block = rng.choice(BLOCKS).format(i=f"{n}_{i}")
            parts.append(block)
            count += block.count("\n")
            i += 1
        path = directory / f"file_{n:04d}.cu"
        path.write_text("".join(parts), encoding="utf-8")
        files.append(path)
        total += count
        n += 1
    return files


def snippet_200() -> str:
    text = HEADER.format(n=0) + "".join(b.format(i=k) for k, b in enumerate(BLOCKS * 3))
    return "\n".join(text.splitlines()[:200]) + "\n"


def bench_throughput(
    files: list[Path], runs: int, options: HipifyOptions
) -> tuple[float, int, list[float], float]:
    """Median wall time, lines, all wall times, median CPU time (steadier on a shared machine)."""
    sources = [p.read_text(encoding="utf-8") for p in files]
    n_lines = sum(s.count("\n") for s in sources)
    times = []
    cpu = []
    for _ in range(runs):
        start, cpu_start = time.perf_counter(), time.process_time()
        for i, src in enumerate(sources):
            translate(src, options, str(files[i]))
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return statistics.median(times), n_lines, times, statistics.median(cpu)


def bench_perl(perl: str, script: str, files: list[Path]) -> tuple[float, int]:
    n_lines = sum(p.read_text().count("\n") for p in files)
    start = time.perf_counter()
    for p in files:
        subprocess.run(
            [perl, script, str(p)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
    return time.perf_counter() - start, n_lines


def unit_tests(directory: Path) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    from filecheck import run_options, score

    total = passed = 0
    slowest = (0.0, "")
    for path in sorted(p for p in directory.rglob("*") if p.suffix in (".cu", ".cpp")):
        text = path.read_text(encoding="utf-8", errors="replace")
        opts = run_options(text)
        options = HipifyOptions(
            roc="--roc" in opts or "-roc" in opts,
            miopen="--miopen" in opts or "-miopen" in opts,
            experimental="--experimental" in opts,
            hip_kernel_execution_syntax="--hip-kernel-execution-syntax" in opts,
            use_hip_data_types="--use-hip-data-types" in opts,
            skip_excluded_blocks="--skip-excluded-preprocessor-conditional-blocks" in opts
            or "--default-preprocessor" in opts,
            lint=False,
        )
        start = time.perf_counter()
        out = translate(text, options, str(path)).text
        elapsed = time.perf_counter() - start
        slowest = max(slowest, (elapsed, path.name))
        result = score(path, out)
        total += result.total
        passed += result.passed
        print(
            f"{path.relative_to(directory)}: {result.passed}/{result.total} checks ({elapsed * 1000:.1f} ms)"
        )
        for line, kind, pattern in result.failed[:8]:
            print(f"    line {line} {kind}: {pattern}")
    print(f"\nunit tests: {passed}/{total} checks pass = {100 * passed / max(total, 1):.2f}%")
    print(f"slowest file: {slowest[1]} {slowest[0] * 1000:.1f} ms")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=200_000, help="size of the generated corpus (lines)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hipify-perl", help="path of a hipify-perl script to time on the same corpus")
    ap.add_argument("--perl", default="perl")
    ap.add_argument("--unit-tests", type=Path, help="folder of HIPIFY unit tests (*.cu with CHECK lines)")
    args = ap.parse_args()
    if args.unit_tests:
        return unit_tests(args.unit_tests)

    snippet = snippet_200()
    options = HipifyOptions()
    translate(snippet, options)  # warm: mapping table load and rename table build
    no_lint = HipifyOptions(lint=False)
    print(f"snippet: {snippet.count(chr(10))} lines")
    for label, opts in (("with lints", options), ("no lints", no_lint)):
        wall, cpu = [], []
        for _ in range(50):
            start, cpu_start = time.perf_counter(), time.process_time()
            translate(snippet, opts)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)
        print(f"  latency (warm, median of 50, {label}): {statistics.median(wall) * 1000:.2f} ms wall, "
              f"{statistics.median(cpu) * 1000:.2f} ms CPU")  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="hipify-bench-") as tmp:
        files = generate_corpus(Path(tmp), args.lines)
        for label, opts in (("translate only", no_lint), ("with lints", options),
                            ("--hip-kernel-execution-syntax", HipifyOptions(lint=False, hip_kernel_execution_syntax=True))):  # fmt: skip
            med, n_lines, times, cpu = bench_throughput(files, args.runs, opts)
            print(f"corpus: {n_lines} lines in {len(files)} files; {label}: median {med:.2f} s "
                  f"-> {n_lines / med:,.0f} lines/s wall, {n_lines / cpu:,.0f} lines/s of CPU "
                  f"(runs: {', '.join(f'{t:.2f}' for t in times)})")  # fmt: skip
        # linearity: one file 20x larger should cost ~20x one file
        small = files[0].read_text()
        big = small * 20
        t_small = min(_time(lambda: translate(small, no_lint)) for _ in range(20))
        t_big = min(_time(lambda: translate(big, no_lint)) for _ in range(3))
        print(f"linearity (CPU): {small.count(chr(10))} lines {t_small * 1000:.1f} ms; x20 -> {t_big * 1000:.1f} ms "
              f"(ratio {t_big / t_small:.1f}, linear = 20)")  # fmt: skip
        if args.hipify_perl:
            perl_s, n_lines = bench_perl(args.perl, args.hipify_perl, files)
            ours, _, _, _ = bench_throughput(files, 1, no_lint)
            print(
                f"hipify-perl: {perl_s:.2f} s -> {n_lines / perl_s:,.0f} lines/s; hipbot is {perl_s / ours:.1f}x faster"
            )
    return 0


def _time(fn) -> float:
    """CPU seconds of one call (the machine may be shared; wall time would measure the others)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


if __name__ == "__main__":
    sys.exit(main())
