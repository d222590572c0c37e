"""The worker agent a volunteer runs: ``hipbot worker --coordinator URL --token T``.

It detects its GPUs, registers once (the secret is kept in ``workdir/credentials.json``), then
loops: long-poll a job that fits, fetch its dataset and last checkpoint, run the training child
(the real launcher, killable as a process group), stream its log lines and progress in
heartbeats, upload each new checkpoint (safetensors and JSON only, ``portable``) and finally the adapter, report the result, and go on to
the next job whatever happened to this one. Job configs are data, never code: the spec is parsed
and validated here again, ``trust_remote_code`` needs the owner's ``--allow-remote-code``, and
models load from safetensors only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.archive import ArchiveLimits, extract
from hipbot.jobs.finetune.coordinator_client import CoordinatorClient, CoordinatorError
from hipbot.jobs.finetune.datasets import attachment_entry, check_attachment
from hipbot.jobs.finetune.gpu import GpuInfo, detect, refusal
from hipbot.jobs.finetune.models import GpuReport, JobInfo, Progress
from hipbot.jobs.finetune.outcome import CHECKPOINT_RE, last_checkpoint
from hipbot.jobs.finetune.portable import NotPortable, export_checkpoint, import_checkpoint
from hipbot.jobs.finetune.runner import run_child
from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.trainer import write_job

CREDENTIALS = "credentials.json"
log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One run of a claimed job, as the heartbeat sees it between ticks."""

    uploaded: int  # the last checkpoint step the coordinator has
    progress: Progress | None = None
    logs: list[str] = field(default_factory=list)
    stop: str | None = None  # "cancelled" or "lost"
    beat: float = 0.0


def _die_with_parent() -> None:
    """preexec hook: the training child gets SIGKILL if this worker dies (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def pack(folder: Path, dest: Path, *, skip_checkpoints: bool = False) -> Path:
    """A .tar.gz of ``folder``'s files, paths relative to it."""
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if skip_checkpoints and CHECKPOINT_RE.match(rel.parts[0]):
                continue
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=str(rel), recursive=False)
    return dest


