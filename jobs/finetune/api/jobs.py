"""Jobs, as clients (the CLI, the Discord bot) see them: validate, submit, list, read, cancel,
read the log."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Body, Depends, File, Form, Query, UploadFile

from hipbot.errors import InvalidInput, TooLarge
from hipbot.jobs.finetune.api.protocol import CancelRequest, ErrorReply, ValidateReply
from hipbot.jobs.finetune.api.state import Service, client
from hipbot.jobs.finetune.intake import accept_job, estimate_spec
from hipbot.jobs.finetune.models import JobInfo, LogLine, Submitted
from hipbot.jobs.finetune.spec import validate_job

router = APIRouter(
    tags=["clients"],
    dependencies=[Depends(client)],
    responses={401: {"model": ErrorReply, "description": "missing or wrong coordinator token"}},
)
NOT_FOUND = {404: {"model": ErrorReply, "description": "no such job"}}


async def read_upload(upload: UploadFile, limit: int) -> bytes:
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"attached dataset is larger than the {limit // 2**20} MiB limit")
    return data


@router.post("/validate", response_model_exclude_unset=True)
async def validate_route(
    service: Service,
    config_yaml: Annotated[str, Form(alias="config")],
    dataset: Annotated[UploadFile | None, File()] = None,
) -> ValidateReply:
    """Check a job YAML (and an attached dataset) without queueing it."""
    data = await read_upload(dataset, service.config.max_attachment_bytes) if dataset else None
    result = validate_job(config_yaml, data, dataset.filename if dataset else None)
    reply = ValidateReply(ok=result.ok, error=result.error)
    if result.spec:
        est, _ = await asyncio.to_thread(estimate_spec, result.spec)
        reply.estimate = est.as_dict() if est else None
    return reply


@router.post(
    "/jobs",
    status_code=201,
    responses={
        413: {"model": ErrorReply, "description": "the dataset is too large"},
        422: {"model": ErrorReply, "description": "the config does not validate"},
    },
)
async def submit(
    service: Service,
    config_yaml: Annotated[str, Form(alias="config")],
    owner: Annotated[str | None, Form()] = None,
    guild: Annotated[str | None, Form()] = None,
    priority: Annotated[int, Form()] = 0,
    name: Annotated[str | None, Form()] = None,
    dataset: Annotated[UploadFile | None, File()] = None,
) -> Submitted:
    """Queue a job: the YAML config and, optionally, its dataset file."""
    config = service.config
    data = await read_upload(dataset, config.max_attachment_bytes) if dataset else None
    result = validate_job(config_yaml, data, dataset.filename if dataset else None)
    if result.spec is None:
        raise InvalidInput(result.error or "invalid job config")
    job, warning = await asyncio.to_thread(
        accept_job,
        service.queue,
        result.spec,
        config_yaml,
        attachments_dir=config.data_dir / "attachments",
        dataset=data,
        dataset_name=dataset.filename if dataset else None,
        owner=owner,
        guild=guild,
        priority=priority,
        name=name,
        max_attempts=config.max_attempts,
        lock=service.lock,
    )
    return Submitted(job=job.info(), warning=warning)


@router.get("/jobs")
def list_jobs(
    service: Service,
    owner: str | None = None,
    guild: str | None = None,
    state: Annotated[list[str] | None, Query()] = None,
    limit: int = 50,
) -> list[JobInfo]:
    """Newest first; ``state`` may repeat."""
    states = tuple(state or ()) or None
    jobs = service.locked(service.queue.list, owner=owner, guild=guild, states=states, limit=limit)
    return [j.info() for j in jobs]


@router.get("/jobs/{job_id}", responses=NOT_FOUND)
def get_job(service: Service, job_id: int) -> JobInfo:
    return service.locked(service.queue.get, job_id).info()


@router.post(
    "/jobs/{job_id}/cancel",
    responses={**NOT_FOUND, 400: {"model": ErrorReply, "description": "not the owner, or already final"}},
)
def cancel_job(
    service: Service, job_id: int, body: Annotated[CancelRequest | None, Body()] = None
) -> JobInfo:
    """Cancel a queued job at once; a running one stops within one heartbeat of its worker."""
    return service.locked(service.queue.cancel, job_id, by=body.by if body else None).info()


@router.get("/jobs/{job_id}/logs", responses=NOT_FOUND)
def job_logs(service: Service, job_id: int, after: int = 0, limit: int = 1000) -> list[LogLine]:
    """The job's log lines after line id ``after``."""
    return service.locked(service.queue.logs, job_id, after=after, limit=limit)
