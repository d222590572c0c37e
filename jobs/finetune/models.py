"""The public view of fine-tune jobs and workers: what both job backends (the local queue and the
coordinator's HTTP API) return, what the coordinator answers with, and what the CLI and the bot
read. No coordinator-side file paths beyond the adapter folder, which serving needs."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SkipValidation,
    field_validator,
)

BIG = 2**63 - 1  # SQLite's largest integer


def _finite_or_none(value: object) -> object:
    """A non-finite float (a diverged loss) is reported as unknown rather than refused."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


Count = Annotated[int, Field(ge=0, le=BIG)]
Number = Annotated[float | None, BeforeValidator(_finite_or_none), AfterValidator(_finite_or_none)]


class Progress(BaseModel):
    """One progress line of the trainer, as a worker reports it in a heartbeat. Checked here, so
    a job never stores a loss that is not a number."""

    model_config = ConfigDict(extra="ignore")

    step: Count | None = None
    max_steps: Count | None = None
    epoch: Number = None
    loss: Number = None
    lr: Number = None
    grad_norm: Number = None
    tokens: Count | None = None
    tokens_per_second: Number = None
    eta_seconds: Number = None
    time: Number = None


class GpuEntry(BaseModel):
    """One GPU a worker advertises."""

    model_config = ConfigDict(extra="ignore")

    index: int = Field(0, ge=0, le=1024)
    name: str = Field("", max_length=200)
    arch: str = Field("", max_length=64)
    memory_gib: float = Field(ge=0, le=1e6, allow_inf_nan=False)
    bf16: bool = False


class GpuReport(BaseModel):
    """A worker's accelerators: backend, runtime, torch version and GPUs (``memory_gib`` for a
    CPU-only worker: what it lends)."""

    model_config = ConfigDict(extra="ignore")

    backend: str = Field("cpu", max_length=20)
    runtime: str | None = Field(None, max_length=100)
    torch: str = Field("", max_length=100)
    gpus: list[GpuEntry] = Field(default_factory=list, max_length=256)
    visible: str | None = Field(None, max_length=1000)
    memory_gib: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False)

    @property
    def usable_gib(self) -> float:
        """What one job may use per GPU: the smallest GPU's memory (or the CPU worker's)."""
        return float(self.memory_gib or min((g.memory_gib for g in self.gpus), default=0.0))


def _lenient(value: object) -> float | None:
    """A stored value that is not a finite number (written before progress was checked, or by
    hand) reads as unknown, so listing jobs never fails on one bad row."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if isinstance(value, int | float | str) else math.nan
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


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

    @field_validator("progress", mode="before")
    @classmethod
    def _progress(cls, value: object) -> dict[str, float]:
        """Only the numbers of the last progress line (a row stored before progress was checked
        may hold anything): every reader can format what it finds."""
        if not isinstance(value, dict):
            return {}
        return {str(k): v for k, v in value.items() if _lenient(v) is not None and not isinstance(v, str)}

    @field_validator("progress_loss", "memory_gib", mode="before")
    @classmethod
    def _float(cls, value: object) -> float | None:
        return _lenient(value)

    @field_validator("progress_step", "progress_total", mode="before")
    @classmethod
    def _int(cls, value: object) -> int | None:
        number = _lenient(value)
        return int(number) if number is not None and number.is_integer() and abs(number) <= BIG else None


class Submitted(BaseModel):
    """A queued job and a warning for the user (no memory estimate, no worker fits), if any."""

    job: JobInfo
    # kept as given (not validated into a plain str): a hipbot.i18n.Message is localized where shown
    warning: SkipValidation[str | None] = None


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
