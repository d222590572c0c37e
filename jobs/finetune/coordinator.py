"""The job coordinator: an HTTP API that volunteers' workers reach outbound (they sit behind NAT).

Clients (the CLI, the Discord bot) submit, list, cancel and read jobs with the coordinator token
(or from loopback when none is set). Workers register once with a one-time registration token and
get a secret (stored hashed); they long-poll for a job that fits their GPUs, heartbeat to keep
its lease (the reply says whether it was cancelled), upload checkpoints and the adapter
(checksummed, size-limited, safe tar.gz only) and report the result. A worker can touch only the
jobs it holds. Lost leases requeue the job for the next worker, which resumes from the last
uploaded checkpoint (safetensors and JSON only: ``portable``).

Everything a stranger sends is bounded: job configs (size, YAML aliases, checked on their own
threads under a time limit), uploads (compressed size, then each member and the unpacked total
while streaming), idle long-polls (they wait on the event loop, a few per worker), and every
number that reaches SQLite. The routes live in ``hipbot.jobs.finetune.api`` (one router per resource);
every ``HipbotError`` becomes its type's HTTP status. The OpenAPI schema is at /openapi.json (and
/docs).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from hipbot.config import Settings
from hipbot.db import open_db
from hipbot.errors import HipbotError
from hipbot.jobs.finetune import web
from hipbot.jobs.finetune.api import artifacts, jobs, workers
from hipbot.jobs.finetune.api.protocol import ErrorReply
from hipbot.jobs.finetune.api.state import Coordinator, CoordinatorConfig
from hipbot.jobs.finetune.queue import JobQueue

__all__ = ["CoordinatorConfig", "create_app", "openapi_schema"]


async def _user_error(request: Request, exc: HipbotError) -> JSONResponse:
    """A ``HipbotError`` as its type's HTTP status and the user's message."""
    return JSONResponse(status_code=exc.http_status, content=ErrorReply(detail=str(exc)).model_dump())


def create_app(config: CoordinatorConfig, *, clock: Callable[[], float] = time.time) -> FastAPI:
    """The FastAPI app; ``app.state.queue`` is the JobQueue it serves."""
    service = Coordinator(config, JobQueue(open_db(config.database), clock=clock))
    if config.registration_token:
        service.queue.create_registration_token(config.registration_token)
    for sub in ("attachments", "checkpoints", "uploads"):
        (config.data_dir / sub).mkdir(parents=True, exist_ok=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def sweep() -> None:  # leases run out even when no worker calls in
            while True:
                await asyncio.sleep(max(1.0, config.lease_s / 4))
                if await asyncio.to_thread(service.locked, service.queue.expire_leases):
                    service.wake()

        task = asyncio.create_task(sweep())
        yield
        task.cancel()
        service.close()

    app = FastAPI(
        title="hipbot coordinator",
        version="1",
        description="Queue of LoRA fine-tune jobs; volunteers' workers poll it outbound.",
        lifespan=lifespan,
        exception_handlers={HipbotError: _user_error},
    )
    app.state.coordinator = service
    app.state.queue = service.queue
    app.state.config = config
    for module in (jobs, workers, artifacts):
        app.include_router(module.router)
    web.mount(app, service)  # the operator page at /ui and /metrics
    return app


def openapi_schema(config: CoordinatorConfig) -> dict[str, Any]:
    return create_app(config).openapi()


def serve_in_background(settings: Settings, host: str = "127.0.0.1", port: int = 8765) -> str:
    """The coordinator (job API and operator page) on the app's own database, in a daemon thread:
    what ``hipbot start`` runs beside the bot so that one machine has everything. Its URL."""
    import threading

    import uvicorn

    from hipbot.jobs.finetune.web import page_url

    app = create_app(CoordinatorConfig.from_settings(settings))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="coordinator", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise HipbotError(
                f"the coordinator could not listen on {host}:{port}",
                hint="another program holds the port: hipbot start --coordinator-port N (0: none)",
            )
        time.sleep(0.05)
    return page_url(host, port)
