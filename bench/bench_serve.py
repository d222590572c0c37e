"""Serving figures on a real vLLM CPU server (SmolLM2-135M-Instruct, LoRA on).

1. Job success -> adapter answering a chat (goal: < 10 s once the server is up): a 1-step LoRA
   job trains through ``hipbot finetune run``; from the moment it has succeeded we time
   register + publish + the first complete chat answer, through the library and through the CLI
   (two separate ``hipbot`` processes, as a user would type them).
2. What hipbot adds to a chat request over calling vLLM directly (goal: < 20 ms at p50): the same
   streamed request (temperature 0, same max_tokens) sent alternately with plain httpx and with
   ``hipbot.jobs.serve.chat.stream_chat``, plus hipbot's own per-request work measured alone.

    .venv/bin/python bench/bench_serve.py [--requests 40] [--url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def _hipbot(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "hipbot.cli", *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"hipbot {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def _direct(http: httpx.Client, url: str, model: str, prompt: str, max_tokens: int) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
    }
    out = []
    with http.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    out.append((choice.get("delta") or {}).get("content") or "")
    return "".join(out)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(url: str, model_dir: Path, requests: int, home: Path) -> None:
    from fixtures_finetune import job_yaml, write_datasets

    from hipbot.config import load_settings
    from hipbot.jobs.finetune.queue import JobQueue
    from hipbot.jobs.serve.chat import _client, _messages, resolve_target, stream_chat
    from hipbot.jobs.serve.publish import publish, register_adapter
    from hipbot.jobs.serve.registry import Registry
    from hipbot.jobs.serve.vllm_client import _sse_data

    env = os.environ | {"HIPBOT_HOME": str(home)}
    os.environ["HIPBOT_HOME"] = str(home)
    config = home / "job.yaml"
    config.write_text(
        job_yaml(model_dir, write_datasets(home / "data"), home / "out", max_steps=1,
                 per_device_train_batch_size=1, cutoff_len=32, disable_gradient_checkpointing=True)
    )  # fmt: skip
    t = time.perf_counter()
    _hipbot("finetune", "run", str(config), "--cpu", env=env)
    print(f"training job (1 step, SmolLM2, CPU, not part of the goal): {time.perf_counter() - t:.1f} s")
    settings = load_settings()
    (job,) = JobQueue.open(settings.database).list()
    _hipbot("serve", "servers", "add", "bench", url, env=env)

    # 1a. library: register + publish + the answer (first streamed piece, then complete)
    t0 = time.perf_counter()
    registry = Registry.open(settings)
    register_adapter(registry, settings, "bench-lib", Path(job.adapter_dir), job_id=str(job.id))
    t_reg = time.perf_counter()
    publish(registry, "bench-lib")
    t_pub = time.perf_counter()
    stream = stream_chat(settings, "What is hipMalloc?", adapter="bench-lib", max_tokens=16, temperature=0)
    answer = next(stream)
    t_first = time.perf_counter()
    answer += "".join(stream)
    t_chat = time.perf_counter()
    print(
        f"job success -> adapter answers (library): first token {t_first - t0:.2f} s, complete "
        f"{t_chat - t0:.2f} s (register {t_reg - t0:.2f}, publish {t_pub - t_reg:.2f}, first token "
        f"{t_first - t_pub:.2f}, 16 tokens {t_chat - t_first:.2f}) [goal < 10 s] answer={answer[:40]!r}"
    )
    # 1b. CLI: two commands as a user types them; `hipbot chat` streams to stdout
    t0 = time.perf_counter()
    _hipbot("serve", "publish", "bench-cli", "--job", str(job.id), env=env)
    t_pub = time.perf_counter()
    chat = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hipbot.cli",
            "chat",
            "--adapter",
            "bench-cli",
            "--max-tokens",
            "16",
            "What is hipMalloc?",
        ],
        env=env,
        stdout=subprocess.PIPE,
    )
    assert chat.stdout is not None
    chat.stdout.read(1)
    t_first = time.perf_counter()
    chat.communicate()
    t_chat = time.perf_counter()
    print(
        f"job success -> adapter answers (CLI): first token {t_first - t0:.2f} s, complete {t_chat - t0:.2f} s "
        f"(hipbot serve publish --job {t_pub - t0:.2f}, hipbot chat first token {t_first - t_pub:.2f}) [goal < 10 s]"
    )

    # 2. overhead per chat request
    prompt, max_tokens = "Name one HIP runtime function.", 1  # keep vLLM's own time (and noise) small
    http = httpx.Client()  # the direct baseline at its best: one client, kept-alive connection
    for _ in range(3):  # warm both paths
        _direct(http, url, "bench-lib", prompt, max_tokens)
        "".join(stream_chat(settings, prompt, adapter="bench-lib", max_tokens=max_tokens, temperature=0))
    direct, hip, diffs = [], [], []
    for _ in range(requests):
        a = time.perf_counter()
        _direct(http, url, "bench-lib", prompt, max_tokens)
        b = time.perf_counter()
        "".join(stream_chat(settings, prompt, adapter="bench-lib", max_tokens=max_tokens, temperature=0))
        c = time.perf_counter()
        direct.append((b - a) * 1000)
        hip.append((c - b) * 1000)
        diffs.append(hip[-1] - direct[-1])
    http.close()
    # hipbot's own work per request, without vLLM's noisy compute: open the registry, pick the
    # server, get the client and build the messages, and parse a real recorded 16-token SSE answer.
    body = {
        "model": "bench-lib",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        "stream": True,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        recorded = list(response.iter_lines())
    own = []
    for _ in range(200):
        a = time.perf_counter()
        target = resolve_target(settings, "bench-lib")
        _client(target)
        _messages(prompt, None, None)
        for data in _sse_data(iter(recorded)):
            if data != "[DONE]":
                json.loads(data)
        own.append((time.perf_counter() - a) * 1000)
    q1, q3 = _pct(diffs, 0.25), _pct(diffs, 0.75)
    print(f"chat request, {requests} each, alternating, {max_tokens} token streamed:")
    print(f"  vLLM direct (httpx)   p50 {statistics.median(direct):7.1f} ms  p90 {_pct(direct, 0.9):7.1f} ms")
    print(f"  hipbot stream_chat    p50 {statistics.median(hip):7.1f} ms  p90 {_pct(hip, 0.9):7.1f} ms")
    print(
        f"  paired difference     p50 {statistics.median(diffs):7.1f} ms  (IQR {q1:.0f}..{q3:.0f} ms: "
        f"vLLM's own variation on this CPU) [goal < 20 ms]"
    )
    print(
        f"  hipbot's own work per request (registry, server choice, client, SSE parsing) "
        f"p50 {statistics.median(own):.2f} ms  p90 {_pct(own, 0.9):.2f} ms [goal < 20 ms]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--url", help="Use this running vLLM server (LoRA on) instead of starting one.")
    args = parser.parse_args()
    from fixtures_vllm import SERVED_NAME, SMOLLM2_DIR

    from hipbot.jobs.serve.base_models import prepare_smollm2
    from hipbot.jobs.serve.local_vllm import LocalVllm

    model_dir = prepare_smollm2(SMOLLM2_DIR).path
    with tempfile.TemporaryDirectory(prefix="hipbot-bench-serve-") as tmp:
        home = Path(tmp)
        if args.url:
            run(args.url.rstrip("/"), model_dir, args.requests, home)
            return
        t = time.perf_counter()
        with LocalVllm(model_dir, SERVED_NAME, log_path=home / "vllm.log") as server:
            print(f"vLLM CPU server up in {time.perf_counter() - t:.1f} s (not part of the goals)")
            run(server.url, model_dir, args.requests, home)


if __name__ == "__main__":
    main()
