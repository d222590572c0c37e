"""Files of the job a worker holds: it downloads the attached dataset and the last checkpoint, and
uploads checkpoints and the adapter (gzipped tar, checksummed, size-limited, unpacked safely)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import shutil
import tarfile
import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import FileResponse

from hipbot.errors import HipbotError, InvalidInput, NotFound, TooLarge
from hipbot.jobs.finetune.api.protocol import ArtifactReply, ErrorReply
from hipbot.jobs.finetune.api.state import CallingWorker, Coordinator, HeldJob, Service
from hipbot.jobs.finetune.queue import Worker

ARTIFACT_KINDS = ("checkpoint", "adapter")
ADAPTER_REQUIRED = ("adapter_model.safetensors", "adapter_config.json")

router = APIRouter(
    tags=["workers"],
    responses={
        401: {"model": ErrorReply, "description": "unknown worker or wrong secret"},
        403: {"model": ErrorReply, "description": "this worker does not hold the job"},
        404: {"model": ErrorReply, "description": "no such job or file"},
    },
)


class MalformedArtifact(HipbotError):
    """An upload that is not a safe gzipped tar of what its kind needs."""


def safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Regular files and folders with relative paths inside the archive only."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            raise MalformedArtifact(f"malformed artifact: unsafe archive member {m.name!r}")
    return members


@router.get("/jobs/{job_id}/dataset", response_class=FileResponse)
def get_dataset(job: HeldJob) -> FileResponse:
    if not job.attachment_path or not Path(job.attachment_path).is_file():
        raise NotFound("this job has no attached dataset")
    return FileResponse(job.attachment_path, filename=job.attachment_name)


@router.get("/jobs/{job_id}/checkpoint", response_class=FileResponse)
def get_checkpoint(job: HeldJob) -> FileResponse:
    if not job.checkpoint_path or not Path(job.checkpoint_path).is_file():
        raise NotFound("no checkpoint uploaded for this job")
    return FileResponse(job.checkpoint_path, headers={"X-Checkpoint-Step": str(job.checkpoint_step or 0)})


@router.put(
    "/jobs/{job_id}/artifacts/{kind}",
    response_model_exclude_none=True,
    responses={
        400: {"model": ErrorReply, "description": "checksum mismatch or malformed archive"},
        413: {"model": ErrorReply, "description": "over the size limit"},
    },
)
async def upload(
    service: Service,
    job: HeldJob,
    w: CallingWorker,
    kind: str,
    request: Request,
    x_content_sha256: Annotated[str, Header()],
    step: int | None = None,
) -> ArtifactReply:
    """A gzipped tar of a checkpoint folder or of the adapter; checked, size-limited, unpacked safely."""
    if kind not in ARTIFACT_KINDS:
        raise NotFound(f"artifact kind must be one of {', '.join(ARTIFACT_KINDS)}")
    if kind == "checkpoint" and (step is None or step < 0):
        raise InvalidInput("a checkpoint upload needs ?step=N")
    limit = service.config.max_artifact_bytes
    too_large = TooLarge(f"artifact is larger than the {limit} byte limit")
    length = request.headers.get("content-length")
    if length and int(length) > limit:
        raise too_large
    tmp = service.config.data_dir / "uploads" / f"{job.id}-{uuid.uuid4().hex}.tar.gz"
    digest = hashlib.sha256()
    size = 0
    try:
        with tmp.open("wb") as fh:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                digest.update(chunk)
                fh.write(chunk)
        if not hmac.compare_digest(digest.hexdigest(), x_content_sha256.lower()):
            raise MalformedArtifact("checksum mismatch: the upload was corrupted or altered")
        if kind == "checkpoint":
            return await asyncio.to_thread(_store_checkpoint, service, job.id, w, step or 0, tmp)
        return await asyncio.to_thread(_store_adapter, service, job.id, w, tmp)
    finally:
        tmp.unlink(missing_ok=True)


def _members(tmp: Path) -> list[str]:
    try:
        with tarfile.open(tmp, "r:gz") as tar:
            return [m.name for m in safe_members(tar)]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise MalformedArtifact(f"malformed artifact: {exc}") from exc


def _store_checkpoint(service: Coordinator, job_id: int, w: Worker, step: int, tmp: Path) -> ArtifactReply:
    _members(tmp)
    job = service.locked(service.queue.held, job_id, w.id)  # the lease may have moved during the upload
    folder = service.config.data_dir / "checkpoints" / str(job_id)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"checkpoint-{step}.tar.gz"
    shutil.copyfile(tmp, dest)
    if job.checkpoint_path and job.checkpoint_path != str(dest):
        Path(job.checkpoint_path).unlink(missing_ok=True)
    with service.lock:
        service.queue.update(job_id, checkpoint_path=str(dest), checkpoint_step=step)
        service.queue.log(job_id, w.id, f"checkpoint at step {step} uploaded ({tmp.stat().st_size} bytes)")
    return ArtifactReply(step=step)


def _store_adapter(service: Coordinator, job_id: int, w: Worker, tmp: Path) -> ArtifactReply:
    base = {Path(n).name for n in _members(tmp)}
    job = service.locked(service.queue.held, job_id, w.id)
    missing = [f for f in ADAPTER_REQUIRED if f not in base]
    if missing:
        raise MalformedArtifact(f"malformed artifact: the adapter lacks {', '.join(missing)}")
    dest = service.config.adapters_dir / f"job-{job_id}-{job.name}"
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(tmp, "r:gz") as tar:
        tar.extractall(staging, members=safe_members(tar), filter="data")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    artifacts = {
        **job.artifacts,
        "adapter": {"path": str(dest), "files": sorted(base), "bytes": tmp.stat().st_size},
    }
    with service.lock:
        service.queue.update(job_id, adapter_dir=str(dest), artifacts=artifacts)
        service.queue.log(job_id, w.id, f"adapter uploaded: {', '.join(sorted(base))}")
    return ArtifactReply(adapter_dir=str(dest))
