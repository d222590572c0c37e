"""What every router reaches through ``request.app.state.coordinator``: the configuration, the
queue and the lock that serialises its one SQLite connection; and the two kinds of callers,
clients and workers (id and secret).

A client is who its token says, never what the request body says. The coordinator's own token
(``HIPBOT_COORDINATOR_TOKEN``, or any loopback caller when none is set) is the operator's and the
front ends' (the Discord bot): it is trusted to name the user it acts for, whom it vouches for.
A user's token (``hipbot finetune token --client NAME``) acts only as that user.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

from fastapi import Depends, Header, Request
from fastapi import Path as PathParam

from hipbot.config import Settings
from hipbot.errors import Forbidden, Unauthorized
from hipbot.i18n import N_
from hipbot.jobs.finetune.archive import ArchiveLimits
from hipbot.jobs.finetune.datasets import ATTACHMENT_LIMIT
from hipbot.jobs.finetune.memory import GIB
from hipbot.jobs.finetune.queue import OPERATOR, Caller, Job, JobQueue, Worker

P = ParamSpec("P")
T = TypeVar("T")
LOOPBACK = ("127.0.0.1", "::1", "localhost", "testclient")
# Any integer: one outside SQLite's range names no job (404), like any other unknown number.
JobId = Annotated[int, PathParam(description="the job's number")]


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
    # what one uploaded archive may unpack to (each file, all of them, how many files)
    archive_limits: ArchiveLimits = field(default_factory=ArchiveLimits)
    # idle long-polls: per worker, and in all
    max_polls_per_worker: int = 2
    max_polls: int = 512
    # how long one job config may take to check
    spec_timeout_s: float = 5.0

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


def _pool(name: str, size: int) -> Callable[[], ThreadPoolExecutor]:
    return lambda: ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)


@dataclass
class Coordinator:
    """The served queue; ``locked`` runs a queue call under the connection's lock.

    Slow work has threads of its own, so that it never holds the ones every request needs:
    ``spec_pool`` checks job configs (a bounded queue, each check under a time limit) and
    ``file_pool`` checks and unpacks uploads. ``polls`` counts each worker's waiting claims;
    ``generation`` changes whenever a job may have become free, so waiting claims look again."""

    config: CoordinatorConfig
    queue: JobQueue
    lock: threading.RLock = field(default_factory=threading.RLock)
    files_lock: threading.Lock = field(default_factory=threading.Lock)
    polls: Counter[str] = field(default_factory=Counter)
    generation: int = 0
    spec_pool: ThreadPoolExecutor = field(default_factory=_pool("spec", 4))
    file_pool: ThreadPoolExecutor = field(default_factory=_pool("artifact", 4))

    def locked(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self.lock:
            return fn(*args, **kwargs)

    def wake(self) -> None:
        """Waiting claims look for a job again (a job was queued or given back)."""
        self.generation += 1

    async def run(self, pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn`` on one of ``pool``'s threads, awaited without blocking the event loop."""
        return await asyncio.wrap_future(pool.submit(fn, *args, **kwargs))

    def close(self) -> None:
        for pool in (self.spec_pool, self.file_pool):
            pool.shutdown(wait=False, cancel_futures=True)


def coordinator(request: Request) -> Coordinator:
    return request.app.state.coordinator


Service = Annotated[Coordinator, Depends(coordinator)]


def _bearer(authorization: str | None) -> bytes:
    """The token of an ``Authorization: Bearer`` header as bytes (headers arrive as latin-1)."""
    return (authorization or "").removeprefix("Bearer ").strip().encode("latin-1", "replace")


def client(
    service: Service, request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    """Who is calling: the coordinator token (trusted), a user's client token, or any loopback
    caller when no coordinator token is set (trusted: the operator on this machine)."""
    given = _bearer(authorization)
    token = service.config.client_token
    if token and hmac.compare_digest(given, token.encode("utf-8")):
        return Caller(OPERATOR, trusted=True)
    if given:
        caller = service.locked(service.queue.client_caller, given.decode("latin-1"))
        if caller is not None:
            return caller
        raise Unauthorized(N_("missing or wrong coordinator token"))
    if token:
        raise Unauthorized(N_("missing or wrong coordinator token"))
    if request.client is None or request.client.host not in LOOPBACK:
        raise Unauthorized(N_("this coordinator has no client token: only loopback clients may use it"))
    return Caller(OPERATOR, trusted=True)


CallingClient = Annotated[Caller, Depends(client)]


def acting_as(caller: Caller, named: str | None) -> str | None:
    """The user a request acts for: whom a trusted front end names, else the token's own user."""
    if caller.trusted:
        return named
    if named is not None and named != caller.name:
        raise Forbidden(
            N_(
                "this client token belongs to {caller_name!r}: it cannot act for {named!r}",
                caller_name=caller.name,
                named=named,
            ),
            hint=N_("leave the owner out, or use that user's own token"),
        )
    return caller.name


def worker(service: Service, authorization: Annotated[str | None, Header()] = None) -> Worker:
    """A worker call: ``Authorization: Bearer WORKER_ID:SECRET``."""
    raw = _bearer(authorization).decode("latin-1")
    worker_id, _, secret = raw.partition(":")
    if not worker_id or not secret:
        raise Unauthorized(N_("worker credentials missing (Authorization: Bearer WORKER_ID:SECRET)"))
    return service.locked(service.queue.authenticate, worker_id, secret)


CallingWorker = Annotated[Worker, Depends(worker)]


def held_job(job_id: JobId, service: Service, w: CallingWorker) -> Job:
    """The job in the path, when the calling worker holds it now (else ``Forbidden``)."""
    return service.locked(service.queue.held, job_id, w.id)


HeldJob = Annotated[Job, Depends(held_job)]
