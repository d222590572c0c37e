"""Compile one translation unit of a ported tree with hipcc, sandboxed as ``hipify --check`` is.

The unit is compiled where it was written (so the command and folder in the report can be run
again as they are), with HOME/TMPDIR in a fresh temporary folder, a time limit that kills the whole
compiler process group, ``-I`` folders only inside the project, and every include of every project
file screened first: one that could reach a file outside the project and the system's include
paths (an absolute path, ``..`` climbing out of the project) refuses the unit before hipcc runs.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.hipify.compile_check import find_hipcc

log = logging.getLogger(__name__)

_DIAG_RE = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
_DRIVER_RE = re.compile(r"^(?:clang(?:-\d+)?: |hipcc: )?(?P<sev>error|fatal error): (?P<msg>.*)$")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
MAX_DIAGNOSTICS = 100


@dataclass(frozen=True)
class Diag:
    file: str  # relative to the project root when inside it
    line: int
    col: int
    severity: str
    message: str


@dataclass
class CompileResult:
    ok: bool
    command: list[str]
    cwd: str
    diagnostics: list[Diag] = field(default_factory=list)
    error: str | None = None  # refused, timeout, hipcc missing
    seconds: float = 0.0
    output: str = ""

    @property
    def errors(self) -> list[Diag]:
        return [d for d in self.diagnostics if d.severity == "error"]


@dataclass(frozen=True)
class CompileSettings:
    arch: str = "gfx90a"
    timeout: float = 120.0
    build: bool = False  # --build: compile to an object file (in the temporary folder)


def escaping_includes(root: Path, files: list[Path]) -> list[str]:
    """Includes in the project's files that could read outside it (absolute, or ``..`` out of root)."""
    problems: list[str] = []
    root = root.resolve()
    for f in files:
        try:
            text = f.read_text(encoding="latin-1")
        except OSError:
            continue
        for m in _INCLUDE.finditer(text):
            name = m.group(2).strip()
            if name.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", name):
                problems.append(f"{f.relative_to(root)}: include of absolute path '{name}'")
            elif ".." in name.replace("\\", "/").split("/"):
                target = os.path.normpath(f.parent / name)
                if not target.startswith(str(root) + os.sep):
                    problems.append(f"{f.relative_to(root)}: include of '{name}' outside the project")
    return problems


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def command_for(
    source: Path, root: Path, args: list[str], settings: CompileSettings, hipcc: str
) -> list[str]:
    """The hipcc argument list for a unit (paths relative to the unit's folder)."""
    mode = ["-c", "-o", "unit.o"] if settings.build else ["-fsyntax-only"]
    return [hipcc, f"--offload-arch={settings.arch}", *mode, *args, "-x", "hip", source.name]


def compile_unit(source: Path, root: Path, args: list[str], settings: CompileSettings) -> CompileResult:
    """hipcc on ``root/source`` with ``args`` (include folders relative to the unit's folder)."""
    cwd = (root / source).parent
    hipcc = find_hipcc()
    if hipcc is None:
        return CompileResult(False, [], str(cwd), error="hipcc is not installed (apt install hipcc)")
    cmd = command_for(source, root, args, settings, hipcc)
    with tempfile.TemporaryDirectory(prefix="hipbot-port-") as tmp:
        if settings.build:
            cmd[cmd.index("unit.o")] = os.path.join(tmp, "unit.o")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "TMPDIR": tmp,
            "HIP_PLATFORM": "amd",
            "LANG": "C",
        }
        for var in ("ROCM_PATH", "HIP_PATH", "HIP_CLANG_PATH", "HIP_DEVICE_LIB_PATH"):
            if var in os.environ:
                env[var] = os.environ[var]
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return CompileResult(False, cmd, str(cwd), error=f"cannot run hipcc: {exc.strerror}")
        try:
            out, _ = proc.communicate(timeout=settings.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return CompileResult(
                False, cmd, str(cwd), error=f"hipcc took longer than {settings.timeout:g}s",
                seconds=time.monotonic() - start,
            )  # fmt: skip
    text = out.decode("utf-8", "replace")
    diags = parse_diagnostics(text, cwd, root)
    has_error = any(d.severity == "error" for d in diags)
    ok = proc.returncode == 0 and not has_error
    error = None
    if proc.returncode != 0 and not has_error:
        error = "hipcc exited with status {}: {}".format(
            proc.returncode, " | ".join(text.strip().splitlines()[-3:])
        )
    return CompileResult(ok, cmd, str(cwd), diags, error, time.monotonic() - start, text)


def parse_diagnostics(text: str, cwd: Path, root: Path) -> list[Diag]:
    diags: list[Diag] = []
    seen: set[tuple] = set()
    for raw in text.splitlines():
        m = _DIAG_RE.match(raw)
        if not m:
            d = _DRIVER_RE.match(raw)
            if d:  # the driver's own errors (a flag it refuses): no file, no line
                diags.append(Diag("<hipcc>", 0, 0, "error", d["msg"]))
            continue
        path = Path(os.path.normpath(cwd / m["file"]))
        try:
            file = str(path.relative_to(root.resolve()))
        except ValueError:
            file = m["file"]
        sev = "error" if m["sev"] == "fatal error" else m["sev"]
        key = (file, m["line"], m["col"], sev, m["msg"])
        if key in seen:
            continue
        seen.add(key)
        diags.append(Diag(file, int(m["line"]), int(m["col"]), sev, m["msg"]))
        if len(diags) >= MAX_DIAGNOSTICS:
            break
    return diags
