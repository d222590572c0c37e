"""Handler latency of the bot: /ask and /hipify on a 200-line snippet, reply content ready.

"Ready" means what the Discord layer sends: the handler's Reply, split to Discord's limits and
turned into discord.py embeds/files/views. Goal: under 300 ms at p50 on this machine, with the
embedding model loaded (one warm-up question first).

    .venv/bin/python bench/bench_bot.py                 # uses $HIPBOT_HOME's database, ingesting if empty
    .venv/bin/python bench/bench_bot.py --db PATH -n 30
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hipbot.bot import handlers
from hipbot.bot.handlers import Context
from hipbot.bot.replies import Reply, fit
from hipbot.bot.state import BotState
from hipbot.config import load_settings

QUESTIONS = [
    "what replaces cudaMemcpyToSymbolAsync?",
    "is cudaGraphInstantiateWithParams supported?",
    "hipify cublasSgemm equivalent in rocBLAS?",
    "why does my __shfl_down_sync code give wrong sums on MI250?",
    "how do I port inline PTX asm to HIP?",
    "cudaMallocManaged 在 HIP 里用什么替代?",
    "what is the warp size on AMD GPUs and how should kernels handle it?",
    "does HIP support cooperative groups grid sync?",
]


def snippet(lines: int = 200) -> str:
    """Realistic CUDA: a reduction kernel, a stencil, cuBLAS/cuRAND setup, error checks, launches."""
    head = [
        "#include <cuda_runtime.h>",
        "#include <cublas_v2.h>",
        "#include <curand.h>",
        "#include <cstdio>",
        "#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { "
        'printf("%s\\n", cudaGetErrorString(e)); return 1; } } while (0)',
        "__global__ void reduce(const float* in, float* out, int n) {",
        "  __shared__ float s[256];",
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;",
        "  float v = i < n ? in[i] : 0.f;",
        "  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);",
        "  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;",
        "  __syncthreads();",
        "  if (threadIdx.x == 0) { float t = 0; for (int w = 0; w < 8; ++w) t += s[w]; atomicAdd(out, t); }",
        "}",
    ]
    body: list[str] = []
    k = 0
    while len(head) + len(body) < lines - 1:
        body += [
            f"__global__ void stencil{k}(const float* a, float* b, int n) {{",
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;",
            "  if (i > 0 && i < n - 1) b[i] = 0.25f * a[i - 1] + 0.5f * a[i] + 0.25f * a[i + 1];",
            "}",
            f"int run{k}(int n) {{",
            "  float *a, *b; cudaStream_t st; cudaEvent_t e0, e1;",
            "  CHECK(cudaMalloc(&a, n * sizeof(float))); CHECK(cudaMalloc(&b, n * sizeof(float)));",
            "  CHECK(cudaStreamCreate(&st)); cudaEventCreate(&e0); cudaEventCreate(&e1);",
            "  cudaEventRecord(e0, st);",
            f"  stencil{k}<<<(n + 255) / 256, 256, 0, st>>>(a, b, n);",
            "  cudaEventRecord(e1, st); cudaEventSynchronize(e1);",
            "  cublasHandle_t h; cublasCreate(&h); cublasSetStream(h, st); cublasDestroy(h);",
            "  cudaFree(a); cudaFree(b); cudaStreamDestroy(st);",
            "  return 0;",
            "}",
        ]
        k += 1
    return "\n".join((head + body)[: lines - 1] + ["// end"]) + "\n"


def ready(reply: Reply) -> int:
    """Split and build the discord.py objects, as the Discord layer does before sending."""
    from hipbot.bot.views import message_kwargs

    parts = fit(reply)
    for part in parts:
        message_kwargs(part)
    return len(parts)


def measure(fn: Callable[[], Reply], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ready(fn())
        times.append((time.perf_counter() - t0) * 1000)
    return times


def report(name: str, times: list[float], goal_ms: float) -> None:
    times = sorted(times)
    p50 = statistics.median(times)
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    verdict = "ok" if p50 < goal_ms else "over goal"
    print(
        f"{name:34} n={len(times):3}  p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  max {times[-1]:7.1f} ms  ({verdict}, goal p50 < {goal_ms:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, help="an ingested database (default: $HIPBOT_HOME's, ingested if empty)"
    )
    parser.add_argument("-n", "--runs", type=int, default=20)
    args = parser.parse_args()

    settings = load_settings(db_path=args.db) if args.db else load_settings()
    from hipbot.agents.docs.store import is_ingested, open_docs_db

    db = open_docs_db(settings.database)
    ingested = is_ingested(db)
    db.conn.close()
    if not ingested:
        from hipbot.agents.docs import ingest

        t0 = time.perf_counter()
        summary = ingest.ingest(settings, progress=False)
        print(f"ingested the corpus first: {summary} ({time.perf_counter() - t0:.1f} s)")

    with tempfile.TemporaryDirectory() as tmp:
        ctx = Context(settings=settings, state=BotState.open(Path(tmp) / "bot.db"))
        code = snippet(200)
        for label, question in (("lookup", QUESTIONS[0]), ("conceptual", QUESTIONS[3])):
            t0 = time.perf_counter()
            handlers.ask(ctx, question)
            print(
                f"first {label} question (cold: loads the API index / embedding model): {(time.perf_counter() - t0) * 1000:.0f} ms"
            )
        for question in QUESTIONS:  # every lazy load done before timing
            handlers.ask(ctx, question)
        handlers.hipify(ctx, code)

        lookups, conceptual = itertools.cycle(QUESTIONS[:3]), itertools.cycle(QUESTIONS[3:])
        print(f"database {settings.database}; snippet {code.count(chr(10))} lines, {len(code)} bytes")
        report("/ask lookup (API names)", measure(lambda: handlers.ask(ctx, next(lookups)), args.runs), 300)
        report(
            "/ask conceptual (retrieval)",
            measure(lambda: handlers.ask(ctx, next(conceptual)), args.runs),
            300,
        )
        report("/hipify 200-line snippet", measure(lambda: handlers.hipify(ctx, code), args.runs), 300)
        message = f"```cuda\n{code}```"
        report(
            "Convert to HIP (```cuda message)",
            measure(lambda: handlers.convert_message(ctx, message), args.runs),
            300,
        )


if __name__ == "__main__":
    main()
