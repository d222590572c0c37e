"""Where jobs live, seen from a front end: the coordinator's HTTP API when one is configured, else
the app's own database (the embedded default). Both return the same public models
(``hipbot.jobs.finetune.models``), so the CLI and the bot do not care which one they talk to."""

from __future__ import annotations

import threading
from typing import Protocol

from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.models import JobInfo, LogLine, Submitted, WorkerInfo


class JobsBackend(Protocol):
    """What front ends call; ``LocalJobs`` and ``CoordinatorClient`` both provide it."""

    def get(self, job_id: int) -> JobInfo: ...

    def list(
        self,
        *,
        owner: str | None = None,
        guild: str | None = None,
        states: tuple[str, ...] | None = None,
        limit: int = 50,
    ) -> list[JobInfo]: ...

    def cancel(self, job_id: int) -> JobInfo: ...

    def logs(self, job_id: int, *, after: int = 0) -> list[LogLine]: ...

    def workers(self) -> list[WorkerInfo]: ...

    def submit(
        self,
        text: str,
        /,
        *,
        owner: str | None = None,
        guild: str | None = None,
        priority: int = 0,
        name: str | None = None,
        dataset: bytes | None = None,
        dataset_name: str | None = None,
    ) -> Submitted: ...


class LocalJobs:
    """The app's own database as the queue (no coordinator configured: the embedded default).

    Workers reach this queue through ``hipbot coordinator`` running on the same database. One
    connection is shared by the event loop's worker threads, so calls take a lock."""

    def __init__(self, settings: Settings) -> None:
        # Imported here: front ends load this module at start, most of them never touch jobs.
        from hipbot.jobs.finetune.queue import JobQueue

        self.settings = settings
        self.queue = JobQueue.open(settings.database)
        self.lock = threading.RLock()

    def get(self, job_id: int) -> JobInfo:
        with self.lock:
            return self.queue.get(job_id).info()

    def list(
        self,
        *,
        owner: str | None = None,
        guild: str | None = None,
        states: tuple[str, ...] | None = None,
        limit: int = 50,
    ) -> list[JobInfo]:
        with self.lock:
            return [j.info() for j in self.queue.list(owner=owner, guild=guild, states=states, limit=limit)]

    def cancel(self, job_id: int) -> JobInfo:
        with self.lock:
            return self.queue.cancel(job_id).info()

    def logs(self, job_id: int, *, after: int = 0) -> list[LogLine]:
        with self.lock:
            return self.queue.logs(job_id, after=after)

    def workers(self) -> list[WorkerInfo]:
        with self.lock:
            return [w.info() for w in self.queue.workers()]

    def submit(
        self,
        text: str,
        /,
        *,
        owner: str | None = None,
        guild: str | None = None,
        priority: int = 0,
        name: str | None = None,
        dataset: bytes | None = None,
        dataset_name: str | None = None,
    ) -> Submitted:
        """What the coordinator's POST /jobs does, on the local queue."""
        from hipbot.jobs.finetune.intake import accept_job
        from hipbot.jobs.finetune.spec import parse_spec

        job, warning = accept_job(
            self.queue,
            parse_spec(text),
            text,
            attachments_dir=self.settings.home / "attachments",
            dataset=dataset,
            dataset_name=dataset_name,
            owner=owner,
            guild=guild,
            priority=priority,
            name=name,
            lock=self.lock,
        )
        return Submitted(job=job.info(), warning=warning)


_BACKENDS: dict[tuple[str, ...], JobsBackend] = {}
_BACKENDS_LOCK = threading.Lock()


def jobs_backend(settings: Settings) -> JobsBackend:
    """The coordinator's HTTP API when one is configured, else the local queue; same models.
    One per process and configuration: the status watcher calls this every few seconds."""
    key = (str(settings.database), settings.coordinator_url or "", settings.coordinator_token or "")
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            if settings.coordinator_url:
                from hipbot.jobs.finetune.coordinator_client import CoordinatorClient

                _BACKENDS[key] = CoordinatorClient(settings.coordinator_url, token=settings.coordinator_token)
            else:
                _BACKENDS[key] = LocalJobs(settings)
        return _BACKENDS[key]


def finished_adapter(settings: Settings, job_id: int) -> JobInfo:
    """A succeeded job with its adapter folder: the one call serving makes into fine-tuning."""
    job = jobs_backend(settings).get(job_id)
    if job.state != "succeeded":
        raise HipbotError(
            N_(
                "job #{job_id} is {job_state}: only a succeeded job has an adapter to serve",
                job_id=job.id,
                job_state=job.state,
            )
        )
    if not job.adapter_dir:
        raise HipbotError(N_("job #{job_id} recorded no adapter folder", job_id=job.id))
    return job
