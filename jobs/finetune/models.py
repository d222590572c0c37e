"""The public view of fine-tune jobs and workers: what both job backends (the local queue and the
coordinator's HTTP API) return, what the coordinator answers with, and what the CLI and the bot
read. No coordinator-side file paths beyond the adapter folder, which serving needs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class JobInfo(BaseModel):
    """One job as front ends and workers see it."""

    id: int
    name: str
    owner: str | None
    guild: str | None
    state: str
    final: bool
    priority: int
    spec_yaml: str
    base_model: str
    attempts: int
    max_attempts: int
    worker_id: str | None
    memory_gib: float | None
    progress_step: int | None
    progress_total: int | None
    progress_loss: float | None
    checkpoint_step: int | None
    adapter_dir: str | None
    attachment_name: str | None
    error: str | None
    cancel_requested: bool
    created_at: str
    assigned_at: str | None
    started_at: str | None
    finished_at: str | None
    updated_at: str
    lease_until: float | None = None
    spec: dict[str, Any] = Field(default_factory=dict, description="the validated spec, as JSON")
    metrics: dict[str, Any] = Field(default_factory=dict, description="the trainer's final metrics")
    memory: dict[str, Any] = Field(default_factory=dict, description="the memory estimate's parts")
    artifacts: dict[str, Any] = Field(default_factory=dict, description="uploaded artifacts by kind")
    progress: dict[str, Any] = Field(default_factory=dict, description="the last progress line")


class Submitted(BaseModel):
    """A queued job and a warning for the user (no memory estimate, no worker fits), if any."""

    job: JobInfo
    warning: str | None = None


class WorkerInfo(BaseModel):
    """One registered worker and the GPUs it advertised."""

    id: str
    name: str
    gpu_count: int
    memory_gib: float
    backend: str
    gpus: dict[str, Any] = Field(description="what the worker advertised: backend, runtime, gpus")
    registered_at: str
    last_seen: str | None
    revoked: bool


class LogLine(BaseModel):
    """One line of a job's log; ``id`` pages (``after=``)."""

    id: int
    ts: str
    source: str
    line: str
