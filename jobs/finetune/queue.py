"""Fine-tune jobs and workers in the app's SQLite database: the queue both the coordinator and
``hipbot finetune run`` write, and the Discord bot reads.

A job moves queued -> assigned (a worker claimed it; leased) -> running (first heartbeat) ->
succeeded / failed / cancelled. A lease that runs out puts the job back in the queue for another
worker, which resumes from the last uploaded checkpoint; after ``max_attempts`` claims it fails.
Worker secrets, registration tokens and client tokens are stored as SHA-256 hashes only. A client
token names its user (``Caller``): it acts only as that user, unless it is a trusted front end's
(the operator's, the Discord bot's), which vouches for the users it names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from hipbot.db import migrate, utcnow
from hipbot.errors import Forbidden, HipbotError, InvalidInput, JobNotFound, Unauthorized, WorkerNotFound
from hipbot.i18n import N_, _
from hipbot.jobs.finetune.models import GpuReport, JobInfo, LogLine, Progress, WorkerInfo
from hipbot.jobs.finetune.queue_schema import STEPS

if TYPE_CHECKING:
    from hipbot.jobs.finetune.spec import JobSpec

ACTIVE = ("assigned", "running")
FINAL = ("succeeded", "failed", "cancelled")  # the one list of final states; others import it
# Job states as people read them; the queue, the JSON and the bot's button ids keep the English word.
STATE_NAMES = {
    "queued": N_("queued"),
    "assigned": N_("assigned"),
    "running": N_("running"),
    "succeeded": N_("succeeded"),
    "failed": N_("failed"),
    "cancelled": N_("cancelled"),
}
DEFAULT_LEASE_S = 90.0
MAX_ID = 2**63 - 1  # SQLite's largest integer
DEFAULT_MAX_ATTEMPTS = 3
# Who acts with the operator's authority: the coordinator's own token, the local queue.
OPERATOR = "operator"
# Job fields stored as JSON text in ``<name>_json`` columns.
JSON_COLUMNS = ("spec", "metrics", "memory", "artifacts", "progress", "model_config")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who a client request comes from, by its token: a user (acts only as itself), or a trusted
    front end (the operator's token, the Discord bot) that names the user it vouches for."""

    name: str
    trusted: bool = False


