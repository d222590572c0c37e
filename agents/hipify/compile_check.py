"""Compile translated HIP with the real ``hipcc -fsyntax-only`` for an AMD target.

The source is untrusted (pasted into a chat): it is compiled alone in a fresh temporary directory,
with a time limit that kills the whole compiler process group, and includes that could read files
outside that directory (absolute paths, ``..``, macro-computed names) are refused before hipcc runs.
Diagnostics are mapped back to lines of the translated text.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from hipbot.agents.hipify.cpp_tokens import DIRECTIVE, INCLUDE, LineIndex, include_target, tokenize

ARCH_RE = re.compile(r"^gfx[0-9a-f]{2,5}(?::[a-z0-9]+[+-])*$")
_DIAG_RE = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_DIAGNOSTICS = 200
SOURCE_NAME = "input.hip"


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
        if self.error:
            return f"hipcc check ({self.arch}): {self.error}"
        n_err = len(self.errors)
        n_warn = sum(d.severity == "warning" for d in self.diagnostics)
        state = "OK" if self.ok else "FAILED"
        return f"hipcc check ({self.arch}): {state}, {n_err} error(s), {n_warn} warning(s) in {self.seconds:.1f}s"


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


def find_hipcc() -> str | None:
    return os.environ.get("HIPBOT_HIPCC") or shutil.which("hipcc")


def unsafe_includes(source: str) -> list[str]:
    """Reasons to refuse: includes that could reach files outside the sandbox directory."""
    problems = []
    lines = LineIndex(source)
    for tok in tokenize(source, comments=False):
        if tok.kind == INCLUDE:
            name, _angled, _ = include_target(tok.text)
            parts = name.replace("\\", "/").split("/")
            if name.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
                problems.append(
                    f"line {lines.position(tok.start)[0]}: include of '{name}' outside the snippet"
                )
        elif tok.kind == DIRECTIVE:
            word = tok.text.split("#", 1)[1].strip()
            if word in ("include", "include_next", "import", "embed"):
                problems.append(f"line {lines.position(tok.start)[0]}: computed #{word} is not allowed")
    return problems


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def check(
    hip_source: str,
    arch: str = "gfx90a",
    timeout: float = 60,
    include_dirs: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> CheckResult:
    """``hipcc -fsyntax-only --offload-arch=ARCH`` on the text; never raises for bad input.

    ``include_dirs``/``extra_args`` (``-D``, ``-U``, ``-std=``...) are for the local CLI checking a
    project's own files: the project's headers are then found, and includes are not screened
    (the screening is for text pasted into a chat, which gets neither)."""
    if not ARCH_RE.match(arch):
        return CheckResult(
            False, arch, error=f"not an AMD GPU target: {arch!r} (expected e.g. gfx90a, gfx942, gfx1100)"
        )
    if len(hip_source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return CheckResult(False, arch, error="source too large to compile-check (limit 2 MiB)")
    problems = [] if include_dirs or extra_args else unsafe_includes(hip_source)
    if problems:
        return CheckResult(False, arch, error="refused: " + "; ".join(problems))
    hipcc = find_hipcc()
    if hipcc is None:
        return CheckResult(False, arch, available=False, error="hipcc is not installed (apt install hipcc)")
    src_lines = hip_source.splitlines()
    with tempfile.TemporaryDirectory(prefix="hipbot-check-") as tmp:
        path = os.path.join(tmp, SOURCE_NAME)
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(hip_source)
        includes = [f"-I{os.path.abspath(d)}" for d in include_dirs]
        cmd = [
            hipcc,
            f"--offload-arch={arch}",
            "-fsyntax-only",
            *includes,
            *extra_args,
            "-x",
            "hip",
            SOURCE_NAME,
        ]
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
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return CheckResult(
                False, arch, available=False, error=f"cannot run hipcc: {exc.strerror}", command=cmd
            )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return CheckResult(
                False,
                arch,
                error=f"hipcc took longer than {timeout:g}s",
                seconds=time.monotonic() - start,
                command=cmd,
            )
        seconds = time.monotonic() - start
    text = out.decode("utf-8", "replace")
    diagnostics: list[Diagnostic] = []
    seen: set[tuple] = set()
    for raw in text.splitlines():
        m = _DIAG_RE.match(raw)
        if not m:
            continue
        file = m["file"]
        line, col = int(m["line"]), int(m["col"])
        sev = "error" if m["sev"] == "fatal error" else m["sev"]
        key = (file, line, col, sev, m["msg"])
        if key in seen:
            continue  # host and device passes report the same problem twice
        seen.add(key)
        ours = os.path.basename(file) == SOURCE_NAME
        src = src_lines[line - 1].strip() if ours and 0 < line <= len(src_lines) else ""
        diagnostics.append(Diagnostic(line, col, sev, m["msg"], src, SOURCE_NAME if ours else file))
        if len(diagnostics) >= MAX_DIAGNOSTICS:
            break
    has_error = any(d.severity == "error" for d in diagnostics)
    ok = proc.returncode == 0 and not has_error
    error = None
    if proc.returncode != 0 and not has_error:
        tail = "\n".join(text.strip().splitlines()[-5:])
        error = f"hipcc exited with status {proc.returncode}: {tail}"
    return CheckResult(ok, arch, True, diagnostics, error, seconds, cmd)
