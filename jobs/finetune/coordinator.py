"""The job coordinator: an HTTP API that volunteers' workers reach outbound (they sit behind NAT).

Clients (the CLI, the Discord bot) submit, list, cancel and read jobs with the coordinator token
(or from loopback when none is set). Workers register once with a one-time registration token and
get a secret (stored hashed); they long-poll for a job that fits their GPUs, heartbeat to keep
its lease (the reply says whether it was cancelled), upload checkpoints and the adapter
(checksummed, size-limited, safe tar.gz only) and report the result. A worker can touch only the
jobs it holds. Lost leases requeue the job for the next worker, which resumes from the last
uploaded checkpoint. The OpenAPI schema is at /openapi.json (and /docs).
"""

import asyncio
import contextlib
import hashlib
import hmac
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import Body, Depends, FastAPI, File, Form, Header, HTTPException, Query, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from hipbot.db import open_db
from hipbot.errors import HipbotError
from hipbot.jobs.finetune.datasets import ATTACHMENT_LIMIT
from hipbot.jobs.finetune.intake import accept_job, estimate_spec, job_fits
from hipbot.jobs.finetune.memory import GIB
from hipbot.jobs.finetune.queue import FINAL, Job, JobQueue, Worker
from hipbot.jobs.finetune.spec import validate_job

T = TypeVar("T")
ARTIFACT_KINDS = ("checkpoint", "adapter")
ADAPTER_REQUIRED = ("adapter_model.safetensors", "adapter_config.json")


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
    def from_settings(cls, settings: Any, **overrides: Any) -> "CoordinatorConfig":
        return cls(
            database=settings.database,
            data_dir=settings.home / "coordinator",
            adapters_dir=settings.adapters,
            client_token=settings.coordinator_token,
            registration_token=settings.registration_token,
            **overrides,
        )


class RegisterRequest(BaseModel):
    token: str
    name: str = Field(max_length=100)
    gpus: dict[str, Any]


class ClaimRequest(BaseModel):
    wait_s: float = 0.0
    gpus: dict[str, Any] | None = None


class HeartbeatRequest(BaseModel):
    progress: dict[str, Any] | None = None
    logs: list[str] = []


class LogsRequest(BaseModel):
    lines: list[str]


class ResultRequest(BaseModel):
    state: str
    error: str | None = None
    metrics: dict[str, Any] | None = None
    retry: bool = False


class CancelRequest(BaseModel):
    by: str | None = None


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Regular files and folders with relative paths inside the archive only."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            raise ValueError(f"unsafe archive member {m.name!r}")
    return members


