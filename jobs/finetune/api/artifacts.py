"""Files of the job a worker holds: it downloads the attached dataset and the last checkpoint, and
uploads checkpoints and the adapter (gzipped tar, checksummed, size-limited, unpacked safely)."""

from __future__ import annotations

import hashlib
import hmac
import re
import shutil
import uuid
from pathlib import Path
from typing import IO, Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import FileResponse

from hipbot.errors import InvalidInput, NotFound, TooLarge
from hipbot.i18n import N_
from hipbot.jobs.finetune.api.protocol import ArtifactReply, ErrorReply
from hipbot.jobs.finetune.api.state import CallingWorker, Coordinator, HeldJob, Service
from hipbot.jobs.finetune.archive import MalformedArtifact, Member, extract, scan
from hipbot.jobs.finetune.portable import PICKLED_SUFFIXES, check_member
from hipbot.jobs.finetune.queue import MAX_ID, Worker

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


@router.get("/jobs/{job_id}/dataset", response_class=FileResponse)
def get_dataset(job: HeldJob) -> FileResponse:
    if not job.attachment_path or not Path(job.attachment_path).is_file():
        raise NotFound(N_("this job has no attached dataset"))
    return FileResponse(job.attachment_path, filename=job.attachment_name)


@router.get("/jobs/{job_id}/checkpoint", response_class=FileResponse)
def get_checkpoint(job: HeldJob) -> FileResponse:
    if not job.checkpoint_path or not Path(job.checkpoint_path).is_file():
        raise NotFound(N_("no checkpoint uploaded for this job"))
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
    x_content_sha256: Annotated[str, Header(max_length=200)],
    step: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
) -> ArtifactReply:
    """A gzipped tar of a checkpoint folder or of the adapter; checked, size-limited, unpacked safely.

    A checkpoint holds only safetensors and JSON (``portable``); a refused one is logged against
    the worker that sent it, so the next worker never receives it."""
    if kind not in ARTIFACT_KINDS:
        raise NotFound(N_("artifact kind must be one of {kinds}", kinds=", ".join(ARTIFACT_KINDS)))
    if kind == "checkpoint" and step is None:
        raise InvalidInput(N_("a checkpoint upload needs ?step=N"))
    expected = x_content_sha256.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise MalformedArtifact(N_("X-Content-SHA256 must be the upload's SHA-256 as 64 hex digits"))
    limit = service.config.max_artifact_bytes
    too_large = TooLarge(N_("artifact is larger than the {limit} byte limit", limit=limit))
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
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
        if not hmac.compare_digest(digest.hexdigest().encode(), expected.encode()):
            raise MalformedArtifact(N_("checksum mismatch: the upload was corrupted or altered"))
        store = _store_checkpoint if kind == "checkpoint" else _store_adapter
        try:
            return await service.run(service.file_pool, store, service, job.id, w, step or 0, tmp)
        except MalformedArtifact as exc:
            with service.lock:
                service.queue.log(
                    job.id, w.id, f"refused the {kind} {w.id} ({w.name}) uploaded: {exc.message}"
                )
            raise
    finally:
        tmp.unlink(missing_ok=True)


def _store_checkpoint(service: Coordinator, job_id: int, w: Worker, step: int, tmp: Path) -> ArtifactReply:
    scan(tmp, service.config.archive_limits, check_member)
    job = service.locked(service.queue.held, job_id, w.id)  # the lease may have moved during the upload
    folder = service.config.data_dir / "checkpoints" / str(job_id)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"checkpoint-{step}.tar.gz"
    partial = folder / f".{uuid.uuid4().hex}.partial"
    shutil.copyfile(tmp, partial)
    with service.files_lock:
        partial.replace(dest)
        if job.checkpoint_path and job.checkpoint_path != str(dest):
            Path(job.checkpoint_path).unlink(missing_ok=True)
        with service.lock:
            service.queue.update(job_id, checkpoint_path=str(dest), checkpoint_step=step)
            service.queue.log(
                job_id, w.id, f"checkpoint at step {step} uploaded ({tmp.stat().st_size} bytes)"
            )
    return ArtifactReply(step=step)


def _adapter_member(member: Member, data: IO[bytes]) -> None:
    """Adapters are read by vLLM and the registry: no pickled files among them."""
    if member.name.endswith(PICKLED_SUFFIXES):
        raise MalformedArtifact(
            N_(
                "malformed artifact: {member_name} is a pickle; adapters carry safetensors only",
                member_name=member.name,
            )
        )


def _store_adapter(service: Coordinator, job_id: int, w: Worker, _step: int, tmp: Path) -> ArtifactReply:
    names = scan(tmp, service.config.archive_limits, _adapter_member)
    base = {Path(n).name for n in names}
    missing = [f for f in ADAPTER_REQUIRED if f not in names]
    if missing:
        raise MalformedArtifact(
            N_("malformed artifact: the adapter lacks {missing}", missing=", ".join(missing))
        )
    job = service.locked(service.queue.held, job_id, w.id)
    dest = service.config.adapters_dir / f"job-{job_id}-{job.name}"
    staging = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.partial")
    extract(tmp, staging, service.config.archive_limits)
    with service.files_lock:  # one swap at a time: concurrent uploads for a job each land whole
        old = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.old")
        if dest.exists():
            dest.rename(old)
        staging.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
        artifacts = {
            **job.artifacts,
            "adapter": {"path": str(dest), "files": sorted(base), "bytes": tmp.stat().st_size},
        }
        with service.lock:
            service.queue.update(job_id, adapter_dir=str(dest), artifacts=artifacts)
            service.queue.log(job_id, w.id, f"adapter uploaded: {', '.join(sorted(base))}")
    return ArtifactReply(adapter_dir=str(dest))
