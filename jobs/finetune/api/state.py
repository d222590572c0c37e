"""What every router reaches through ``request.app.state.coordinator``: the configuration, the
queue and the lock that serialises its one SQLite connection; and the two kinds of callers,
clients (the coordinator token, or loopback when none is set) and workers (id and secret)."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

from fastapi import Depends, Header, Request

from hipbot.config import Settings
from hipbot.errors import Unauthorized
from hipbot.jobs.finetune.datasets import ATTACHMENT_LIMIT
from hipbot.jobs.finetune.memory import GIB
from hipbot.jobs.finetune.queue import Job, JobQueue, Worker

P = ParamSpec("P")
T = TypeVar("T")
LOOPBACK = ("127.0.0.1", "::1", "localhost", "testclient")


@dataclass
class CoordinatorConfig:
    database: Path
    data_dir: Path
    adapters_dir: Path
    client_token: str | None = None
    registration_token: str | None = None
    lease_s: float = 90.0
    max_artifact_bytes: int = 4 * GIB
    max_attachment_bytes: int = ATTACHMENT_LIMIT
    max_attempts: int = 3
    max_wait_s: float = 30.0

    @classmethod
    def from_settings(
        cls, settings: Settings, *, lease_s: float = 90.0, max_artifact_bytes: int = 4 * GIB
    ) -> CoordinatorConfig:
        return cls(
            database=settings.database,
            data_dir=settings.home / "coordinator",
            adapters_dir=settings.adapters,
            client_token=settings.coordinator_token,
            registration_token=settings.registration_token,
            lease_s=lease_s,
            max_artifact_bytes=max_artifact_bytes,
        )


@dataclass
class Coordinator:
    """The served queue; ``locked`` runs a queue call under the connection's lock."""

    config: CoordinatorConfig
    queue: JobQueue
    lock: threading.RLock = field(default_factory=threading.RLock)

    def locked(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self.lock:
            return fn(*args, **kwargs)


def coordinator(request: Request) -> Coordinator:
    return request.app.state.coordinator


Service = Annotated[Coordinator, Depends(coordinator)]


def client(service: Service, request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """A client call: the coordinator token, or any loopback caller when no token is set."""
    token = service.config.client_token
    if token:
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given, token):
            raise Unauthorized("missing or wrong coordinator token")
    elif request.client is None or request.client.host not in LOOPBACK:
        raise Unauthorized("this coordinator has no client token: only loopback clients may use it")


def worker(service: Service, authorization: Annotated[str | None, Header()] = None) -> Worker:
    """A worker call: ``Authorization: Bearer WORKER_ID:SECRET``."""
    raw = (authorization or "").removeprefix("Bearer ").strip()
    worker_id, _, secret = raw.partition(":")
    if not worker_id or not secret:
        raise Unauthorized("worker credentials missing (Authorization: Bearer WORKER_ID:SECRET)")
    return service.locked(service.queue.authenticate, worker_id, secret)


CallingWorker = Annotated[Worker, Depends(worker)]


def held_job(job_id: int, service: Service, w: CallingWorker) -> Job:
    """The job in the path, when the calling worker holds it now (else ``Forbidden``)."""
    return service.locked(service.queue.held, job_id, w.id)


HeldJob = Annotated[Job, Depends(held_job)]