@dataclass
class Job:
    """A job row, decoded. ``adapter_dir``, ``base_model`` and ``owner`` are what serving needs."""

    id: int
    name: str
    owner: str | None
    guild: str | None
    state: str
    priority: int
    spec_yaml: str
    base_model: str
    attempts: int
    max_attempts: int
    worker_id: str | None
    memory_gib: float | None
    progress_step: int | None
    progress_total: int | None
    progress_loss: float | None
    checkpoint_step: int | None
    checkpoint_path: str | None
    adapter_dir: str | None
    attachment_name: str | None
    attachment_path: str | None
    error: str | None
    cancel_requested: bool
    created_at: str
    assigned_at: str | None
    started_at: str | None
    finished_at: str | None
    updated_at: str
    spec: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    model_config: dict[str, Any] | None = None
    lease_until: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        """Decode a ``jobs`` row: plain columns by name, ``*_json`` columns parsed."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in JSON_COLUMNS:
                values[f.name] = row[f.name]
            elif row[f"{f.name}_json"]:
                values[f.name] = json.loads(row[f"{f.name}_json"])
        return cls(**{**values, "cancel_requested": bool(row["cancel_requested"])})

    @property
    def final(self) -> bool:
        return self.state in FINAL

    def info(self) -> JobInfo:
        """The public view (no file paths of the coordinator's disk beyond the adapter folder)."""
        return JobInfo.model_validate({**self.__dict__, "final": self.final})

    def line(self) -> str:
        return job_line(self.info())


def state_name(state: str) -> str:
    """A job state in the current language."""
    return _(STATE_NAMES[state]) if state in STATE_NAMES else state


def job_line(job: JobInfo) -> str:
    """One line for ``finetune list``, from either backend's job, in the current language."""
    progress = ""
    if job.progress_step is not None and job.progress_total:
        progress = " " + _("step {step}/{total}").format(step=job.progress_step, total=job.progress_total)
        if job.progress_loss is not None:
            progress += " " + _("loss {loss:.4f}").format(loss=job.progress_loss)
    mem = f" ~{job.memory_gib:.1f}GiB" if job.memory_gib else ""
    worker = (
        " " + _("on {worker}").format(worker=job.worker_id) if job.worker_id and job.state in ACTIVE else ""
    )
    owner = _("owner={owner}").format(owner=job.owner or "-")
    return f"#{job.id} {job.name} [{state_name(job.state)}]{progress}{worker}{mem} {owner}"


@dataclass
class Worker:
    id: str
    name: str
    gpu_count: int
    memory_gib: float
    backend: str
    gpus: dict[str, Any]
    registered_at: str
    last_seen: str | None
    revoked: bool

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Worker:
        values = {f.name: row[f.name] for f in fields(cls) if f.name != "gpus"}
        return cls(**{**values, "gpus": json.loads(row["gpus_json"]), "revoked": bool(row["revoked"])})

    def info(self) -> WorkerInfo:
        return WorkerInfo.model_validate(self.__dict__)


class JobQueue:
    """The jobs, their logs and the workers, over one sqlite-utils database."""

    def __init__(self, db: sqlite_utils.Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        migrate(db, "jobs", STEPS)

    @classmethod
    def open(cls, path: Path | None = None) -> JobQueue:
        from hipbot.config import load_settings
        from hipbot.db import open_db

        return cls(open_db(path or load_settings().database))

    # ------------------------------------------------------------------ jobs
    def _row(self, job_id: int) -> dict[str, Any] | None:
        cur = self.db.execute("SELECT * FROM jobs WHERE id = ?", [job_id])
        names = [d[0] for d in cur.description]
        row = cur.fetchone()
        return dict(zip(names, row, strict=True)) if row else None

    def get(self, job_id: int) -> Job:
        row = self._row(job_id) if 0 < job_id <= MAX_ID else None
        if row is None:
            raise JobNotFound(N_("no job #{job_id}", job_id=job_id))
        return Job.from_row(row)

    def submit(
        self,
        spec: JobSpec,
        spec_yaml: str,
        *,
        owner: str | None = None,
        guild: str | None = None,
        priority: int = 0,
        name: str | None = None,
        model_config: dict[str, Any] | None = None,
        memory: dict[str, Any] | None = None,
        attachment_name: str | None = None,
        attachment_path: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        state: str = "queued",
        worker_id: str | None = None,
    ) -> Job:
        now = utcnow()
        base = spec.model_name_or_path
        default_name = f"{base.rstrip('/').split('/')[-1]}-lora-r{spec.lora_rank}"
        # The name becomes part of the adapter's folder and of the served model's name.
        clean = re.sub(r"[^A-Za-z0-9._-]+", "-", name or default_name).strip(".-")[:80] or default_name
        cur = self.db.execute(
            """INSERT INTO jobs (name, owner, guild, state, priority, spec_yaml, spec_json, base_model,
                 attachment_name, attachment_path, model_config_json, memory_gib, memory_json, max_attempts,
                 worker_id, created_at, updated_at, started_at, attempts)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                clean,
                owner,
                guild,
                state,
                priority,
                spec_yaml,
                json.dumps(spec.model_dump()),
                base,
                attachment_name,
                attachment_path,
                json.dumps(model_config) if model_config else None,
                memory.get("total_gib") if memory else None,
                json.dumps(memory) if memory else None,
                max_attempts,
                worker_id,
                now,
                now,
                now if state == "running" else None,
                1 if state == "running" else 0,
            ],
        )
        job_id = cur.lastrowid
        self.log(job_id, "coordinator", f"submitted by {owner or 'anonymous'}: {base}, rank {spec.lora_rank}")
        return self.get(job_id)

    def update(self, job_id: int, **values: Any) -> None:
        values["updated_at"] = utcnow()
        for key in JSON_COLUMNS:
            if key in values:
                values[f"{key}_json"] = json.dumps(values.pop(key))
        cols = ", ".join(f"{k} = ?" for k in values)
        self.db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", [*values.values(), job_id])

    def list(
        self,
        *,
        owner: str | None = None,
        guild: str | None = None,
        states: tuple[str, ...] | None = None,
        limit: int = 50,
    ) -> list[Job]:
        self.expire_leases()
        where, params = [], []
        if owner:
            where.append("owner = ?")
            params.append(owner)
        if guild:
            where.append("guild = ?")
            params.append(guild)
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(states)
        sql = (
            "SELECT id FROM jobs"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + " ORDER BY id DESC LIMIT ?"
        )
        ids = [r[0] for r in self.db.execute(sql, [*params, limit]).fetchall()]
        return [self.get(i) for i in ids]

    def log(self, job_id: int, source: str, *lines: str) -> None:
        now = utcnow()
        rows = [(job_id, now, source, line.rstrip("\n")[:4000]) for line in lines if line.strip()]
        if rows:
            self.db.conn.executemany(
                "INSERT INTO job_logs (job_id, ts, source, line) VALUES (?, ?, ?, ?)", rows
            )

    def logs(self, job_id: int, *, after: int = 0, limit: int = 1000) -> list[LogLine]:
        self.get(job_id)
        cur = self.db.execute(
            "SELECT id, ts, source, line FROM job_logs WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?",
            [job_id, after, limit],
        )
        return [LogLine(id=i, ts=ts, source=source, line=line) for i, ts, source, line in cur.fetchall()]

    def tail(self, job_id: int, n: int = 20) -> list[str]:
        cur = self.db.execute(
            "SELECT line FROM job_logs WHERE job_id = ? ORDER BY id DESC LIMIT ?", [job_id, n]
        )
        return [r[0] for r in reversed(cur.fetchall())]

    def cancel(self, job_id: int, *, by: str = OPERATOR) -> Job:
        """Cancel a queued job at once; flag a running one (its worker stops within one heartbeat).
        Only the job's owner may, or the operator (``by`` is who asks, never optional in effect)."""
        job = self.get(job_id)
        if by != OPERATOR and by != job.owner:
            raise Forbidden(
                N_(
                    "job #{job_id} belongs to {owner}; only its owner can cancel it",
                    job_id=job_id,
                    owner=job.owner or N_("the operator"),
                )
            )
        if job.final:
            raise HipbotError(N_("job #{job_id} is already {job_state}", job_id=job_id, job_state=job.state))
        with self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            if job.state == "queued":
                self.update(job_id, state="cancelled", finished_at=utcnow(), cancel_requested=1)
            else:
                self.update(job_id, cancel_requested=1)
        self.log(job_id, "coordinator", f"cancel requested by {by}")
        return self.get(job_id)

    def finish(
        self,
        job_id: int,
        state: str,
        *,
        error: str | None = None,
        metrics: dict[str, Any] | None = None,
        adapter_dir: str | None = None,
    ) -> Job:
        if state not in FINAL:
            raise HipbotError(N_("{state!r} is not a final state", state=state))
        values: dict[str, Any] = {"state": state, "finished_at": utcnow(), "lease_until": None}
        if error is not None:
            values["error"] = error
        if metrics is not None:
            values["metrics"] = metrics
        if adapter_dir is not None:
            values["adapter_dir"] = adapter_dir
        self.update(job_id, **values)
        self.log(job_id, "coordinator", f"{state}" + (f": {error}" if error else ""))
        return self.get(job_id)

    # ------------------------------------------------------------------ leases
    def claim(
        self, worker: Worker, *, lease_s: float = DEFAULT_LEASE_S, fits: Callable[[Job], bool] | None = None
    ) -> Job | None:
        """Give the highest-priority queued job that fits ``worker`` to it, leased for ``lease_s``."""
        self.expire_leases()
        with self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            ids = [
                r[0]
                for r in self.db.execute(
                    "SELECT id FROM jobs WHERE state = 'queued' AND cancel_requested = 0 ORDER BY priority DESC, id"
                ).fetchall()
            ]
            for job_id in ids:
                job = self.get(job_id)
                if fits is not None and not fits(job):
                    continue
                self.update(
                    job_id,
                    state="assigned",
                    worker_id=worker.id,
                    lease_until=self.clock() + lease_s,
                    assigned_at=utcnow(),
                    attempts=job.attempts + 1,
                    error=None,
                )
                break
            else:
                return None
        self.log(job_id, "coordinator", f"claimed by {worker.id} ({worker.name}), attempt {job.attempts + 1}")
        return self.get(job_id)

    def held(self, job_id: int, worker_id: str) -> Job:
        """The job if ``worker_id`` holds it now; any other worker gets ``Forbidden``."""
        job = self.get(job_id)
        if job.worker_id != worker_id or job.state not in ACTIVE:
            raise Forbidden(
                N_("worker {worker_id} does not hold job #{job_id}", worker_id=worker_id, job_id=job_id)
            )
        return job

    def heartbeat(
        self,
        job_id: int,
        worker_id: str,
        *,
        progress: Progress | None = None,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> Job:
        job = self.held(job_id, worker_id)
        values: dict[str, Any] = {"lease_until": self.clock() + lease_s}
        if job.state == "assigned":
            values["state"] = "running"
            values["started_at"] = job.started_at or utcnow()
        if progress is not None:
            values["progress"] = progress.model_dump(exclude_none=True)
            for value, col in (
                (progress.step, "progress_step"),
                (progress.max_steps, "progress_total"),
                (progress.loss, "progress_loss"),
            ):
                if value is not None:
                    values[col] = value
        self.update(job_id, **values)
        self.db.execute("UPDATE workers SET last_seen = ? WHERE id = ?", [utcnow(), worker_id])
        return self.get(job_id)

    def expire_leases(self) -> list[int]:
        """Jobs whose worker went silent: back to the queue, or failed after ``max_attempts``."""
        now = self.clock()
        expired = []
        with self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            rows = self.db.execute(
                "SELECT id FROM jobs WHERE state IN ('assigned', 'running') AND lease_until IS NOT NULL AND lease_until < ?",
                [now],
            ).fetchall()
            for (job_id,) in rows:
                job = self.get(job_id)
                expired.append(job_id)
                if job.cancel_requested:
                    self.update(
                        job_id, state="cancelled", finished_at=utcnow(), lease_until=None, worker_id=None
                    )
                    msg = f"lease of {job.worker_id} expired; job was cancelled"
                elif job.attempts >= job.max_attempts:
                    err = f"worker lost {job.attempts} times (last: {job.worker_id}); giving up"
                    self.update(job_id, state="failed", finished_at=utcnow(), lease_until=None, error=err)
                    msg = err
                else:
                    self.update(job_id, state="queued", worker_id=None, lease_until=None)
                    resume = f" from checkpoint step {job.checkpoint_step}" if job.checkpoint_step else ""
                    msg = f"lease of {job.worker_id} expired; requeued to resume{resume}"
                self.db.conn.execute(
                    "INSERT INTO job_logs (job_id, ts, source, line) VALUES (?, ?, ?, ?)",
                    (job_id, utcnow(), "coordinator", msg),
                )
        return expired

    # ------------------------------------------------------------------ workers
    def create_registration_token(self, token: str | None = None) -> str:
        token = token or "reg-" + secrets.token_urlsafe(24)
        self.db.execute(
            "INSERT OR IGNORE INTO registration_tokens (token_hash, created_at) VALUES (?, ?)",
            [hash_secret(token), utcnow()],
        )
        return token

    def register_worker(self, token: str, name: str, gpus: GpuReport) -> tuple[Worker, str]:
        """Consume a one-time registration token; return the worker and its secret (shown once)."""
        with self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute(
                "SELECT used_at FROM registration_tokens WHERE token_hash = ?", [hash_secret(token)]
            ).fetchone()
            if row is None or row[0] is not None:
                raise Unauthorized(N_("registration token is unknown or already used"))
            worker_id = "w-" + secrets.token_hex(4)
            secret = secrets.token_urlsafe(32)
            gpus = GpuReport.model_validate(gpus)
            self.db.execute(
                """INSERT INTO workers (id, name, secret_hash, gpus_json, gpu_count, memory_gib, backend,
                   registered_at, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    worker_id,
                    name[:100],
                    hash_secret(secret),
                    gpus.model_dump_json(exclude_none=True),
                    max(1, len(gpus.gpus)),
                    gpus.usable_gib,
                    gpus.backend,
                    utcnow(),
                    utcnow(),
                ],
            )
            self.db.execute(
                "UPDATE registration_tokens SET used_at = ?, used_by = ? WHERE token_hash = ?",
                [utcnow(), worker_id, hash_secret(token)],
            )
        return self.worker(worker_id), secret

    def authenticate(self, worker_id: str, secret: str) -> Worker:
        row = self.db.execute("SELECT secret_hash, revoked FROM workers WHERE id = ?", [worker_id]).fetchone()
        if row is None or row[1] or not hmac.compare_digest(row[0], hash_secret(secret)):
            raise Unauthorized(N_("unknown worker or wrong secret"))
        self.db.execute("UPDATE workers SET last_seen = ? WHERE id = ?", [utcnow(), worker_id])
        return self.worker(worker_id)

    def worker(self, worker_id: str) -> Worker:
        cur = self.db.execute("SELECT * FROM workers WHERE id = ?", [worker_id])
        names = [d[0] for d in cur.description]
        row = cur.fetchone()
        if row is None:
            raise WorkerNotFound(N_("no worker {worker_id}", worker_id=worker_id))
        return Worker.from_row(dict(zip(names, row, strict=True)))

    def workers(self) -> list[Worker]:
        ids = [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM workers WHERE revoked = 0 ORDER BY registered_at"
            ).fetchall()
        ]
        return [self.worker(i) for i in ids]

    def update_worker_gpus(self, worker_id: str, gpus: GpuReport) -> None:
        self.db.execute(
            "UPDATE workers SET gpus_json = ?, gpu_count = ?, memory_gib = ?, backend = ? WHERE id = ?",
            [
                gpus.model_dump_json(exclude_none=True),
                max(1, len(gpus.gpus)),
                gpus.usable_gib,
                gpus.backend,
                worker_id,
            ],
        )

    # ------------------------------------------------------------------ clients
    def create_client_token(self, name: str, *, trusted: bool = False) -> str:
        """A client token for user ``name`` (acts only as that user), or for a trusted front end
        that vouches for its own users; stored hashed, shown once."""
        name = name.strip()
        if not re.fullmatch(r"[A-Za-z0-9._:@-]{1,100}", name) or name == OPERATOR:
            raise InvalidInput(
                N_("client name {name!r} is not usable", name=name),
                hint=N_(
                    "1-100 letters, digits or ._:@- (and not {OPERATOR!r}), such as the user's login",
                    OPERATOR=OPERATOR,
                ),
            )
        token = "cli-" + secrets.token_urlsafe(24)
        self.db.execute(
            "INSERT INTO client_tokens (token_hash, name, trusted, created_at) VALUES (?, ?, ?, ?)",
            [hash_secret(token), name, int(trusted), utcnow()],
        )
        return token

    def client_caller(self, token: str) -> Caller | None:
        """Who holds client token ``token``; None when it is unknown or revoked."""
        row = self.db.execute(
            "SELECT name, trusted FROM client_tokens WHERE token_hash = ? AND revoked = 0",
            [hash_secret(token)],
        ).fetchone()
        return Caller(row[0], trusted=bool(row[1])) if row else None
