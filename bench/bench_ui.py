"""The operator page under a full database: 1,000 jobs (queued, running, ended), 50 workers,
a running job with 2,000 reported steps and its log. Prints how long each page takes to load
over real HTTP (a coordinator on loopback, signed in as admin), and, when Debian's Chromium and
Playwright are installed, in the browser (navigation to the load event, chart drawn). Goal: under
300 ms.

    .venv/bin/python bench/bench_ui.py [--jobs 1000] [--workers 50] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
from hipbot.jobs.finetune.models import GpuEntry, GpuReport, Progress
from hipbot.jobs.finetune.queue import JobQueue
from hipbot.jobs.finetune.spec import parse_spec

ADMIN = "bench-admin"
SPEC = """model_name_or_path: HuggingFaceTB/SmolLM2-135M-Instruct
stage: sft
finetuning_type: lora
lora_rank: 16
lora_target: all
dataset: alpaca_demo
dataset_dir: data
template: chatml
output_dir: out
max_steps: 2000
"""
ENDED = ("succeeded", "failed", "cancelled")
# The browser's own timing of the last navigation, in ms from its start (Navigation Timing).
NAVIGATION = (
    "(() => { const n = performance.getEntriesByType('navigation')[0];"
    " return [n.responseEnd, n.domContentLoadedEventEnd, n.loadEventEnd]; })()"
)


def fill(queue: JobQueue, n_jobs: int, n_workers: int, steps: int) -> int:
    """Workers, jobs in every state, and one running job with ``steps`` reported steps; its id."""
    rng = random.Random(0)
    spec = parse_spec(SPEC)
    memory = {
        "total_gib": 3.2,
        "weights_gib": 0.3,
        "lora_gib": 0.01,
        "activations_gib": 2.1,
        "logits_gib": 0.8,
    }
    workers = []
    for i in range(n_workers):
        gpus = GpuReport(backend="rocm", gpus=[GpuEntry(index=0, name="AMD Instinct MI210", memory_gib=64)])
        w, _ = queue.register_worker(queue.create_registration_token(), f"host-{i}", gpus)
        workers.append(w)
    running = None
    with queue.db.conn:
        queue.db.execute("BEGIN IMMEDIATE")  # the connection autocommits otherwise
        for i in range(n_jobs):
            job = queue.submit(
                spec, SPEC, owner=f"user{i % 37}", priority=rng.choice((0, 0, 0, 5)), memory=memory
            )
            kind = i % 10
            if kind < 6:  # ended
                state = ENDED[i % 3]
                w = workers[i % n_workers]
                queue.update(
                    job.id,
                    state=state,
                    worker_id=w.id,
                    started_at="2026-01-01T00:00:00+00:00",
                    finished_at="2026-01-01T01:00:00+00:00",
                    progress_step=2000,
                    progress_total=2000,
                    progress_loss=1.0,
                )
            elif kind == 6 and i // 10 < n_workers:  # running on a worker
                queue.update(
                    job.id, state="running", worker_id=workers[i // 10].id, lease_until=time.time() + 3600
                )
                running = running or job.id
    assert running is not None
    t0 = time.time() - steps
    with queue.db.conn:
        queue.db.execute("BEGIN IMMEDIATE")
        for step in range(1, steps + 1):
            loss = 2.5 * (0.999**step) + rng.random() * 0.05
            progress = Progress(step=step, max_steps=2000, loss=loss, time=t0 + step)
            queue.update(
                running,
                progress=progress.model_dump(exclude_none=True),
                progress_step=step,
                progress_loss=loss,
            )
            if step % 10 == 0:
                queue.log(running, "w", f"{{'loss': {loss:.4f}, 'step': {step}}}")
    return running


def serve(app) -> tuple[uvicorn.Server, str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def timed(fn, runs: int) -> tuple[float, float]:
    fn()  # warm
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


def http_figures(url: str, job_id: int, runs: int) -> None:
    with httpx.Client(base_url=url) as http:
        form = http.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        http.post("/ui/login", data={"csrf": csrf, "token": ADMIN})
        for label, path in (
            ("overview /ui", "/ui"),
            (f"job page /ui/jobs/{job_id}", f"/ui/jobs/{job_id}"),
            ("/metrics", "/metrics"),
        ):

            def get(path: str = path) -> None:
                reply = http.get(path)
                assert reply.status_code == 200, (path, reply.status_code)

            median, p95 = timed(get, runs)
            size = len(http.get(path).content) // 1024
            print(f"HTTP    {label:<28} median {median:6.1f} ms   p95 {p95:6.1f} ms   ({size} KiB)")


def browser_figures(url: str, job_id: int, runs: int) -> None:
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if not chromium:
        print("browser figures skipped: needs Debian's chromium and the playwright package")
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page()
        page.goto(f"{url}/ui/login")
        page.fill("input[name=token]", ADMIN)
        page.click("#signin button")
        page.wait_for_url(f"{url}/ui")
        for label, path, ready in (
            ("overview /ui", "/ui", "#queue-table"),
            (f"job page /ui/jobs/{job_id}", f"/ui/jobs/{job_id}", "#loss-chart canvas"),
        ):
            marks = []
            for _ in range(max(5, runs // 3) + 1):
                page.goto(f"{url}{path}", wait_until="load")
                page.wait_for_selector(ready, state="attached")
                marks.append(page.evaluate(NAVIGATION))
            marks = marks[1:]  # the first warms the cache
            response, ready_ms, load = (statistics.median(m[i] for m in marks) for i in range(3))
            print(
                f"browser {label:<28} median: response {response:6.1f} ms   DOM ready {ready_ms:6.1f} ms"
                f"   load {load:6.1f} ms   ({len(marks)} loads)"
            )
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hipbot-bench-ui-"))
    try:
        cfg = CoordinatorConfig(
            database=root / "c.db", data_dir=root / "c", adapters_dir=root / "a", client_token=ADMIN
        )
        app = create_app(cfg)
        t = time.perf_counter()
        job_id = fill(app.state.queue, args.jobs, args.workers, args.steps)
        print(
            f"database: {args.jobs} jobs, {args.workers} workers, job #{job_id} with {args.steps} steps"
            f" (filled in {time.perf_counter() - t:.1f} s); {os.cpu_count()} CPUs"
        )
        server, url = serve(app)
        http_figures(url, job_id, args.runs)
        browser_figures(url, job_id, args.runs)
        server.should_exit = True
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