class WorkerAgent:
    def __init__(
        self,
        url: str,
        *,
        workdir: Path,
        token: str | None = None,
        name: str = "worker",
        allow_cpu: bool = False,
        allow_remote_code: bool = False,
        heartbeat_s: float = 10.0,
        poll_s: float = 20.0,
        gpu_info: GpuInfo | None = None,
    ) -> None:
        self.url = url
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.name = name
        self.allow_cpu = allow_cpu
        self.allow_remote_code = allow_remote_code
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self.info = gpu_info or detect()
        self.client = CoordinatorClient(url)

    # ------------------------------------------------------------------ identity
    def advertised(self) -> GpuReport:
        report = GpuReport.model_validate(self.info.as_dict())
        if not self.info.gpus:
            memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
            report = report.model_copy(update={"memory_gib": memory})
        return report

    def connect(self) -> None:
        """Reuse saved credentials for this coordinator, else register with the one-time token."""
        path = self.workdir / CREDENTIALS
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved.get("url") == self.url:
                self.client.worker_id, self.client.secret = saved["worker_id"], saved["secret"]
                return
        if not self.token:
            raise HipbotError(
                N_("this worker is not registered yet"), hint=N_("pass --token with a registration token")
            )
        worker_id, secret = self.client.register(self.token, self.name, self.advertised())
        path.write_text(
            json.dumps({"url": self.url, "worker_id": worker_id, "secret": secret}), encoding="utf-8"
        )
        path.chmod(0o600)
        log.info("registered as %s: %s", worker_id, self.info.describe())

    # ------------------------------------------------------------------ loop
    def run(self, max_jobs: int | None = None) -> int:
        """Claim and run jobs until ``max_jobs`` are done (forever by default); return how many ran."""
        if not self.info.gpus and not self.allow_cpu:
            raise HipbotError(
                N_("no GPU visible to PyTorch"), hint=N_("check HIP_VISIBLE_DEVICES, or pass --cpu for tests")
            )
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
        self.connect()
        done = 0
        while max_jobs is None or done < max_jobs:
            try:
                job = self.client.claim(wait_s=self.poll_s, gpus=self.advertised())
            except CoordinatorError as exc:
                log.warning("claim failed: %s", exc)
                time.sleep(min(self.poll_s, 5.0))
                continue
            if job is None:
                continue
            try:
                self.run_job(job)
            except CoordinatorError as exc:
                log.error("job #%s: coordinator error: %s", job.id, exc)
            except Exception as exc:  # noqa: BLE001 - one broken job must not stop the worker
                log.error("job #%s: worker error: %r", job.id, exc)
                with contextlib.suppress(CoordinatorError):
                    self.client.result(job.id, "failed", error=f"worker error: {exc}")
            done += 1
        return done

    def run_job(self, job: JobInfo) -> str:
        job_id = job.id
        root = self.workdir / "jobs" / str(job_id)
        output_dir, job_dir = root / "output", root / "run"
        job_dir.mkdir(parents=True, exist_ok=True)
        self.client.heartbeat(job_id, logs=[f"{self.name}: starting on {self.info.describe()}"])
        try:
            spec = parse_spec(job.spec_yaml)
        except HipbotError as exc:
            self.client.result(job_id, "failed", error=str(exc))
            return "failed"
        reason = refusal(self.info, spec, None, allow_cpu=self.allow_cpu)
        if reason:
            self.client.result(job_id, "failed", error=f"{self.name} refused: {reason}", retry=True)
            return "refused"
        dataset_dir = Path(spec.dataset_dir)
        if job.attachment_name:
            dataset_dir = self._fetch_dataset(job_id, job.attachment_name, spec.dataset, root / "data")
        if job.checkpoint_step:
            self._fetch_checkpoint(job_id, job.checkpoint_step, output_dir)
        write_job(
            job_dir,
            spec,
            output_dir=output_dir,
            dataset_dir=dataset_dir,
            allow_remote_code=self.allow_remote_code,
            device="auto" if self.info.gpus else "cpu",
            resume=bool(job.checkpoint_step),
        )
        attempt = Attempt(uploaded=job.checkpoint_step or 0)

        def tick() -> None:
            now = time.monotonic()
            if now - attempt.beat < self.heartbeat_s:
                return
            attempt.beat = now
            lines, attempt.logs = attempt.logs, []
            try:
                reply = self.client.heartbeat(job_id, progress=attempt.progress, logs=lines)
            except CoordinatorError as exc:
                if exc.status in (403, 404):
                    attempt.stop = "lost"  # the lease went to another worker
                return
            if reply.cancel:
                attempt.stop = "cancelled"
                return
            self._upload_new_checkpoint(job_id, output_dir, attempt)

        def on_progress(line: dict[str, Any]) -> None:
            try:
                attempt.progress = Progress.model_validate(line)
            except ValidationError:
                log.warning("job #%s: unreadable progress line %r", job_id, line)

        result = run_child(
            job_dir,
            spec,
            max(1, self.info.count),
            on_progress=on_progress,
            on_output=lambda lines: attempt.logs.extend(lines),
            on_tick=tick,
            should_stop=lambda: attempt.stop,
            env=None,
            preexec=_die_with_parent,
        )
        if attempt.stop == "lost":
            log.warning("job #%s: lease lost, stopped", job_id)
            return "lost"
        with contextlib.suppress(CoordinatorError):
            if attempt.logs:
                self.client.post_logs(job_id, attempt.logs[-500:])
        if result.state == "succeeded":
            with tempfile.TemporaryDirectory() as tmp:
                archive = pack(output_dir, Path(tmp) / "adapter.tar.gz", skip_checkpoints=True)
                self.client.upload(job_id, "adapter", archive)
            self.client.result(job_id, "succeeded", metrics=result.metrics)
        elif result.state == "cancelled":
            self.client.result(job_id, "cancelled", error="cancelled by request")
        else:
            self.client.result(job_id, "failed", error=result.error)
        log.info("job #%s: %s", job_id, result.state)
        return result.state

    # ------------------------------------------------------------------ files
    def _fetch_dataset(self, job_id: int, name: str, names: list[str], folder: Path) -> Path:
        name = Path(name).name
        dest = folder / name
        self.client.download(job_id, "dataset", dest)
        rows = check_attachment(dest.read_bytes(), name)
        entry = attachment_entry(name, rows)
        info = {Path(name).stem: entry, **{n: entry for n in names}}
        (folder / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
        return folder

    def _fetch_checkpoint(self, job_id: int, step: int, output_dir: Path) -> None:
        """The job's last checkpoint from the coordinator, unpacked within limits and rebuilt from
        its safetensors and JSON (``portable``): nothing received is unpickled."""
        local = last_checkpoint(output_dir)
        if local is not None and int(local.name.split("-")[-1]) >= step:
            return
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "checkpoint.tar.gz"
            self.client.download(job_id, "checkpoint", archive)
            received = Path(tmp) / "received"
            extract(archive, received, ArchiveLimits())
            dest = output_dir / f"checkpoint-{step}"
            shutil.rmtree(dest, ignore_errors=True)
            import_checkpoint(received, dest)

    def _upload_new_checkpoint(self, job_id: int, output_dir: Path, attempt: Attempt) -> None:
        """Send the newest checkpoint in the portable format (safetensors and JSON only). One that
        cannot be carried so is skipped (the job resumes from an earlier one, or from the start)."""
        ckpt = last_checkpoint(output_dir)
        if ckpt is None:
            return
        step = int(ckpt.name.split("-")[-1])
        if step <= attempt.uploaded:
            return
        with tempfile.TemporaryDirectory() as tmp:
            try:
                export_checkpoint(ckpt, Path(tmp) / "portable")
            except NotPortable as exc:
                log.warning("job #%s: checkpoint-%s not uploaded: %s", job_id, step, exc)
                attempt.logs.append(f"checkpoint-{step} not uploaded: {exc.message}")
                attempt.uploaded = step
                return
            archive = pack(Path(tmp) / "portable", Path(tmp) / "checkpoint.tar.gz")
            self.client.upload(job_id, "checkpoint", archive, step=step)
        attempt.uploaded = step
