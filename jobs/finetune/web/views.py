"""What the pages show, read with a few plain queries (a page stays fast with thousands of jobs):
the queue with each queued job's position, the workers with their current job and counts, one
job's details with its YAML (secret-looking values masked) and memory estimate beside the
measured peak, and the adapters with the vLLM servers they are live on."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlite_utils

from hipbot.jobs.finetune.queue import ACTIVE, FINAL, Job
from hipbot.jobs.serve.registry import Registry

RECENT_FINAL = 25
MAX_RUNNING_ROWS = 500
MAX_QUEUED_ROWS = 100  # the head of the queue; the counts say how many more wait
# Keys whose values are never shown: hub tokens and the like that a config may carry.
SECRET_KEY = re.compile(
    r"^(\s*-?\s*[\"']?[\w.-]*(token|secret|passw|api_?key|credential)[\w.-]*[\"']?\s*:)\s*\S.*$", re.I
)


def parse_ts(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def age(value: str | None, now: float) -> str:
    """How long ago, as a short human figure (``42s``, ``5m``, ``3h``, ``2d``)."""
    ts = parse_ts(value)
    if ts is None:
        return "-"
    s = max(0.0, now - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit}"
    return f"{int(s)}s"


@dataclass
class QueueRow:
    id: int
    name: str
    owner: str | None
    state: str
    base_model: str
    memory_gib: float | None
    created_at: str
    worker_id: str | None
    step: int | None
    total: int | None
    loss: float | None
    position: int | None = None
    age: str = "-"


@dataclass
class WorkerRow:
    id: str
    name: str
    gpu_count: int
    memory_gib: float
    backend: str
    gpu_names: str
    last_seen: str | None
    online: bool
    seen: str
    current_job: int | None = None
    done: int = 0
    failed: int = 0


@dataclass
class Overview:
    queue: list[QueueRow]
    recent: list[QueueRow]
    counts: dict[str, int]
    workers: list[WorkerRow]
    adapters: list[dict[str, Any]] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)


_QUEUE_COLS = (
    "id, name, owner, state, base_model, memory_gib, created_at, worker_id,"
    " progress_step, progress_total, progress_loss"
)


def _rows(db: sqlite_utils.Database, where: str, order: str, limit: int, now: float) -> list[QueueRow]:
    cur = db.execute(f"SELECT {_QUEUE_COLS} FROM jobs WHERE {where} ORDER BY {order} LIMIT ?", [limit])
    rows = [QueueRow(*r) for r in cur.fetchall()]
    for row in rows:
        row.age = age(row.created_at, now)
    return rows


def queue_rows(
    db: sqlite_utils.Database, now: float
) -> tuple[list[QueueRow], list[QueueRow], dict[str, int]]:
    """(running and queued jobs, in the order workers will take them; recent final ones; counts by
    state). A queued job's position is its place in the claim order (priority, then age)."""
    active = ", ".join(f"'{s}'" for s in ACTIVE)
    final = ", ".join(f"'{s}'" for s in FINAL)
    running = _rows(db, f"state IN ({active})", "id", MAX_RUNNING_ROWS, now)
    queued = _rows(db, "state = 'queued'", "priority DESC, id", MAX_QUEUED_ROWS, now)
    for position, row in enumerate(queued, start=1):
        row.position = position
    recent = _rows(db, f"state IN ({final})", "id DESC", RECENT_FINAL, now)
    counts = dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
    return running + queued, recent, counts


def worker_rows(db: sqlite_utils.Database, now: float, online_s: float) -> list[WorkerRow]:
    """The registered workers (not revoked), what each runs now and how many jobs it ended."""
    current = dict(
        db.execute(
            f"SELECT worker_id, MAX(id) FROM jobs WHERE state IN ({', '.join(repr(s) for s in ACTIVE)})"
            " AND worker_id IS NOT NULL GROUP BY worker_id"
        ).fetchall()
    )
    ended = {
        w: (done, failed)
        for w, done, failed in db.execute(
            "SELECT worker_id, SUM(state = 'succeeded'), SUM(state = 'failed') FROM jobs"
            " WHERE worker_id IS NOT NULL AND state IN ('succeeded', 'failed') GROUP BY worker_id"
        ).fetchall()
    }
    rows = []
    cur = db.execute(
        "SELECT id, name, gpu_count, memory_gib, backend, gpus_json, last_seen FROM workers"
        " WHERE revoked = 0 ORDER BY registered_at"
    )
    for wid, name, count, memory, backend, gpus_json, last_seen in cur.fetchall():
        gpus = json.loads(gpus_json or "{}").get("gpus") or []
        names = ", ".join(sorted({str(g.get("name") or g.get("arch") or "?") for g in gpus})) or backend
        seen_ts = parse_ts(last_seen)
        done, failed = ended.get(wid, (0, 0))
        rows.append(
            WorkerRow(
                wid,
                name,
                count,
                memory,
                backend,
                names,
                last_seen,
                seen_ts is not None and now - seen_ts <= online_s,
                age(last_seen, now),
                current.get(wid),
                done,
                failed,
            )
        )
    return rows


def adapter_rows(registry: Registry) -> tuple[list[dict[str, Any]], list[str]]:
    """The registered adapters (name, base model, job, rank, owner, the servers it is live on)
    and the names of the vLLM servers."""
    adapters = [
        {
            "name": a.name,
            "base_model": a.base_model,
            "job_id": a.job_id,
            "rank": a.rank,
            "owner": a.owner,
            "servers": list(a.servers),
            "published_at": a.published_at,
        }
        for a in registry.list()
    ]
    return adapters, [s.name for s in registry.servers()]


def masked_yaml(text: str) -> str:
    """The job's YAML with the values of secret-looking keys (hub tokens, API keys) masked."""
    return "\n".join(SECRET_KEY.sub(r"\1 <hidden>", line) for line in text.splitlines())


@dataclass
class JobPage:
    job: Job
    yaml: str
    estimate: dict[str, Any]
    peak: dict[str, Any]
    logs: list[dict[str, Any]]
    points: list[list[float | None]]
    age: str
    duration: str


def job_page(job: Job, logs: list[dict[str, Any]], points: list[list[float | None]], now: float) -> JobPage:
    """One job as its page shows it; the dataset is named, never shown, and no file path but
    the adapter's."""
    metrics = job.metrics or {}
    peak = {k: metrics[k] for k in ("peak_memory_gib", "peak_reserved_gib") if metrics.get(k) is not None}
    start, end = parse_ts(job.started_at), parse_ts(job.finished_at)
    duration = "-"
    if start is not None:
        duration = age(datetime.fromtimestamp(start, UTC).isoformat(), end if end is not None else now)
    return JobPage(
        job=job,
        yaml=masked_yaml(job.spec_yaml),
        estimate=job.memory or {},
        peak=peak,
        logs=logs,
        points=points,
        age=age(job.created_at, now),
        duration=duration,
    )
