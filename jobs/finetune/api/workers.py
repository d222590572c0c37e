"""Workers: register with a one-time token, long-poll for a job that fits, and, on the job they
hold, heartbeat (keeps the lease; says whether it was cancelled), send log lines and report the
result. Clients list the workers."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Response

from hipbot.errors import Conflict, InvalidInput, TooManyRequests
from hipbot.i18n import N_
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
from hipbot.jobs.finetune.api.state import CallingWorker, HeldJob, JobId, Service, client
from hipbot.jobs.finetune.intake import job_fits
from hipbot.jobs.finetune.models import GpuReport, JobInfo, WorkerInfo
from hipbot.jobs.finetune.queue import FINAL, JobQueue, Worker

router = APIRouter(
    tags=["workers"],
    responses={401: {"model": ErrorReply, "description": "unknown worker or wrong secret"}},
)
HELD = {403: {"model": ErrorReply, "description": "this worker does not hold the job"}}
POLL_S = 2.0  # a waiting claim looks at the queue at least this often
TICK_S = 0.1  # and notices a newly queued job within this


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
    "/workers/claim",
    response_model=ClaimReply,
    responses={
        204: {"description": "no job fits right now"},
        429: {"model": ErrorReply, "description": "this worker already has its claims waiting"},
    },
)
async def claim(service: Service, body: ClaimRequest, w: CallingWorker) -> ClaimReply | Response:
    """Long-poll up to ``wait_s`` for a queued job that fits this worker's GPUs.

    A waiting claim holds no thread: it sleeps on the event loop and looks at the queue again
    when a job is queued or given back (or every ``POLL_S``). Each worker may have
    ``max_polls_per_worker`` claims waiting, and the coordinator ``max_polls`` in all."""
    queue, config = service.queue, service.config
    if service.polls[w.id] >= config.max_polls_per_worker or service.polls.total() >= config.max_polls:
        raise TooManyRequests(
            N_("worker {w_id} already has {polls} claims waiting", w_id=w.id, polls=service.polls[w.id]),
            hint=N_("wait for the reply to the last claim before sending another"),
        )
    service.polls[w.id] += 1
    try:
        if body.gpus:
            w = await asyncio.to_thread(service.locked, _update_gpus, queue, w.id, body.gpus)
        deadline = time.monotonic() + min(body.wait_s, config.max_wait_s)
        while True:
            seen = service.generation
            job = await asyncio.to_thread(
                service.locked, queue.claim, w, lease_s=config.lease_s, fits=lambda j: job_fits(j, w)
            )
            if job is not None:
                return ClaimReply(job=job.info(), lease_s=config.lease_s)
            until = min(deadline, time.monotonic() + POLL_S)
            while service.generation == seen and time.monotonic() < until:
                await asyncio.sleep(TICK_S)
            if time.monotonic() >= deadline:
                return Response(status_code=204)
    finally:
        service.polls[w.id] -= 1
        if service.polls[w.id] <= 0:
            del service.polls[w.id]


def _update_gpus(queue: JobQueue, worker_id: str, gpus: GpuReport) -> Worker:
    queue.update_worker_gpus(worker_id, gpus)
    return queue.worker(worker_id)


@router.post("/jobs/{job_id}/heartbeat", responses=HELD)
def heartbeat(service: Service, job_id: JobId, body: HeartbeatRequest, w: CallingWorker) -> HeartbeatReply:
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
        raise InvalidInput(N_("state must be one of {states}", states=", ".join(FINAL)))
    if body.state == "succeeded" and not job.adapter_dir:
        raise Conflict(N_("upload the adapter before reporting success"))
    if body.state == "failed" and body.retry and job.attempts < job.max_attempts and not job.cancel_requested:
        service.locked(
            queue.update, job.id, state="queued", worker_id=None, lease_until=None, error=body.error
        )
        service.locked(queue.log, job.id, w.id, f"gave the job back: {body.error}")
        service.wake()
        return service.locked(queue.get, job.id).info()
    state = "cancelled" if job.cancel_requested and body.state != "succeeded" else body.state
    return service.locked(queue.finish, job.id, state, error=body.error, metrics=body.metrics).info()