def create_app(config: CoordinatorConfig, *, clock: Callable[[], float] = time.time) -> FastAPI:
    """The FastAPI app; ``app.state.queue`` is the JobQueue it serves."""
    db = open_db(config.database)
    queue = JobQueue(db, clock=clock)
    lock = threading.RLock()
    if config.registration_token:
        queue.create_registration_token(config.registration_token)
    for sub in ("attachments", "checkpoints", "uploads"):
        (config.data_dir / sub).mkdir(parents=True, exist_ok=True)

    def locked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with lock:
            return fn(*args, **kwargs)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def sweep() -> None:
            while True:
                await asyncio.sleep(max(1.0, config.lease_s / 4))
                await asyncio.to_thread(locked, queue.expire_leases)

        task = asyncio.create_task(sweep())
        yield
        task.cancel()

    app = FastAPI(
        title="hipbot coordinator",
        version="1",
        description="Queue of LoRA fine-tune jobs; volunteers' workers poll it outbound.",
        lifespan=lifespan,
    )
    app.state.queue = queue
    app.state.config = config

    @app.exception_handler(HipbotError)
    async def _user_error(request: Request, exc: HipbotError) -> JSONResponse:
        status = 404 if exc.message.startswith(("no job #", "no worker ")) else 400
        return JSONResponse(status_code=status, content={"detail": str(exc)})

    @app.exception_handler(PermissionError)
    async def _forbidden(request: Request, exc: PermissionError) -> JSONResponse:
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    # ------------------------------------------------------------------ auth
    def client(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
        if config.client_token:
            given = (authorization or "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given, config.client_token):
                raise HTTPException(401, "missing or wrong coordinator token")
        elif request.client is None or request.client.host not in (
            "127.0.0.1",
            "::1",
            "localhost",
            "testclient",
        ):
            raise HTTPException(401, "this coordinator has no client token: only loopback clients may use it")

    def worker(authorization: Annotated[str | None, Header()] = None) -> Worker:
        raw = (authorization or "").removeprefix("Bearer ").strip()
        worker_id, _, secret = raw.partition(":")
        if not worker_id or not secret:
            raise HTTPException(401, "worker credentials missing (Authorization: Bearer WORKER_ID:SECRET)")
        try:
            return locked(queue.authenticate, worker_id, secret)
        except PermissionError as exc:
            raise HTTPException(401, str(exc)) from exc

    def held(job_id: int, w: Worker) -> Job:
        return locked(queue.held, job_id, w.id)

    def fits(w: Worker) -> Callable[[Job], bool]:
        return lambda job: job_fits(job, w)

    # ------------------------------------------------------------------ clients
    @app.post("/validate", dependencies=[Depends(client)], tags=["clients"])
    async def validate_route(
        config_yaml: Annotated[str, Form(alias="config")],
        dataset: Annotated[UploadFile | None, File()] = None,
    ) -> dict[str, Any]:
        """Check a job YAML (and an attached dataset) without queueing it."""
        data = await _read_upload(dataset, config.max_attachment_bytes) if dataset else None
        result = validate_job(config_yaml, data, dataset.filename if dataset else None)
        out: dict[str, Any] = {"ok": result.ok, "error": result.error}
        if result.spec:
            est, _ = await asyncio.to_thread(estimate_spec, result.spec)
            out["estimate"] = est.as_dict() if est else None
        return out

    @app.post("/jobs", dependencies=[Depends(client)], tags=["clients"], status_code=201)
    async def submit(
        config_yaml: Annotated[str, Form(alias="config")],
        owner: Annotated[str | None, Form()] = None,
        guild: Annotated[str | None, Form()] = None,
        priority: Annotated[int, Form()] = 0,
        name: Annotated[str | None, Form()] = None,
        dataset: Annotated[UploadFile | None, File()] = None,
    ) -> dict[str, Any]:
        """Queue a job: the YAML config and, optionally, its dataset file."""
        data = await _read_upload(dataset, config.max_attachment_bytes) if dataset else None
        result = validate_job(config_yaml, data, dataset.filename if dataset else None)
        if not result.ok:
            raise HTTPException(422, result.error)
        assert result.spec is not None
        job, warning = await asyncio.to_thread(
            accept_job,
            queue,
            result.spec,
            config_yaml,
            attachments_dir=config.data_dir / "attachments",
            dataset=data,
            dataset_name=dataset.filename if dataset else None,
            owner=owner,
            guild=guild,
            priority=priority,
            name=name,
            max_attempts=config.max_attempts,
            lock=lock,
        )
        return {"job": job.as_dict(), "warning": warning}

    @app.get("/jobs", dependencies=[Depends(client)], tags=["clients"])
    def list_jobs(
        owner: str | None = None,
        guild: str | None = None,
        state: Annotated[list[str] | None, Query()] = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        return [
            j.as_dict()
            for j in locked(
                queue.list, owner=owner, guild=guild, states=tuple(state or ()) or None, limit=limit
            )
        ]

    @app.get("/jobs/{job_id}", dependencies=[Depends(client)], tags=["clients"])
    def get_job(job_id: int) -> dict[str, Any]:
        return locked(queue.get, job_id).as_dict()

    @app.post("/jobs/{job_id}/cancel", dependencies=[Depends(client)], tags=["clients"])
    def cancel_job(job_id: int, body: Annotated[CancelRequest | None, Body()] = None) -> dict[str, Any]:
        return locked(queue.cancel, job_id, by=body.by if body else None).as_dict()

    @app.get("/jobs/{job_id}/logs", dependencies=[Depends(client)], tags=["clients"])
    def job_logs(job_id: int, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return locked(queue.logs, job_id, after=after, limit=limit)

    @app.get("/workers", dependencies=[Depends(client)], tags=["clients"])
    def list_workers() -> list[dict[str, Any]]:
        return [w.as_dict() for w in locked(queue.workers)]

    # ------------------------------------------------------------------ workers
    @app.post("/workers/register", tags=["workers"])
    def register(body: RegisterRequest) -> dict[str, Any]:
        """Trade a one-time registration token for a worker id and secret (shown only now)."""
        try:
            w, secret = locked(queue.register_worker, body.token, body.name, body.gpus)
        except PermissionError as exc:
            raise HTTPException(401, str(exc)) from exc
        return {"worker_id": w.id, "secret": secret}

    @app.post("/workers/claim", tags=["workers"], responses={204: {"description": "no job fits right now"}})
    def claim(body: ClaimRequest, w: Annotated[Worker, Depends(worker)]) -> Any:
        """Long-poll up to ``wait_s`` for a queued job that fits this worker's GPUs."""
        if body.gpus:
            locked(queue.update_worker_gpus, w.id, body.gpus)
            w = locked(queue.worker, w.id)
        deadline = time.monotonic() + min(max(body.wait_s, 0.0), config.max_wait_s)
        while True:
            job = locked(queue.claim, w, lease_s=config.lease_s, fits=fits(w))
            if job is not None:
                return {"job": job.as_dict(), "lease_s": config.lease_s}
            if time.monotonic() >= deadline:
                return Response(status_code=204)
            time.sleep(0.25)

    @app.post("/jobs/{job_id}/heartbeat", tags=["workers"])
    def heartbeat(
        job_id: int, body: HeartbeatRequest, w: Annotated[Worker, Depends(worker)]
    ) -> dict[str, Any]:
        """Keep the lease; the reply's ``cancel`` tells the worker to stop the job."""
        job = locked(queue.heartbeat, job_id, w.id, progress=body.progress, lease_s=config.lease_s)
        if body.logs:
            locked(queue.log, job_id, w.id, *body.logs)
        return {"cancel": job.cancel_requested, "lease_s": config.lease_s}

    @app.post("/jobs/{job_id}/logs", tags=["workers"])
    def post_logs(job_id: int, body: LogsRequest, w: Annotated[Worker, Depends(worker)]) -> dict[str, Any]:
        held(job_id, w)
        locked(queue.log, job_id, w.id, *body.lines)
        return {"ok": True}

    @app.get("/jobs/{job_id}/dataset", tags=["workers"])
    def get_dataset(job_id: int, w: Annotated[Worker, Depends(worker)]) -> Any:
        job = held(job_id, w)
        if not job.attachment_path or not Path(job.attachment_path).is_file():
            raise HTTPException(404, "this job has no attached dataset")
        return FileResponse(job.attachment_path, filename=job.attachment_name)

    @app.get("/jobs/{job_id}/checkpoint", tags=["workers"])
    def get_checkpoint(job_id: int, w: Annotated[Worker, Depends(worker)]) -> Any:
        job = held(job_id, w)
        if not job.checkpoint_path or not Path(job.checkpoint_path).is_file():
            raise HTTPException(404, "no checkpoint uploaded for this job")
        return FileResponse(job.checkpoint_path, headers={"X-Checkpoint-Step": str(job.checkpoint_step or 0)})

    @app.put("/jobs/{job_id}/artifacts/{kind}", tags=["workers"])
    async def upload(
        job_id: int,
        kind: str,
        request: Request,
        x_content_sha256: Annotated[str, Header()],
        w: Annotated[Worker, Depends(worker)],
        step: int | None = None,
    ) -> dict[str, Any]:
        """A gzipped tar of a checkpoint folder or of the adapter; checked, size-limited, unpacked safely."""
        if kind not in ARTIFACT_KINDS:
            raise HTTPException(404, f"artifact kind must be one of {', '.join(ARTIFACT_KINDS)}")
        if kind == "checkpoint" and (step is None or step < 0):
            raise HTTPException(422, "a checkpoint upload needs ?step=N")
        await asyncio.to_thread(held, job_id, w)
        length = request.headers.get("content-length")
        if length and int(length) > config.max_artifact_bytes:
            raise HTTPException(413, f"artifact is larger than the {config.max_artifact_bytes} byte limit")
        tmp = config.data_dir / "uploads" / f"{job_id}-{uuid.uuid4().hex}.tar.gz"
        digest = hashlib.sha256()
        size = 0
        try:
            with tmp.open("wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > config.max_artifact_bytes:
                        raise HTTPException(
                            413, f"artifact is larger than the {config.max_artifact_bytes} byte limit"
                        )
                    digest.update(chunk)
                    fh.write(chunk)
            if not hmac.compare_digest(digest.hexdigest(), x_content_sha256.lower()):
                raise HTTPException(400, "checksum mismatch: the upload was corrupted or altered")
            return await asyncio.to_thread(_store, job_id, kind, step, tmp, w)
        finally:
            tmp.unlink(missing_ok=True)

    def _store(job_id: int, kind: str, step: int | None, tmp: Path, w: Worker) -> dict[str, Any]:
        try:
            with tarfile.open(tmp, "r:gz") as tar:
                names = [m.name for m in _safe_members(tar)]
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            raise HTTPException(400, f"malformed artifact: {exc}") from exc
        job = held(job_id, w)
        if kind == "checkpoint":
            folder = config.data_dir / "checkpoints" / str(job_id)
            folder.mkdir(parents=True, exist_ok=True)
            dest = folder / f"checkpoint-{step}.tar.gz"
            shutil.copyfile(tmp, dest)
            if job.checkpoint_path and job.checkpoint_path != str(dest):
                Path(job.checkpoint_path).unlink(missing_ok=True)
            locked(queue.update, job_id, checkpoint_path=str(dest), checkpoint_step=step)
            locked(
                queue.log, job_id, w.id, f"checkpoint at step {step} uploaded ({tmp.stat().st_size} bytes)"
            )
            return {"ok": True, "step": step}
        base = {Path(n).name for n in names}
        missing = [f for f in ADAPTER_REQUIRED if f not in base]
        if missing:
            raise HTTPException(400, f"malformed artifact: the adapter lacks {', '.join(missing)}")
        dest = config.adapters_dir / f"job-{job_id}-{job.name}"
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(tmp, "r:gz") as tar:
            tar.extractall(staging, members=_safe_members(tar), filter="data")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
        artifacts = dict(job.artifacts)
        artifacts["adapter"] = {"path": str(dest), "files": sorted(base), "bytes": tmp.stat().st_size}
        locked(queue.update, job_id, adapter_dir=str(dest), artifacts=artifacts)
        locked(queue.log, job_id, w.id, f"adapter uploaded: {', '.join(sorted(base))}")
        return {"ok": True, "adapter_dir": str(dest)}

    @app.post("/jobs/{job_id}/result", tags=["workers"])
    def result(job_id: int, body: ResultRequest, w: Annotated[Worker, Depends(worker)]) -> dict[str, Any]:
        """The end of this worker's attempt: succeeded (adapter uploaded), failed or cancelled."""
        job = held(job_id, w)
        if body.state not in FINAL:
            raise HTTPException(422, f"state must be one of {', '.join(FINAL)}")
        if body.state == "succeeded" and not job.adapter_dir:
            raise HTTPException(409, "upload the adapter before reporting success")
        if (
            body.state == "failed"
            and body.retry
            and job.attempts < job.max_attempts
            and not job.cancel_requested
        ):
            locked(queue.update, job_id, state="queued", worker_id=None, lease_until=None, error=body.error)
            locked(queue.log, job_id, w.id, f"gave the job back: {body.error}")
            return locked(queue.get, job_id).as_dict()
        state = "cancelled" if job.cancel_requested and body.state != "succeeded" else body.state
        return locked(queue.finish, job_id, state, error=body.error, metrics=body.metrics).as_dict()

    return app


async def _read_upload(upload: UploadFile, limit: int) -> bytes:
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(413, f"attached dataset is larger than the {limit // 2**20} MiB limit")
    return data


def openapi_schema(config: CoordinatorConfig) -> dict[str, Any]:
    return create_app(config).openapi()
