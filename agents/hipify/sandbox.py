"""Run hipcc on untrusted source inside an OS sandbox (bubblewrap), under CPU, memory and time limits.

What the compiler can see is decided by the mounts, not by reading the source: a fresh root with
only the toolchain (``/usr/bin``, ``/usr/lib``, ``/usr/include``, perl's modules, a ROCm prefix
outside ``/usr``), the folders the caller names (read-only, or writable for outputs), an empty
``/tmp`` and a minimal ``/dev``. No ``/etc``, ``/home``, ``/root``, ``/proc`` or the repository;
no network and fresh IPC/PID/UTS/cgroup/user namespaces (``--unshare-all``), every capability
dropped, no nested user namespaces, no environment but a few variables. So ``#include`` in any
spelling (``%:include``, ``??=include``, ``#/**/include``, a backslash-newline, a macro) and
``__has_include`` find nothing outside those folders: a host file is "not found" whether or not it
exists. Limits: ``prlimit`` (CPU seconds, address space, file size, open files, no core dumps) on
the whole sandbox, a size-capped ``/tmp``, and a wall-clock limit that kills it.

Without a working ``bwrap`` nothing runs: :class:`SandboxUnavailable` says what to install.
``run_hipcc`` is the entry point for every caller (``hipify --check``, the bot's ``/hipify``, the
porting agent).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.errors import HipbotError
from hipbot.i18n import N_

log = logging.getLogger(__name__)

# The toolchain as Debian/Ubuntu package it (hipcc is a perl script that runs /usr/lib/llvm-N's
# clang on /usr/include/hip); a ROCm prefix elsewhere (/opt/rocm-X) is added from hipcc's path.
SYSTEM_READABLE = (
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/include",
    "/usr/share/perl",
    "/usr/share/perl5",
    "/usr/share/hip",
)
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")
_PASSED_ENV = ("ROCM_PATH", "HIP_PATH", "HIP_CLANG_PATH", "HIP_DEVICE_LIB_PATH")
SANDBOX_TMP = "/tmp"


class SandboxUnavailable(HipbotError):
    """bubblewrap (or prlimit) is missing or cannot create namespaces: untrusted code is not compiled."""

    http_status = 503


class CompilerMissing(HipbotError):
    """hipcc is not installed."""

    http_status = 503


@dataclass(frozen=True)
class Limits:
    seconds: float = 60.0  # wall clock; the whole sandbox is killed after it
    cpu_seconds: int = 120  # RLIMIT_CPU of each process
    memory_bytes: int = 4 << 30  # RLIMIT_AS of each process
    file_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file written
    open_files: int = 512  # RLIMIT_NOFILE
    tmp_bytes: int = 256 << 20  # size of the sandbox's /tmp (a tmpfs)
    output_bytes: int = 1 << 20  # compiler output kept (the rest is cut)


@dataclass
class SandboxRun:
    command: list[str]  # the command as run inside the sandbox
    returncode: int | None  # None when the time limit killed it
    output: str  # stdout and stderr together, at most Limits.output_bytes
    seconds: float
    timed_out: bool = False
    mounts: list[str] = field(default_factory=list)  # the folders it could see (read-only or writable)


def find_hipcc() -> str | None:
    return os.environ.get("HIPBOT_HIPCC") or shutil.which("hipcc")


def find_bwrap() -> str | None:
    return os.environ.get("HIPBOT_BWRAP") or shutil.which("bwrap")


_INSTALL_HINT = N_("install bubblewrap (apt-get install bubblewrap, or bash deploy/install.sh)")


def toolchain_readable(hipcc: str) -> list[str]:
    """Folders hipcc needs to read: the system toolchain, plus its own prefix and the ROCm folders
    named in the environment when they are elsewhere (``/opt/rocm-6.3``)."""
    extra = [os.path.dirname(os.path.dirname(os.path.realpath(hipcc)))]
    extra += [os.environ[v] for v in _PASSED_ENV if os.environ.get(v)]
    out = [p for p in SYSTEM_READABLE if os.path.isdir(p)]
    for path in extra:
        for p in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.isdir(p) and p not in out and not _under(p, "/usr") and p != "/":
                out.append(p)
    return out


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mount_args(readable: Sequence[str], writable: Sequence[str], limits: Limits) -> list[str]:
    args = ["--size", str(limits.tmp_bytes), "--tmpfs", SANDBOX_TMP, "--dev", "/dev"]
    for link in _ROOT_LINKS:  # merged-/usr systems: /lib -> usr/lib
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    # parents before children, so that a writable folder inside a readable one stays writable
    binds = [(os.path.abspath(p), "--ro-bind") for p in readable]
    binds += [(os.path.abspath(p), "--bind") for p in writable]
    for path, flag in sorted(binds, key=lambda b: (b[0].count("/"), b[1] == "--bind")):
        args += [flag, path, path]
    return args


def _env_args(hipcc_env: bool) -> list[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_TMP, "TMPDIR": SANDBOX_TMP, "LANG": "C"}
    if hipcc_env:
        env["HIP_PLATFORM"] = "amd"  # hipcc would pick nvcc where /usr/local/cuda exists
        env.update({v: os.environ[v] for v in _PASSED_ENV if os.environ.get(v)})
    out = ["--clearenv"]
    for key, value in env.items():
        out += ["--setenv", key, value]
    return out


def _prefix(limits: Limits, bwrap: str) -> list[str]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable(
            N_("prlimit is missing, so the compiler's limits cannot be set"),
            hint=N_("apt-get install util-linux"),
        )
    return [
        prlimit,
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
    ]


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    """None when bwrap can build the sandbox here, else its complaint."""
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    cmd += _mount_args([p for p in SYSTEM_READABLE if os.path.isdir(p)], [], Limits()) + ["--", "true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit status {proc.returncode}")


def require_sandbox() -> str:
    """The bwrap executable, checked to work here; else :class:`SandboxUnavailable`."""
    bwrap = find_bwrap()
    if bwrap is None or not os.access(bwrap, os.X_OK):
        raise SandboxUnavailable(
            N_("the compile check runs hipcc only inside a bubblewrap sandbox, and bwrap is not installed"),
            hint=_INSTALL_HINT,
        )
    problem = _probe(bwrap)
    if problem is not None:
        raise SandboxUnavailable(
            N_("bubblewrap cannot create its sandbox here: {problem}", problem=problem),
            hint=N_(
                "user namespaces must be allowed (sysctl kernel.unprivileged_userns_clone=1) or run as root"
            ),
        )
    return bwrap


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_sandboxed(
    argv: Sequence[str],
    workdir: str | Path,
    readable: Sequence[str | Path] = (),
    writable: Sequence[str | Path] = (),
    limits: Limits = Limits(),
    hipcc_env: bool = False,
) -> SandboxRun:
    """``argv`` in ``workdir`` inside the sandbox; folders keep their host paths inside it, so paths
    in the output mean the same outside. Only the system toolchain, ``readable`` (read-only) and
    ``writable`` exist there; ``workdir`` must be one of them or inside one."""
    bwrap = require_sandbox()
    workdir = os.path.abspath(workdir)
    ro = [str(p) for p in readable]
    rw = [str(p) for p in writable]
    if not any(_under(workdir, os.path.abspath(p)) for p in ro + rw):
        ro.append(workdir)
    ro = [p for p in SYSTEM_READABLE if os.path.isdir(p)] + [p for p in ro if p not in SYSTEM_READABLE]
    cmd = _prefix(limits, bwrap) + _mount_args(ro, rw, limits) + _env_args(hipcc_env)
    cmd += ["--chdir", workdir, "--", *argv]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env={},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=limits.seconds)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    text = out[: limits.output_bytes].decode("utf-8", "replace")
    log.debug("sandboxed %s: status %s in %.1fs", argv[0], proc.returncode, seconds)
    return SandboxRun(
        list(argv), None if timed_out else proc.returncode, text, seconds, timed_out, sorted(set(ro + rw))
    )


def run_hipcc(
    args: Sequence[str],
    workdir: str | Path,
    readable: Sequence[str | Path] = (),
    writable: Sequence[str | Path] = (),
    limits: Limits = Limits(),
) -> SandboxRun:
    """``hipcc ARGS`` in ``workdir`` inside the sandbox (see :func:`run_sandboxed`), with the
    toolchain's folders readable. Raises :class:`CompilerMissing` or :class:`SandboxUnavailable`."""
    require_sandbox()  # the first precondition: nothing is compiled outside it
    hipcc = find_hipcc()
    if hipcc is None or not os.access(hipcc, os.X_OK):
        raise CompilerMissing(
            N_("hipcc is not installed (no {hipcc})", hipcc=hipcc) if hipcc else N_("hipcc is not installed"),
            hint=N_("apt-get install hipcc libamdhip64-dev"),
        )
    readable = [*toolchain_readable(hipcc), *readable]
    return run_sandboxed([hipcc, *args], workdir, readable, writable, limits, hipcc_env=True)
