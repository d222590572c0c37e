"""The coordinator under attack: its latency for a normal request while strangers fire YAML bombs,
a decompression bomb and idle long-polls at it (issue 15; goal: p99 under 200 ms).

It starts a real coordinator (``hipbot coordinator``, its own process, loopback only) in a
temporary HIPBOT_HOME, registers workers, and then, for ``--seconds``:

- 23 workers keep 2 idle long-polls each open (46), and one of them keeps asking for a third;
- 4 threads post YAML bombs (nested anchors, aliases of a long string, anchors in lora_target,
  a self-referencing alias) to /validate and /jobs;
- one worker uploads a 1 MB adapter that unpacks to 1,000 MB, again and again;
- an honest worker heartbeats its job every second;

while this process times ``GET /jobs`` every 20 ms. Every loop is bounded by the deadline and
every request by a timeout. The attackers run in a child process, so their threads do not slow
the timing thread.

    .venv/bin/python bench/bench_hostile_coordinator.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import math
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

TOKEN = "bench-client-token"
YAML = "model_name_or_path: org/bench-model\ndataset: mine\nlora_rank: 8\nmax_steps: 5\n"
DATA = b'[{"instruction": "say hi", "output": "hi"}]'
GPUS = {"backend": "rocm", "gpus": [{"name": "MI300X", "arch": "gfx942", "memory_gib": 192.0, "bf16": True}]}
IDLE_WORKERS = 23


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bombs() -> list[str]:
    """The issue's YAML bombs and their relatives."""
    laughs = ["model_name_or_path: m", "dataset: d", "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    long = "q_proj," * 5000
    wide = f"model_name_or_path: m\ndataset: d\nx: &x {long}\nlr_scheduler_kwargs: {{{', '.join(f'k{i}: *x' for i in range(60))}}}\n"
    target = ["model_name_or_path: m", "dataset: d", "t0: &t0 [q_proj, k_proj, v_proj, o_proj]"]
    target += [f"t{i}: &t{i} [{', '.join([f'*t{i - 1}'] * 4)}]" for i in range(1, 8)]
    target += ["lora_target: *t7"]
    return [
        "\n".join(laughs) + "\n",
        wide,
        "\n".join(target) + "\n",
        "model_name_or_path: &a [*a]\ndataset: d\n",
    ]


class Zeros(io.RawIOBase):
    """``size`` zero bytes, read in chunks (the bomb is built without holding 1 GB)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def decompression_bomb(unpacked: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo("adapter_model.safetensors")
        info.size = unpacked
        tar.addfile(info, Zeros(unpacked))
        config = tarfile.TarInfo("adapter_config.json")
        config.size = 2
        tar.addfile(config, io.BytesIO(b"{}"))
    return buf.getvalue()


def worker_headers(url: str, token: str, name: str) -> dict[str, str]:
    reply = httpx.post(
        f"{url}/workers/register", json={"token": token, "name": name, "gpus": GPUS}, timeout=30
    )
    reply.raise_for_status()
    creds = reply.json()
    return {"Authorization": f"Bearer {creds['worker_id']}:{creds['secret']}"}


def attack(
    url: str,
    idle: list[dict[str, str]],
    uploader: dict[str, str],
    job_id: int,
    bomb: bytes,
    seconds: float,
    attacks: set[str],
    out,  # noqa: ANN001
) -> None:
    """The child process: every attacker thread until the deadline; outcomes counted by kind.
    The bomb is built before the attack starts, so that gzip's minute of CPU is not the attack."""
    deadline = time.monotonic() + seconds
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    client_headers = {"Authorization": f"Bearer {TOKEN}"}

    def count(kind: str, status: int | str) -> None:
        with lock:
            outcomes[f"{kind} -> {status}"] += 1

    def long_poll(headers: dict[str, str]) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while time.monotonic() < deadline:
                wait = max(0.0, min(20.0, deadline - time.monotonic()))
                count(
                    "idle long-poll",
                    c.post("/workers/claim", json={"wait_s": wait}, headers=headers).status_code,
                )

    def third_claim() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            time.sleep(1.0)
            while time.monotonic() < deadline:
                count(
                    "3rd claim of one worker",
                    c.post("/workers/claim", json={"wait_s": 20}, headers=idle[0]).status_code,
                )
                time.sleep(0.5)

    def yaml_bombs(offset: int) -> None:
        texts = bombs()
        with httpx.Client(base_url=url, timeout=60, headers=client_headers) as c:
            i = offset
            while time.monotonic() < deadline:
                text = texts[i % len(texts)]
                route = "/validate" if i % 2 else "/jobs"
                reply = c.post(route, data={"config": text})
                ok = reply.status_code == 200 and reply.json().get("ok") is False
                count(
                    f"YAML bomb to {route}",
                    "refused" if ok or reply.status_code == 422 else reply.status_code,
                )
                i += 1

    def decompress() -> None:
        headers = {**uploader, "X-Content-SHA256": hashlib.sha256(bomb).hexdigest()}
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.monotonic() < deadline:
                reply = c.put(f"/jobs/{job_id}/artifacts/adapter", content=bomb, headers=headers)
                count(f"decompression bomb ({len(bomb) // 1024} KiB -> 1000 MiB)", reply.status_code)

    threads = []
    if "polls" in attacks:
        threads += [threading.Thread(target=long_poll, args=(h,)) for h in idle for _ in range(2)]
        threads += [threading.Thread(target=third_claim)]
    if "upload" in attacks:
        threads += [threading.Thread(target=decompress)]
    if "yaml" in attacks:
        threads += [threading.Thread(target=yaml_bombs, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(dict(outcomes))


def timed_gets(url: str, seconds: float, pause: float = 0.02) -> list[float]:
    """Latencies (ms) of GET /jobs, one every ``pause`` seconds, for ``seconds``."""
    latencies = []
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            c.get("/jobs").raise_for_status()
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(pause)
    return latencies


def percentile(ms: list[float], p: float) -> float:
    """The nearest-rank percentile: a latency that was measured, never above the maximum."""
    ranked = sorted(ms)
    return ranked[max(0, math.ceil(p / 100 * len(ranked)) - 1)]


def summary(name: str, ms: list[float]) -> str:
    return (
        f"{name:28} n={len(ms):5d}  p50 {percentile(ms, 50):7.1f} ms  p99 {percentile(ms, 99):7.1f} ms"
        f"  max {max(ms):7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the attack lasts")
    parser.add_argument(
        "--attacks",
        default="yaml,upload,polls",
        help="which attacks to run, comma-separated (yaml: the YAML bombs; upload: the decompression "
        "bomb; polls: the idle long-polls and a worker's 3rd claim)",
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]  # the machine's own load: other work slows the coordinator too
    # built first: gzip takes a while, and the uploading worker's lease must not run out meanwhile
    bomb = decompression_bomb(1000 * 2**20)
    home = Path(tempfile.mkdtemp(prefix="hipbot-bench-hostile-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HIPBOT_HOME": str(home), "HIPBOT_COORDINATOR_TOKEN": TOKEN}
    env.pop("HIPBOT_DB", None)
    cmd = [sys.executable, "-m", "hipbot.cli", "coordinator", "--host", "127.0.0.1", "--port", str(port)]
    coordinator = subprocess.Popen(
        [*cmd, "--new-tokens", str(IDLE_WORKERS + 2)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert coordinator.stdout is not None
        tokens = [coordinator.stdout.readline().split(": ", 1)[1].strip() for _ in range(IDLE_WORKERS + 2)]
        for _ in range(600):
            try:
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        client = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"})
        honest = worker_headers(url, tokens[0], "honest")
        uploader = worker_headers(url, tokens[1], "uploader")
        idle = [worker_headers(url, t, f"idle{i}") for i, t in enumerate(tokens[2:])]
        jobs = []
        for who in (uploader, honest):
            client.post(
                "/jobs", data={"config": YAML}, files={"dataset": ("mine.json", DATA)}
            ).raise_for_status()
            jobs.append(client.post("/workers/claim", json={"wait_s": 1}, headers=who).json()["job"]["id"])
        upload_job, honest_job = jobs

        baseline = timed_gets(url, 3.0)
        queue: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
        attacker = multiprocessing.get_context("fork").Process(
            target=attack,
            args=(url, idle, uploader, upload_job, bomb, args.seconds, set(args.attacks.split(",")), queue),
        )
        beats: Counter[int] = Counter()
        stop = threading.Event()

        def heartbeat() -> None:
            with httpx.Client(base_url=url, timeout=60) as c:
                while not stop.is_set():
                    beats[
                        c.post(
                            f"/jobs/{honest_job}/heartbeat", json={"progress": {"step": 1}}, headers=honest
                        ).status_code
                    ] += 1
                    stop.wait(1.0)

        beat_thread = threading.Thread(target=heartbeat)
        attacker.start()
        beat_thread.start()
        time.sleep(1.5)  # the long-polls are open, the bombs are flying
        under_attack = timed_gets(url, max(1.0, args.seconds - 3.0))
        outcomes = queue.get(timeout=args.seconds + 180)
        attacker.join(timeout=60)
        stop.set()
        beat_thread.join()
        state = client.get(f"/jobs/{honest_job}").json()
        on_disk = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())

        print(
            f"coordinator {url} (its own process), attack {args.seconds:g} s: {args.attacks}; "
            f"{os.cpu_count()} CPUs, load average {load:.1f} before"
        )
        print(summary("GET /jobs, quiet", baseline))
        print(summary("GET /jobs, under attack", under_attack))
        for kind, n in sorted(outcomes.items()):
            print(f"  {kind:60} x{n}")
        print(f"honest worker heartbeats: {dict(beats)}; its job is {state['state']} on {state['worker_id']}")
        print(f"HIPBOT_HOME after the attack: {on_disk / 2**20:.1f} MiB on disk")
        p99 = percentile(under_attack, 99)
        print(f"goal p99 < 200 ms under attack: {'met' if p99 < 200 else 'NOT met'} ({p99:.1f} ms)")
        return 0
    finally:
        coordinator.terminate()
        try:
            coordinator.wait(timeout=20)
        except subprocess.TimeoutExpired:
            coordinator.kill()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
