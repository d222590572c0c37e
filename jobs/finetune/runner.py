"""Run one training child process and watch it: progress lines, output, cancel, checkpoints.

Shared by ``hipbot finetune run`` (local) and the worker agent: the child is the real launcher
(``torchrun`` for several processes or DeepSpeed, plain python for one device) in its own
process group, so a cancel or a lost lease ends it and every rank it started.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipbot.jobs.finetune.gpu import ROCM_ENV
from hipbot.jobs.finetune.spec import JobSpec
from hipbot.jobs.finetune.trainer import JOB_FILE, PROGRESS_FILE, RESULT_FILE, launch_argv

log = logging.getLogger(__name__)


@dataclass
class ChildResult:
    state: str  # succeeded / failed / cancelled
    returncode: int | None
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a training child gets: ours (ROCm knobs included) plus quiet, unbuffered output."""
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_TELEMETRY": "1"})
    env.setdefault("TRANSFORMERS_VERBOSITY", "warning")
    for key in ROCM_ENV:
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(extra or {})
    return env


def resolve_deepspeed(job_dir: Path, spec: JobSpec, n_procs: int) -> JobSpec:
    """A job that names no DeepSpeed config gets ``memory.auto_deepspeed``'s choice for this
    machine's GPUs, written into its job file so that every rank reads the same."""
    if spec.deepspeed:
        return spec
    from hipbot.jobs.finetune.gpu import detect
    from hipbot.jobs.finetune.memory import auto_deepspeed, load_model_config

    info = detect()
    try:
        config = load_model_config(spec.model_name_or_path)
    except (OSError, ValueError) as exc:
        log.info("deepspeed: auto keeps none (no config.json to estimate from: %s)", exc)
        return spec
    chosen = auto_deepspeed(spec, config, max(1, n_procs), info.memory_gib)
    if chosen is None:
        return spec
    log.info("deepspeed: auto chose %s for %d x %.0f GiB", chosen, max(1, n_procs), info.memory_gib)
    path = job_dir / JOB_FILE
    job = json.loads(path.read_text(encoding="utf-8"))
    job["spec"]["deepspeed"] = chosen
    path.write_text(json.dumps(job, indent=2), encoding="utf-8")
    return spec.model_copy(update={"deepspeed": chosen})


def _reader(stream: Any, out: queue.Queue[str | None]) -> None:
    for line in iter(stream.readline, ""):
        out.put(line.rstrip("\n"))
    out.put(None)


def stop_process_group(proc: subprocess.Popen[str], grace_s: float = 5.0) -> None:
    """SIGTERM the child's process group (the launcher and its ranks), SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run_child(
    job_dir: Path,
    spec: JobSpec,
    n_procs: int,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_output: Callable[[list[str]], None] | None = None,
    should_stop: Callable[[], str | None] | None = None,
    on_tick: Callable[[], None] | None = None,
    poll_s: float = 0.5,
    env: dict[str, str] | None = None,
    master_port: int | None = None,
    preexec: Callable[[], None] | None = None,
) -> ChildResult:
    """Start the training child for ``job_dir`` and wait; ``should_stop`` returning a reason kills it."""
    spec = resolve_deepspeed(job_dir, spec, n_procs)
    argv = launch_argv(job_dir, spec, n_procs, master_port=master_port)
    progress_path = job_dir / PROGRESS_FILE
    result_path = job_dir / RESULT_FILE
    result_path.unlink(missing_ok=True)
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(env),
        start_new_session=True,
        cwd=str(job_dir),
        preexec_fn=preexec,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
    reader.start()
    offset = progress_path.stat().st_size if progress_path.exists() else 0
    tail: list[str] = []
    stopped: str | None = None

    def drain() -> None:
        nonlocal offset
        batch = []
        while True:
            try:
                item = lines.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        if batch:
            tail.extend(batch)
            del tail[:-40]
            if on_output:
                on_output(batch)
        if progress_path.exists() and on_progress:
            with progress_path.open("r", encoding="utf-8") as fh:
                fh.seek(offset)
                chunk = fh.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            offset += len(complete.encode("utf-8"))
            for raw in complete.splitlines():
                try:
                    on_progress(json.loads(raw))
                except ValueError:
                    continue

    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            drain()
            if on_tick:
                on_tick()
            if should_stop and (reason := should_stop()):
                stopped = reason
                stop_process_group(proc)
                break
    except BaseException:
        stop_process_group(proc, grace_s=2)
        raise
    proc.wait()
    reader.join(timeout=5)
    drain()
    if stopped:
        return ChildResult("cancelled", proc.returncode, stopped)
    result: dict[str, Any] = {}
    if result_path.is_file():
        try:
            result = json.loads(result_path.read_text(encoding="utf-8"))
        except ValueError:
            result = {}
    if proc.returncode == 0 and result.get("ok"):
        return ChildResult("succeeded", 0, None, result.get("metrics", {}))
    error = result.get("error") or _last_error(tail) or f"training exited with status {proc.returncode}"
    return ChildResult("failed", proc.returncode, error)


def _last_error(tail: list[str]) -> str | None:
    for line in reversed(tail):
        if line.startswith("error:") or "Error" in line or "error" in line:
            return line.strip()[:500]
    return None
