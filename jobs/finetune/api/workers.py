"""Workers: register with a one-time token, long-poll for a job that fits, and, on the job they
hold, heartbeat (keeps the lease; says whether it was cancelled), send log lines and report the
result. Clients list the workers."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Response

from hipbot.errors import Conflict, InvalidInput
from hipbot.jobs.finetune.api.protocol import (
    ClaimReply,
    ClaimRequest,
    ErrorReply,
    HeartbeatReply,
    HeartbeatRequest,
    LogsRequest,
    OkReply,
    RegisterReply,
    RegisterRequest,
    ResultRequest,
)
from hipbot.jobs.finetune.api.state import CallingWorker, HeldJob, Service, client
from hipbot.jobs.finetune.intake import job_fits
from hipbot.jobs.finetune.models import JobInfo, WorkerInfo
from hipbot.jobs.finetune.queue import FINAL

router = APIRouter(
    tags=["workers"],
    responses={401: {"model": ErrorReply, "description": "unknown worker or wrong secret"}},
)
HELD = {403: {"model": ErrorReply, "description": "this worker does not hold the job"}}


@router.get("/workers", dependencies=[Depends(client)], tags=["clients"])
def list_workers(service: Service) -> list[WorkerInfo]:
    """The registered workers (not revoked) and their GPUs."""
    return [w.info() for w in service.locked(service.queue.workers)]


@router.post("/workers/register")
def register(service: Service, body: RegisterRequest) -> RegisterReply:
    """Trade a one-time registration token for a worker id and secret (shown only now)."""
    w, secret = service.locked(service.queue.register_worker, body.token, body.name, body.gpus)
    return RegisterReply(worker_id=w.id, secret=secret)


@router.post(
    "/workers/claim", response_model=ClaimReply, responses={204: {"description": "no job fits right now"}}
)
def claim(service: Service, body: ClaimRequest, w: CallingWorker) -> ClaimReply | Response:
    """Long-poll up to ``wait_s`` for a queued job that fits this worker's GPUs."""
    queue, config = service.queue, service.config
    if body.gpus:
        service.locked(queue.update_worker_gpus, w.id, body.gpus)
        w = service.locked(queue.worker, w.id)
    deadline = time.monotonic() + min(max(body.wait_s, 0.0), config.max_wait_s)
    while True:
        job = service.locked(queue.claim, w, lease_s=config.lease_s, fits=lambda j: job_fits(j, w))
        if job is not None:
            return ClaimReply(job=job.info(), lease_s=config.lease_s)
        if time.monotonic() >= deadline:
            return Response(status_code=204)
        time.sleep(0.25)


@router.post("/jobs/{job_id}/heartbeat", responses=HELD)
def heartbeat(service: Service, job_id: int, body: HeartbeatRequest, w: CallingWorker) -> HeartbeatReply:
    """Keep the lease; the reply's ``cancel`` tells the worker to stop the job."""
    lease_s = service.config.lease_s
    job = service.locked(service.queue.heartbeat, job_id, w.id, progress=body.progress, lease_s=lease_s)
    if body.logs:
        service.locked(service.queue.log, job_id, w.id, *body.logs)
    return HeartbeatReply(cancel=job.cancel_requested, lease_s=lease_s)


@router.post("/jobs/{job_id}/logs", responses=HELD)
def post_logs(service: Service, job: HeldJob, w: CallingWorker, body: LogsRequest) -> OkReply:
    service.locked(service.queue.log, job.id, w.id, *body.lines)
    return OkReply()


@router.post(
    "/jobs/{job_id}/result",
    responses={
        **HELD,
        409: {"model": ErrorReply, "description": "success reported before the adapter upload"},
    },
)
def result(service: Service, job: HeldJob, w: CallingWorker, body: ResultRequest) -> JobInfo:
    """The end of this worker's attempt: succeeded (adapter uploaded), failed or cancelled."""
    queue = service.queue
    if body.state not in FINAL:
        raise InvalidInput(f"state must be one of {', '.join(FINAL)}")
    if body.state == "succeeded" and not job.adapter_dir:
        raise Conflict("upload the adapter before reporting success")
    if body.state == "failed" and body.retry and job.attempts < job.max_attempts and not job.cancel_requested:
        service.locked(
            queue.update, job.id, state="queued", worker_id=None, lease_until=None, error=body.error
        )
        service.locked(queue.log, job.id, w.id, f"gave the job back: {body.error}")
        return service.locked(queue.get, job.id).info()
    state = "cancelled" if job.cancel_requested and body.state != "succeeded" else body.state
    return service.locked(queue.finish, job.id, state, error=body.error, metrics=body.metrics).info()
