"""Request and reply bodies of the coordinator's HTTP API (what /docs shows). The job, worker and
log-line replies are the public models of ``hipbot.jobs.finetune.models``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from hipbot.jobs.finetune.models import GpuReport, JobInfo, Progress

MAX_LINES = 2000  # log lines in one request


class ErrorReply(BaseModel):
    """Every refusal: the message written for the user (with its hint, if any)."""

    detail: str


class RegisterRequest(BaseModel):
    token: str = Field(description="a one-time registration token")
    name: str = Field(max_length=100)
    gpus: GpuReport = Field(description="the worker's GPUs: backend, runtime, torch, gpus[]")


class RegisterReply(BaseModel):
    worker_id: str
    secret: str = Field(description="shown only now; the coordinator keeps its hash")


class ClaimRequest(BaseModel):
    wait_s: float = Field(
        0.0, ge=0, le=3600, allow_inf_nan=False, description="long-poll this long (capped by the coordinator)"
    )
    gpus: GpuReport | None = Field(None, description="the worker's GPUs, when they changed")


class ClaimReply(BaseModel):
    job: JobInfo
    lease_s: float = Field(description="heartbeat within this many seconds or lose the job")


class HeartbeatRequest(BaseModel):
    progress: Progress | None = None
    logs: list[str] = Field(default_factory=list, max_length=MAX_LINES)


class HeartbeatReply(BaseModel):
    cancel: bool = Field(description="stop the job: its owner cancelled it")
    lease_s: float


class LogsRequest(BaseModel):
    lines: list[str] = Field(max_length=MAX_LINES)


class ResultRequest(BaseModel):
    state: str = Field(description="succeeded, failed or cancelled")
    error: str | None = None
    metrics: dict[str, Any] | None = None
    retry: bool = Field(False, description="a failure of this worker only: give the job back")


class CancelRequest(BaseModel):
    by: str | None = Field(
        None,
        max_length=200,
        description="the user a trusted front end acts for (a user's own token acts as that user)",
    )


class ValidateReply(BaseModel):
    ok: bool
    error: str | None
    estimate: dict[str, Any] | None = Field(None, description="the memory estimate on one GPU")


class OkReply(BaseModel):
    ok: bool = True


class ArtifactReply(BaseModel):
    """A stored upload: ``step`` for a checkpoint, ``adapter_dir`` for the adapter."""

    ok: bool = True
    step: int | None = None
    adapter_dir: str | None = None
