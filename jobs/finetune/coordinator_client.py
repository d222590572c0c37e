"""HTTP client of the coordinator, used by the CLI, the Discord bot and the worker agent.

Every error comes back as a ``CoordinatorError`` (a ``HipbotError``) carrying the server's own
message and the HTTP status, so front ends print one readable line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from hipbot.errors import HipbotError, JobNotFound
from hipbot.i18n import N_
from hipbot.jobs.finetune.api.protocol import (
    ArtifactReply,
    ClaimReply,
    HeartbeatReply,
    RegisterReply,
    ValidateReply,
)
from hipbot.jobs.finetune.models import GpuReport, JobInfo, LogLine, Progress, Submitted, WorkerInfo


class CoordinatorError(HipbotError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class CoordinatorClient:
    """Client calls (token) and worker calls (``worker_id`` + ``secret``) over one httpx client."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        worker_id: str | None = None,
        secret: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.worker_id = worker_id
        self.secret = secret
        self.http = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _headers(self, as_worker: bool) -> dict[str, str]:
        if as_worker:
            if not (self.worker_id and self.secret):
                raise CoordinatorError(N_("this worker is not registered"))
            return {"Authorization": f"Bearer {self.worker_id}:{self.secret}"}
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _call(self, method: str, path: str, *, worker: bool = False, **kwargs: Any) -> httpx.Response:
        headers = {**self._headers(worker), **kwargs.pop("headers", {})}
        try:
            resp = self.http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise CoordinatorError(
                N_("cannot reach the coordinator at {url}: {exc}", url=self.url, exc=exc)
            ) from exc
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail")
            except ValueError:
                detail = resp.text[:300]
            if isinstance(detail, list):  # FastAPI's validation errors
                detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
            raise CoordinatorError(
                N_(
                    "coordinator refused ({resp_status_code}): {detail}",
                    resp_status_code=resp.status_code,
                    detail=detail,
                ),
                resp.status_code,
            )
        return resp

    # ------------------------------------------------------------------ clients
    def validate(
        self, config_yaml: str, dataset: bytes | None = None, dataset_name: str | None = None
    ) -> ValidateReply:
        files = {"dataset": (dataset_name or "dataset.jsonl", dataset)} if dataset is not None else None
        reply = self._call("POST", "/validate", data={"config": config_yaml}, files=files)
        return ValidateReply.model_validate(reply.json())

    def submit(
        self,
        config_yaml: str,
        *,
        owner: str | None = None,
        guild: str | None = None,
        priority: int = 0,
        name: str | None = None,
        dataset: bytes | None = None,
        dataset_name: str | None = None,
    ) -> Submitted:
        """Queue a job; returns it and a warning for the user, if any."""
        form = {"config": config_yaml, "priority": str(priority)}
        form.update({k: v for k, v in (("owner", owner), ("guild", guild), ("name", name)) if v})
        files = {"dataset": (dataset_name or "dataset.jsonl", dataset)} if dataset is not None else None
        return Submitted.model_validate(self._call("POST", "/jobs", data=form, files=files).json())

    def list(
        self,
        *,
        owner: str | None = None,
        guild: str | None = None,
        states: tuple[str, ...] | None = None,
        limit: int = 50,
    ) -> list[JobInfo]:
        params: list[tuple[str, str | int]] = [("limit", limit)]
        params += [(k, v) for k, v in (("owner", owner), ("guild", guild)) if v]
        params += [("state", s) for s in states or ()]
        return [JobInfo.model_validate(j) for j in self._call("GET", "/jobs", params=params).json()]

    def get(self, job_id: int) -> JobInfo:
        """The job; ``JobNotFound`` when the coordinator has no such job."""
        try:
            return JobInfo.model_validate(self._call("GET", f"/jobs/{job_id}").json())
        except CoordinatorError as exc:
            if exc.status == 404:
                raise JobNotFound(str(exc)) from exc
            raise

    def cancel(self, job_id: int, *, by: str | None = None) -> JobInfo:
        return JobInfo.model_validate(self._call("POST", f"/jobs/{job_id}/cancel", json={"by": by}).json())

    def logs(self, job_id: int, *, after: int = 0) -> list[LogLine]:
        rows = self._call("GET", f"/jobs/{job_id}/logs", params={"after": after}).json()
        return [LogLine.model_validate(r) for r in rows]

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo.model_validate(w) for w in self._call("GET", "/workers").json()]

    # ------------------------------------------------------------------ workers
    def register(self, token: str, name: str, gpus: GpuReport) -> tuple[str, str]:
        body = {"token": token, "name": name, "gpus": gpus.model_dump(exclude_none=True)}
        resp = self._call("POST", "/workers/register", json=body)
        reply = RegisterReply.model_validate(resp.json())
        self.worker_id, self.secret = reply.worker_id, reply.secret
        return reply.worker_id, reply.secret

    def claim(self, wait_s: float = 0.0, gpus: GpuReport | None = None) -> JobInfo | None:
        """A job that fits this worker, leased to it; None when none came within ``wait_s``."""
        body = {"wait_s": wait_s, "gpus": gpus.model_dump(exclude_none=True) if gpus else None}
        resp = self._call("POST", "/workers/claim", worker=True, json=body, timeout=wait_s + 30)
        return None if resp.status_code == 204 else ClaimReply.model_validate(resp.json()).job

    def heartbeat(
        self, job_id: int, progress: Progress | None = None, logs: list[str] | None = None
    ) -> HeartbeatReply:
        body = {"progress": progress.model_dump(exclude_none=True) if progress else None, "logs": logs or []}
        resp = self._call("POST", f"/jobs/{job_id}/heartbeat", worker=True, json=body)
        return HeartbeatReply.model_validate(resp.json())

    def post_logs(self, job_id: int, lines: list[str]) -> None:
        self._call("POST", f"/jobs/{job_id}/logs", worker=True, json={"lines": lines})

    def upload(self, job_id: int, kind: str, archive: Path, *, step: int | None = None) -> ArtifactReply:
        """PUT a .tar.gz artifact with its SHA-256, streamed from disk."""
        digest = hashlib.sha256()
        with archive.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)

        def body() -> Iterator[bytes]:
            with archive.open("rb") as fh:
                yield from iter(lambda: fh.read(1 << 20), b"")

        params = {"step": step} if step is not None else None
        resp = self._call(
            "PUT",
            f"/jobs/{job_id}/artifacts/{kind}",
            worker=True,
            params=params,
            content=body(),
            headers={
                "X-Content-SHA256": digest.hexdigest(),
                "Content-Type": "application/gzip",
                "Content-Length": str(archive.stat().st_size),
            },
        )
        return ArtifactReply.model_validate(resp.json())

    def download(self, job_id: int, what: str, dest: Path) -> dict[str, str]:
        """GET the job's ``dataset`` or ``checkpoint`` into ``dest``; returns the response headers."""
        with self.http.stream("GET", f"/jobs/{job_id}/{what}", headers=self._headers(True)) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise CoordinatorError(
                    N_(
                        "coordinator refused ({resp_status_code}): {detail}",
                        resp_status_code=resp.status_code,
                        detail=resp.text[:300],
                    ),
                    resp.status_code,
                )
            dest.parent.mkdir(parents=True, exist_ok=True)
            with dest.open("wb") as fh:
                for chunk in resp.iter_bytes():
                    fh.write(chunk)
            return dict(resp.headers)

    def result(
        self,
        job_id: int,
        state: str,
        *,
        error: str | None = None,
        metrics: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> JobInfo:
        resp = self._call(
            "POST",
            f"/jobs/{job_id}/result",
            worker=True,
            json={"state": state, "error": error, "metrics": metrics, "retry": retry},
        )
        return JobInfo.model_validate(resp.json())
