"""Jobs, as clients (the CLI, the Discord bot) see them: validate, submit, list, read, cancel,
read the log. Who submits or cancels is the caller's token (``state.client``), never the body
alone: a user's token acts as that user, a trusted front end names the user it vouches for."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, Depends, File, Form, Query, UploadFile

from hipbot.errors import InvalidInput, TooLarge
from hipbot.i18n import N_
from hipbot.jobs.finetune.api.protocol import CancelRequest, ErrorReply, ValidateReply
from hipbot.jobs.finetune.api.state import CallingClient, JobId, Service, acting_as, client
from hipbot.jobs.finetune.intake import accept_job, estimate_spec
from hipbot.jobs.finetune.models import JobInfo, LogLine, Submitted
from hipbot.jobs.finetune.queue import MAX_ID, OPERATOR
from hipbot.jobs.finetune.spec import MAX_SPEC_BYTES, Validation, validate_job

router = APIRouter(
    tags=["clients"],
    dependencies=[Depends(client)],
    responses={401: {"model": ErrorReply, "description": "missing or wrong coordinator token"}},
)
NOT_FOUND = {404: {"model": ErrorReply, "description": "no such job"}}
MAX_PRIORITY = 1000
ConfigText = Annotated[str, Form(alias="config", max_length=MAX_SPEC_BYTES)]
# A part sent with an empty file name arrives as text: named so the refusal can say what happened.
Dataset = Annotated[UploadFile | str | None, File()]


async def read_upload(upload: UploadFile | str, limit: int) -> tuple[bytes, str]:
    """The attached file's bytes and name; refused when over ``limit`` or sent without a name."""
    if isinstance(upload, str) or not upload.filename or not Path(upload.filename).name:
        raise InvalidInput(
            N_("the attached dataset has no file name"),
            hint=N_("send it as a file with a name such as data.jsonl (the suffix says its format)"),
        )
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(
            N_("attached dataset is larger than the {limit_mib} MiB limit", limit_mib=limit // 2**20)
        )
    return data, Path(upload.filename).name


async def _validate(service: Service, text: str, attachment: tuple[bytes, str] | None) -> Validation:
    """``validate_job`` on the config checkers' own threads, under the time limit: a config that
    is slow to read (or a queue of them) never holds the event loop or the request threads."""
    data, name = attachment or (None, None)
    try:
        return await asyncio.wait_for(
            service.run(service.spec_pool, validate_job, text, data, name), service.config.spec_timeout_s
        )
    except TimeoutError as exc:
        raise InvalidInput(
            N_(
                "the job config took longer than {timeout:g} s to check",
                timeout=service.config.spec_timeout_s,
            ),
            hint=N_("a LLaMA-Factory train YAML is a few dozen plain keys; drop anchors and aliases"),
        ) from exc


@router.post("/validate", response_model_exclude_unset=True)
async def validate_route(service: Service, config_yaml: ConfigText, dataset: Dataset = None) -> ValidateReply:
    """Check a job YAML (and an attached dataset) without queueing it."""
    attachment = await read_upload(dataset, service.config.max_attachment_bytes) if dataset else None
    result = await _validate(service, config_yaml, attachment)
    reply = ValidateReply(ok=result.ok, error=result.error)
    if result.spec:
        est, _ = await service.run(service.spec_pool, estimate_spec, result.spec)
        reply.estimate = est.as_dict() if est else None
    return reply


@router.post(
    "/jobs",
    status_code=201,
    responses={
        403: {"model": ErrorReply, "description": "a user's token naming another owner"},
        413: {"model": ErrorReply, "description": "the dataset is too large"},
        422: {"model": ErrorReply, "description": "the config does not validate"},
    },
)
async def submit(
    service: Service,
    caller: CallingClient,
    config_yaml: ConfigText,
    owner: Annotated[str | None, Form(max_length=200)] = None,
    guild: Annotated[str | None, Form(max_length=200)] = None,
    priority: Annotated[int, Form(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0,
    name: Annotated[str | None, Form(max_length=200)] = None,
    dataset: Dataset = None,
) -> Submitted:
    """Queue a job: the YAML config and, optionally, its dataset file. ``owner`` is the user a
    trusted front end submits for; with a user's token it may only be that user."""
    config = service.config
    owner = acting_as(caller, owner)
    attachment = await read_upload(dataset, config.max_attachment_bytes) if dataset else None
    result = await _validate(service, config_yaml, attachment)
    if result.spec is None:
        raise InvalidInput(result.error or "invalid job config")
    job, warning = await service.run(
        service.spec_pool,
        accept_job,
        service.queue,
        result.spec,
        config_yaml,
        attachments_dir=config.data_dir / "attachments",
        dataset=attachment[0] if attachment else None,
        dataset_name=attachment[1] if attachment else None,
        owner=owner,
        guild=guild,
        priority=priority,
        name=name,
        max_attempts=config.max_attempts,
        lock=service.lock,
    )
    service.wake()
    return Submitted(job=job.info(), warning=warning)


@router.get("/jobs")
def list_jobs(
    service: Service,
    owner: Annotated[str | None, Query(max_length=200)] = None,
    guild: Annotated[str | None, Query(max_length=200)] = None,
    state: Annotated[list[str] | None, Query(max_length=10)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[JobInfo]:
    """Newest first; ``state`` may repeat."""
    states = tuple(state or ()) or None
    jobs = service.locked(service.queue.list, owner=owner, guild=guild, states=states, limit=limit)
    return [j.info() for j in jobs]


@router.get("/jobs/{job_id}", responses=NOT_FOUND)
def get_job(service: Service, job_id: JobId) -> JobInfo:
    return service.locked(service.queue.get, job_id).info()


@router.post(
    "/jobs/{job_id}/cancel",
    responses={
        **NOT_FOUND,
        400: {"model": ErrorReply, "description": "already final"},
        403: {"model": ErrorReply, "description": "not the owner"},
    },
)
def cancel_job(
    service: Service,
    caller: CallingClient,
    job_id: JobId,
    body: Annotated[CancelRequest | None, Body()] = None,
) -> JobInfo:
    """Cancel a queued job at once; a running one stops within one heartbeat of its worker. A
    user's token cancels only that user's jobs; a trusted front end names the user it acts for
    (``by``), or acts as the operator."""
    by = acting_as(caller, body.by if body else None) or OPERATOR
    return service.locked(service.queue.cancel, job_id, by=by).info()


@router.get("/jobs/{job_id}/logs", responses=NOT_FOUND)
def job_logs(
    service: Service,
    job_id: JobId,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[LogLine]:
    """The job's log lines after line id ``after``."""
    return service.locked(service.queue.logs, job_id, after=after, limit=limit)
