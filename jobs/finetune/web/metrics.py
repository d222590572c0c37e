"""Prometheus metrics of the coordinator, with ``prometheus_client`` (one registry per app):

- ``hipbot_jobs{state}``: jobs by state (the queue's length is ``state="queued"``);
- ``hipbot_workers_online`` / ``hipbot_workers_registered``: workers seen within the online
  window / not revoked;
- ``hipbot_job_duration_seconds``: histogram of finished jobs' run times (start to end);
- ``hipbot_step_seconds``: histogram of training step times, from the progress workers report
  (the time between two reports over the steps between them);
- ``hipbot_upload_bytes_total{kind}``: bytes received in artifact uploads (checkpoint, adapter).

Job and worker figures are read from the database at each scrape; step times are read from the
recorded progress since the last scrape; upload bytes are counted as requests stream in.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hipbot.jobs.finetune.queue import FINAL, JobQueue

DURATION_BUCKETS = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
UPLOAD_PATH = re.compile(r"^/jobs/\d+/artifacts/(checkpoint|adapter)$")


def online_window(lease_s: float) -> float:
    """A worker counts as online when it called in within this many seconds (claims and
    heartbeats come far more often than a lease)."""
    return max(60.0, lease_s)


class _QueueCollector(Collector):
    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def collect(self) -> Iterator[Metric]:
        return iter(self.meter.locked(self.meter.snapshot))


class Meter:
    """The coordinator's metrics; ``locked`` runs a database read under the queue's lock."""

    def __init__(self, queue: JobQueue, locked: Callable[..., Any], lease_s: float) -> None:
        self.queue = queue
        self.locked = locked
        self.online_s = online_window(lease_s)
        self.registry = CollectorRegistry(auto_describe=False)
        self.uploads = Counter(
            "hipbot_upload_bytes", "Bytes received in artifact uploads.", ["kind"], registry=self.registry
        )
        self.steps = Histogram(
            "hipbot_step_seconds",
            "Seconds per training step, from the progress workers report.",
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_QueueCollector(self))
        self._cursor = 0
        self._last: dict[int, tuple[int, float]] = {}
        self._steps_lock = threading.Lock()

    def snapshot(self) -> list[Metric]:
        db = self.queue.db
        jobs = GaugeMetricFamily("hipbot_jobs", "Jobs by state.", labels=["state"])
        counts = dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        for state in ("queued", "assigned", "running", *FINAL):
            jobs.add_metric([state], counts.get(state, 0))
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - self.online_s))
        online = db.execute(
            "SELECT COUNT(*) FROM workers WHERE revoked = 0 AND last_seen >= ?", [since]
        ).fetchone()[0]
        registered = db.execute("SELECT COUNT(*) FROM workers WHERE revoked = 0").fetchone()[0]
        durations = [
            r[0]
            for r in db.execute(
                "SELECT (julianday(finished_at) - julianday(started_at)) * 86400.0 FROM jobs"
                f" WHERE state IN ({', '.join(repr(s) for s in FINAL)}) AND started_at IS NOT NULL"
                " AND finished_at IS NOT NULL"
            ).fetchall()
            if r[0] is not None
        ]
        return [
            jobs,
            GaugeMetricFamily("hipbot_workers_online", "Workers seen within the online window.", online),
            GaugeMetricFamily("hipbot_workers_registered", "Registered workers, not revoked.", registered),
            _histogram(
                "hipbot_job_duration_seconds", "Run time of finished jobs.", durations, DURATION_BUCKETS
            ),
        ]

    def scrape(self) -> bytes:
        """The metrics in Prometheus' text format, step times read up to now."""
        self.locked(self._read_steps)
        return generate_latest(self.registry)

    def _read_steps(self) -> None:
        """Observe the step times of the progress recorded since the last scrape."""
        with self._steps_lock:
            rows = self.queue.db.execute(
                "SELECT rowid, job_id, step, ts FROM job_progress WHERE rowid > ? ORDER BY rowid LIMIT 100000",
                [self._cursor],
            ).fetchall()
            for rowid, job_id, step, ts in rows:
                self._cursor = rowid
                last = self._last.get(job_id)
                self._last[job_id] = (step, ts)
                if last is not None and step > last[0] and ts >= last[1]:
                    self.steps.observe((ts - last[1]) / (step - last[0]))

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """An ASGI middleware that counts the bytes of artifact uploads as they stream in."""
        uploads = self.uploads

        async def counting(scope: Scope, receive: Receive, send: Send) -> None:
            match = UPLOAD_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
            if match is None or scope.get("method") != "PUT":
                await app(scope, receive, send)
                return
            counter = uploads.labels(match.group(1))

            async def counted() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    counter.inc(len(message.get("body", b"")))
                return message

            await app(scope, counted, send)

        return counting


def _histogram(name: str, doc: str, values: list[float], bounds: tuple[float, ...]) -> HistogramMetricFamily:
    buckets = [(str(float(b)), sum(1 for v in values if v <= b)) for b in bounds]
    buckets.append(("+Inf", len(values)))
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=sum(values))
