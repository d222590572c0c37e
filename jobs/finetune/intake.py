"""Accepting a validated job: store its dataset attachment, estimate its memory, queue it, and
warn at once when no registered worker could hold it. The coordinator's POST /jobs and the bot's
local queue both go through here, so a job queued either way looks the same to the workers."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path
from typing import Any

from hipbot.i18n import N_
from hipbot.jobs.finetune.memory import (
    MemoryEstimate,
    auto_deepspeed,
    estimate,
    fit_message,
    load_model_config,
)
from hipbot.jobs.finetune.queue import DEFAULT_MAX_ATTEMPTS, Job, JobQueue, Worker
from hipbot.jobs.finetune.spec import JobSpec


def estimate_spec(spec: JobSpec) -> tuple[MemoryEstimate | None, dict[str, Any] | None]:
    """(estimate on one GPU, model config), or (None, None) when the model's config is not at hand
    (a Hub name offline): such a job still runs, and any worker may claim it."""
    try:
        model_config = load_model_config(spec.model_name_or_path)
    except Exception:  # noqa: BLE001 - any failure to read the config means "size unknown"
        return None, None
    return estimate(spec, model_config, 1), model_config


def job_fits(job: Job, worker: Worker) -> bool:
    """Whether ``worker``'s GPUs hold ``job`` (unknown sizes fit anywhere). A job that names no
    DeepSpeed config is measured with what that worker's runner will choose for it
    (``memory.auto_deepspeed``: ZeRO-2 across GPUs, ZeRO-3 or its CPU offload when needed)."""
    if job.memory_gib is None or not job.model_config:
        return True
    spec = JobSpec.model_validate(job.spec)
    if not spec.deepspeed:
        chosen = auto_deepspeed(spec, job.model_config, worker.gpu_count, worker.memory_gib)
        spec = spec.model_copy(update={"deepspeed": chosen})
    est = estimate(spec, job.model_config, worker.gpu_count, gpu_gib=worker.memory_gib)
    return est.total_gib <= worker.memory_gib


def accept_job(
    queue: JobQueue,
    spec: JobSpec,
    spec_yaml: str,
    *,
    attachments_dir: Path,
    dataset: bytes | None = None,
    dataset_name: str | None = None,
    owner: str | None = None,
    guild: str | None = None,
    priority: int = 0,
    name: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    lock: contextlib.AbstractContextManager[Any] | None = None,
) -> tuple[Job, str | None]:
    """Queue ``spec`` (already validated); returns the job and a warning for the user, if any.
    ``lock`` guards the queue calls when several threads share one connection."""
    lock = lock or contextlib.nullcontext()
    attachment_path = attachment_name = None
    folder = attachments_dir / uuid.uuid4().hex
    try:
        if dataset is not None:
            attachment_name = Path(dataset_name or "dataset.jsonl").name or "dataset.jsonl"
            folder.mkdir(parents=True)
            (folder / attachment_name).write_bytes(dataset)
            attachment_path = str(folder / attachment_name)
        est, model_config = estimate_spec(spec)
        with lock:
            job = queue.submit(
                spec,
                spec_yaml,
                owner=owner,
                guild=guild,
                priority=priority,
                name=name,
                model_config=model_config,
                memory=est.as_dict() if est else None,
                attachment_name=attachment_name,
                attachment_path=attachment_path,
                max_attempts=max_attempts,
            )
            workers = queue.workers()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # a job that was not queued leaves no file behind
        raise
    if est is None:
        return job, N_(
            "no memory estimate for {model}: any worker may take it", model=spec.model_name_or_path
        )
    if any(job_fits(job, w) for w in workers):
        return job, None
    warning = fit_message(est, max((w.memory_gib for w in workers), default=None), spec)
    with lock:
        queue.log(job.id, "coordinator", f"no registered worker fits: {warning}")
    return job, warning
