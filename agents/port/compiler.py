"""Compile one translation unit of a ported tree with hipcc, sandboxed as ``hipify --check`` is.

The unit is compiled where it was written (so the command and folder in the report can be run
again as they are), inside bubblewrap (``hipify.sandbox.run_hipcc``): only the toolchain and the
ported tree exist there, with CPU, memory and wall-clock limits, so no spelling of an include
reaches a host file. Includes that climb out of the project (an absolute path, ``..`` above it)
are also screened first, so the report names them instead of a "file not found".
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.hipify.compile_check import find_hipcc
from hipbot.agents.hipify.sandbox import Limits, run_hipcc
from hipbot.errors import HipbotError

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

    def limits(self) -> Limits:
        """The sandbox's limits for one hipcc run on a unit."""
        return Limits(seconds=self.timeout, cpu_seconds=int(self.timeout) * 2 + 10, memory_bytes=8 << 30)


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


def command_for(
    source: Path, root: Path, args: list[str], settings: CompileSettings, hipcc: str
) -> list[str]:
    """The hipcc argument list for a unit (paths relative to the unit's folder)."""
    mode = ["-c", "-o", "unit.o"] if settings.build else ["-fsyntax-only"]
    return [hipcc, f"--offload-arch={settings.arch}", *mode, *args, "-x", "hip", source.name]


def compile_unit(source: Path, root: Path, args: list[str], settings: CompileSettings) -> CompileResult:
    """hipcc on ``root/source`` with ``args`` (include folders relative to the unit's folder), in
    the compile check's OS sandbox: only the toolchain and the ported tree are readable, whatever
    the sources include (a pasted snippet from the bot's button is a stranger's code)."""
    cwd = (root / source).parent
    hipcc = find_hipcc()
    if hipcc is None:
        return CompileResult(False, [], str(cwd), error="hipcc is not installed (apt install hipcc)")
    cmd = command_for(source, root, args, settings, hipcc)
    with tempfile.TemporaryDirectory(prefix="hipbot-port-") as tmp:
        if settings.build:
            cmd[cmd.index("unit.o")] = os.path.join(tmp, "unit.o")
        try:
            run = run_hipcc(cmd[1:], cwd, readable=[root.resolve()], writable=[tmp], limits=settings.limits())
        except HipbotError as exc:  # no sandbox (bwrap) or no compiler: said, not raised per unit
            return CompileResult(False, cmd, str(cwd), error=str(exc))
    if run.timed_out:
        return CompileResult(
            False, cmd, str(cwd), error=f"hipcc took longer than {settings.timeout:g}s", seconds=run.seconds
        )
    text = run.output
    diags = parse_diagnostics(text, cwd, root)
    has_error = any(d.severity == "error" for d in diags)
    ok = run.returncode == 0 and not has_error
    error = None
    if run.returncode != 0 and not has_error:
        error = "hipcc exited with status {}: {}".format(
            run.returncode, " | ".join(text.strip().splitlines()[-3:])
        )
    return CompileResult(ok, cmd, str(cwd), diags, error, run.seconds, text)


def preprocess_unit(source: Path, root: Path, args: list[str], settings: CompileSettings) -> str | None:
    """The unit preprocessed for the host and the device (``hipcc -E``, sandboxed like a compile):
    what the compiler sees once ``#if`` branches are taken; None when hipcc cannot do it."""
    cwd = (root / source).parent
    hipcc = find_hipcc()
    if hipcc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="hipbot-port-") as tmp:
        out = os.path.join(tmp, "unit.i")
        cmd = [hipcc, f"--offload-arch={settings.arch}", "-E", "-o", out, *args, "-x", "hip", source.name]
        try:
            run = run_hipcc(cmd[1:], cwd, readable=[root.resolve()], writable=[tmp], limits=settings.limits())
        except HipbotError:
            return None
        if run.timed_out or run.returncode != 0 or not os.path.isfile(out):
            return None
        return Path(out).read_text(encoding="utf-8", errors="replace")


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
