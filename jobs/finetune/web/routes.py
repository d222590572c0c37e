"""The pages a signed-in viewer reads: the overview (queue, workers, adapters, recent actions),
one job (live loss curve, log tail, YAML, memory), the live stream that feeds a job page, and
``/metrics`` for Prometheus (a page token or the coordinator token as a bearer token)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from prometheus_client import CONTENT_TYPE_LATEST

from hipbot.errors import JobNotFound, TooManyRequests, Unauthorized
from hipbot.jobs.finetune.api.state import JobId
from hipbot.jobs.finetune.queue import JobQueue
from hipbot.jobs.finetune.web import store, views
from hipbot.jobs.finetune.web.metrics import online_window
from hipbot.jobs.finetune.web.page import Page, StreamViewer, Viewer, refuse, render

router = APIRouter(include_in_schema=False)
LOG_TAIL = 200
STREAM_TICK_S = 1.0
STREAM_LIFE_S = 600.0  # a stream ends after this; the browser reconnects (and is checked again)
MAX_STREAMS = 64


@router.get("/ui", response_class=HTMLResponse)
def overview(page: Page, session: Viewer) -> HTMLResponse:
    """The queue, the workers, the adapters and the recent actions."""
    now = time.time()
    with page.service.lock:
        jobs, recent, counts = views.queue_rows(page.db, now)
        workers = views.worker_rows(page.db, now, online_window(page.service.config.lease_s))
        audit = store.audit_log(page.db)
    with page.registry_lock:
        adapters, servers = views.adapter_rows(page.registry())
    data = views.Overview(jobs, recent, counts, workers, adapters, servers, audit)
    return render("index.html", session=session, view=data)


def _logs(queue: JobQueue, job_id: int, after: int = 0, limit: int = LOG_TAIL) -> list[dict[str, Any]]:
    """The log lines after id ``after``: the last ``limit`` of them."""
    cur = queue.db.execute(
        "SELECT id, ts, source, line FROM job_logs WHERE job_id = ? AND id > ? ORDER BY id DESC LIMIT ?",
        [job_id, after, limit],
    )
    return [{"id": i, "ts": ts, "source": s, "line": line} for i, ts, s, line in reversed(cur.fetchall())]


@router.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
def job_detail(page: Page, session: Viewer, job_id: JobId) -> HTMLResponse:
    with page.service.lock:
        try:
            job = page.service.queue.get(job_id)
        except JobNotFound as exc:
            return refuse(session, 404, exc.message)
        logs = _logs(page.service.queue, job_id)
        points = store.progress_points(page.db, job_id)
    data = views.job_page(job, logs, points, time.time())
    return render(
        "job.html",
        session=session,
        view=data,
        initial=json.dumps({"points": points, "last_log": logs[-1]["id"] if logs else 0}),
    )


def _update(page: Page, job_id: int, after_step: int, after_log: int) -> dict[str, Any]:
    with page.service.lock:
        job = page.service.queue.get(job_id)
        points = store.progress_points(page.db, job_id, after_step)
        logs = _logs(page.service.queue, job_id, after_log)
    return {
        "state": job.state,
        "final": job.final,
        "step": job.progress_step,
        "total": job.progress_total,
        "loss": job.progress_loss,
        "cancel_requested": job.cancel_requested,
        "points": points,
        "logs": logs,
    }


def _resume_from(last_event_id: str | None, after_step: int, after_log: int) -> tuple[int, int]:
    """Where a reconnecting stream goes on: the ``step:log`` id of the last event it received."""
    step, _, log = (last_event_id or "").partition(":")
    if step.lstrip("-").isdigit() and log.isdigit():
        return int(step), int(log)
    return after_step, after_log


def _stream_of(page: Page, job_id: JobId) -> int:
    """The job a live stream follows, checked before the stream starts: an unknown job is a 404,
    and past ``MAX_STREAMS`` open streams a new one is a 429."""
    page.service.locked(page.service.queue.get, job_id)
    if page.streams >= MAX_STREAMS:
        raise TooManyRequests("too many live pages are open", hint="close some and reload")
    return job_id


@router.get("/ui/jobs/{job_id}/events", response_class=EventSourceResponse)
async def job_events(
    request: Request,
    page: Page,
    session: StreamViewer,
    job_id: Annotated[int, Depends(_stream_of)],
    after_step: int = -1,
    after_log: int = 0,
    last_event_id: Annotated[str | None, Header(max_length=100)] = None,
) -> AsyncIterator[ServerSentEvent]:
    """The job's new progress points, log lines and state, each second while it runs."""
    step, log = _resume_from(last_event_id, after_step, after_log)
    page.streams += 1
    try:
        deadline = time.monotonic() + STREAM_LIFE_S
        while time.monotonic() < deadline and not await request.is_disconnected():
            update = await asyncio.to_thread(_update, page, job_id, step, log)
            if update["points"] or update["logs"] or update["final"]:
                step = int(update["points"][-1][0]) if update["points"] else step
                log = update["logs"][-1]["id"] if update["logs"] else log
                yield ServerSentEvent(data=update, event="update", id=f"{step}:{log}", retry=3000)
            if update["final"]:
                return
            await asyncio.sleep(STREAM_TICK_S)
    finally:
        page.streams -= 1


@router.get("/metrics")
def metrics(page: Page, request: Request, authorization: Annotated[str | None, Header()] = None) -> Response:
    """Prometheus text format; a bearer token (page token or coordinator token) or a signed-in
    browser."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    holder = page.service.locked(store.token_holder, page.db, token, page.admin_token) if token else None
    if holder is None and page.session_of(request) is None:
        raise Unauthorized("metrics need a page token or the coordinator token (Authorization: Bearer ...)")
    return Response(page.meter.scrape(), media_type=CONTENT_TYPE_LATEST)
