"""The port loop on one pasted snippet, for the bot's "Try to make it compile" button: the snippet is
kept under ``$HIPBOT_HOME/port-snippets`` by the hash of its text (a button's id carries only the
key, and a click works after a restart), then ported as a one-file project in a temporary folder,
sandboxed as ``hipbot port`` is."""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.port.pipeline import PortOptions, port
from hipbot.agents.port.report import Edit
from hipbot.agents.port.tree import read_text
from hipbot.errors import HipbotError, NotFound
from hipbot.i18n import N_

MAX_SNIPPET_BYTES = 1024 * 1024
SNIPPET_DIR = "port-snippets"
_KEY = re.compile(r"^[0-9a-f]{16}$")


def remember(code: str, home: Path) -> str:
    """Keep a snippet for a later click; its key (16 hex digits)."""
    data = code.encode("utf-8", "surrogateescape")
    if len(data) > MAX_SNIPPET_BYTES:
        raise HipbotError(
            N_("the snippet is over {limit} KiB", limit=MAX_SNIPPET_BYTES // 1024),
            hint=N_("run `hipbot port` locally"),
        )
    key = hashlib.sha256(data).hexdigest()[:16]
    folder = home / SNIPPET_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.cu").write_bytes(data)
    return key


def recall(key: str, home: Path) -> str:
    if not _KEY.match(key):
        raise HipbotError(N_("not a snippet key: {key!r}", key=key))
    path = home / SNIPPET_DIR / f"{key}.cu"
    if not path.is_file():
        raise NotFound(
            N_("snippet {key} is not kept any more", key=key), hint=N_("run /hipify with the code again")
        )
    return read_text(path)


@dataclass
class SnippetPort:
    compiled: bool
    stage: str  # translation | rules | model
    cause: str | None
    edits: list[Edit] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    text: str = ""  # the HIP text after the repairs
    headers: dict[str, str] = field(default_factory=dict)  # shims the repairs include, by file name

    @property
    def diff(self) -> str:
        return "\n".join(e.diff for e in self.edits)


def port_snippet(code: str, arch: str = "gfx90a", rocm: str = "auto", timeout: float = 60.0) -> SnippetPort:
    """Translate and repair one CUDA snippet until it compiles (or say why it does not)."""
    if not code.strip():
        raise HipbotError(N_("there is no code to port"))
    with tempfile.TemporaryDirectory(prefix="hipbot-snippet-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        (src / "snippet.cu").write_bytes(code.encode("utf-8", "surrogateescape"))
        report = port(src, Path(tmp) / "out", PortOptions(arch=arch, rocm=rocm, timeout=timeout, jobs=1))
        (unit,) = report.units
        out = Path(tmp) / "out"
        out_file = out / unit.output
        text = read_text(out_file) if out_file.is_file() else ""
        # What the repairs added beside the unit (hip_compat.h and other shims) travels with it.
        extra = {
            p.relative_to(out).as_posix(): read_text(p)
            for p in sorted(out.rglob("*"))
            if p.is_file() and p != out_file and p.suffix in (".h", ".hpp", ".cuh")
        }
    return SnippetPort(
        unit.status == "compiled",
        unit.stage,
        unit.cause.text if unit.cause else None,
        unit.edits,
        unit.errors,
        text,
        extra,
    )
