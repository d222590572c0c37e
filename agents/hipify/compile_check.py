"""Compile translated HIP with the real ``hipcc -fsyntax-only`` for an AMD target.

The source is untrusted (pasted into a chat): it is compiled alone in a fresh temporary directory,
inside the sandbox of :mod:`sandbox` (only that directory, the toolchain and the caller's include
folders exist there; no network; CPU, memory and time limits), whatever its includes say.
Only diagnostics about the snippet's own lines are reported, mapped back to the translated text.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from hipbot.agents.hipify.sandbox import CompilerMissing, Limits, SandboxUnavailable, find_hipcc, run_hipcc
from hipbot.i18n import _, ngettext

ARCH_RE = re.compile(r"^gfx[0-9a-f]{2,5}(?::[a-z0-9]+[+-])*$")
_DIAG_RE = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
# the driver's own complaints (a flag it refuses), which name no file
_DRIVER_RE = re.compile(r"^(?:clang(?:-\d+)?|clang\+\+(?:-\d+)?|hipcc|lld|ld\.lld): (?:error|fatal error): ")
MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_DIAGNOSTICS = 200
SOURCE_NAME = "input.hip"
_INCLUDED_RE = re.compile(rf"^In file included from {re.escape(SOURCE_NAME)}:(?P<line>\d+):")
__all__ = ["ARCH_RE", "CheckResult", "Diagnostic", "check", "compiler_args", "find_hipcc", "own_diagnostics"]


@dataclass(frozen=True)
class Diagnostic:
    line: int
    col: int
    severity: str  # "error", "warning", "note"
    message: str
    source_line: str  # the translated line it points at ("" for system headers)
    file: str = SOURCE_NAME

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"


@dataclass
class CheckResult:
    ok: bool  # compiled without errors
    arch: str
    available: bool = True  # False when hipcc is not installed
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None  # refused input, timeout, missing compiler
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "arch": self.arch,
            "available": self.available,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }

    def summary(self) -> str:
        """One line for people, in the current language (``to_dict`` is never translated)."""
        if self.error:
            return f"hipcc check ({self.arch}): {self.error}"
        n_err = len(self.errors)
        n_warn = sum(d.severity == "warning" for d in self.diagnostics)
        errors = ngettext("{n} error", "{n} errors", n_err).format(n=n_err)
        warnings = ngettext("{n} warning", "{n} warnings", n_warn).format(n=n_warn)
        state = _("OK") if self.ok else _("FAILED")
        took = _("{state}, {errors}, {warnings} in {seconds:.1f}s").format(
            state=state, errors=errors, warnings=warnings, seconds=self.seconds
        )
        return f"hipcc check ({self.arch}): {took}"


_PASSED_ON = ("-I", "-D", "-U", "-std=", "-isystem", "-include", "-iquote")


def compiler_args(clang_args: Sequence[str]) -> list[str]:
    """The hipcc-worthy part of hipify-clang's trailing clang arguments (``-- -I inc -DFOO``):
    include paths, macros and the language standard; CUDA-only ones (``--cuda-path``, ``-x cuda``)
    are dropped. A flag given apart from its value (``-I inc``) is joined to it, folders made
    absolute (hipcc runs in a temporary folder)."""
    out: list[str] = []
    it = iter(clang_args)
    for arg in it:
        if arg in ("-I", "-D", "-U", "-isystem", "-include", "-iquote"):
            value = next(it, None)
            if value is None:
                break
            if arg in ("-I", "-isystem", "-iquote"):
                out.append(arg + os.path.abspath(value))
            elif arg == "-include":
                out += [arg, value]
            else:
                out.append(arg + value)
        elif arg.startswith(("-I", "-isystem", "-iquote")) and not arg.startswith("-include"):
            flag = "-I" if arg.startswith("-I") else ("-isystem" if arg.startswith("-isystem") else "-iquote")
            out.append(flag + os.path.abspath(arg[len(flag) :]))
        elif arg.startswith(_PASSED_ON):
            out.append(arg)
    return out


def check(
    hip_source: str,
    arch: str = "gfx90a",
    timeout: float = 60,
    include_dirs: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> CheckResult:
    """``hipcc -fsyntax-only --offload-arch=ARCH`` on the text, sandboxed; never raises for bad input.

    ``include_dirs``/``extra_args`` (``-D``, ``-U``, ``-std=``...) are for the local CLI checking a
    project's own files: those folders are then readable in the sandbox too."""
    if not ARCH_RE.match(arch):
        return CheckResult(
            False, arch, error=f"not an AMD GPU target: {arch!r} (expected e.g. gfx90a, gfx942, gfx1100)"
        )
    if len(hip_source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return CheckResult(False, arch, error="source too large to compile-check (limit 2 MiB)")
    includes = [os.path.abspath(d) for d in include_dirs]
    args = [f"--offload-arch={arch}", "-fsyntax-only", *(f"-I{d}" for d in includes), *extra_args]
    args += ["-x", "hip", SOURCE_NAME]
    with tempfile.TemporaryDirectory(prefix="hipbot-check-") as tmp:
        with open(os.path.join(tmp, SOURCE_NAME), "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(hip_source)
        try:
            run = run_hipcc(args, tmp, readable=[tmp, *includes], limits=Limits(seconds=timeout))
        except (CompilerMissing, SandboxUnavailable) as exc:
            return CheckResult(False, arch, available=False, error=str(exc))
    command = ["hipcc", *args]
    if run.timed_out:
        return CheckResult(
            False, arch, error=f"hipcc took longer than {timeout:g}s", seconds=run.seconds, command=command
        )
    diagnostics = own_diagnostics(run.output, hip_source.splitlines())
    has_error = any(d.severity == "error" for d in diagnostics)
    ok = run.returncode == 0 and not has_error
    error = None
    if run.returncode != 0 and not has_error:
        driver = [ln for ln in run.output.splitlines() if _DRIVER_RE.match(ln)]
        error = f"hipcc exited with status {run.returncode}" + (
            ": " + " | ".join(driver[-3:]) if driver else ""
        )
    return CheckResult(ok, arch, True, diagnostics, error, run.seconds, command)


def own_diagnostics(output: str, src_lines: Sequence[str]) -> list[Diagnostic]:
    """hipcc's diagnostics about the snippet's own lines, each once (host and device passes repeat
    them). One about another file is not quoted: its error is reported at the snippet's
    ``#include`` line that led to it, and its notes and warnings are left out."""
    diagnostics: list[Diagnostic] = []
    seen: set[tuple] = set()
    included_at = 0  # the snippet's line whose include led to the next diagnostic
    for raw in output.splitlines():
        inc = _INCLUDED_RE.match(raw)
        if inc:
            included_at = included_at or int(inc["line"])
            continue
        m = _DIAG_RE.match(raw)
        if not m:
            continue
        sev = "error" if m["sev"] == "fatal error" else m["sev"]
        if m["file"] == SOURCE_NAME:
            line, col, msg = int(m["line"]), int(m["col"]), m["msg"]
        elif sev == "error" and included_at:
            line, col, msg = included_at, 1, "error inside a header included here (not shown)"
        else:
            included_at = 0
            continue
        included_at = 0
        if (line, col, sev, msg) in seen:
            continue
        seen.add((line, col, sev, msg))
        src = src_lines[line - 1].strip() if 0 < line <= len(src_lines) else ""
        diagnostics.append(Diagnostic(line, col, sev, msg, src))
        if len(diagnostics) >= MAX_DIAGNOSTICS:
            break
    return diagnostics
