"""What the repair rules share: the unit being repaired, a fix (an edit with its reason and doc
source, or compiler flags), the diagnostics' patterns and the include lines the rules insert."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.hipify.cpp_tokens import COMMENT, tokenize
from hipbot.agents.port import rocm
from hipbot.agents.port.compiler import Diag


@dataclass
class UnitState:
    root: Path  # the ported tree
    source: Path  # the unit, relative to root
    args: list[str]
    rocm: tuple[int, int]
    files_by_name: dict[str, list[Path]] = field(default_factory=dict)


@dataclass(frozen=True)
class Fix:
    rule: str
    reason: str
    doc: str
    file: Path | None = None  # relative to root
    edit: Callable[[str], str] | None = None
    add_args: tuple[str, ...] = ()
    new_files: tuple[tuple[Path, str], ...] = ()


NOT_FOUND = re.compile(r"'([^']+)' file not found")
UNDECLARED = re.compile(
    r"use of undeclared identifier '([^']+)'|no (?:template|type|member) named '([^']+)' in namespace '([^']+)'"
    r"|unknown type name '([^']+)'|no matching function for call to '([^']+)'"
)
NO_MEMBER = re.compile(r"no member named '([^']+)' in '(?:struct )?([^']+)'")
INCLUDE_LINE = r'^[ \t]*#[ \t]*include[ \t]*[<"]{}[>"][^\n]*\n?'


def project_file(diag: Diag, state: UnitState) -> Path | None:
    """The file of the ported tree a diagnostic is in (relative to root), None for HIP's or the
    system's headers: the only files a rule may edit."""
    file = Path(diag.file)
    return None if file.is_absolute() or not (state.root / file).is_file() else file


def shim_include(state: UnitState, file: Path, shim: str = rocm.SHIM_NAME) -> str:
    rel = os.path.relpath(state.root / shim, (state.root / file).parent)
    return f'#include "{rel}"'


_CODE_LINE = re.compile(r"^[ \t]*(?!#|//|/\*|\*|$)\S", re.M)


def insert_after_hip_include(text: str, line: str) -> str:
    """``line`` after the HIP includes at the head of the file (before its first line of code: a
    HIP header included further down comes after code that may need the shim), else first."""
    if line in text:
        return text
    found = list(re.finditer(r'^[ \t]*#[ \t]*include[ \t]*[<"]hip/[^\n]*\n', text, re.M))
    code = _CODE_LINE.search(text)
    head = [m for m in found if code is None or m.end() <= code.start()]
    if head or found:
        at = (head or found[:1])[-1].end()
    else:
        m = re.search(r"^[ \t]*#[ \t]*include[^\n]*\n", text, re.M)
        at = m.start() if m else 0
    return text[:at] + line + "\n" + text[at:]


def closing_paren(text: str, open_paren: int) -> int | None:
    """The offset of the ``)`` closing the ``(`` at ``open_paren`` (strings, characters and
    comments skipped by the tokenizer), None when the text ends first."""
    depth = 0
    for tok in tokenize(text, open_paren):
        if tok.text in ("(", "[", "{"):
            depth += 1
        elif tok.text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return tok.start
    return None


def split_top(text: str, start: int, end: int, sep: str) -> list[str]:
    """``text[start:end]`` split at the ``sep`` tokens outside brackets, strings and comments
    (``::`` counts as two ``:``)."""
    parts, depth, last = [], 0, start
    for tok in tokenize(text, start):
        if tok.start >= end:
            break
        if tok.kind == COMMENT:
            continue
        if tok.text in ("(", "[", "{"):
            depth += 1
        elif tok.text in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and tok.text in (sep, sep * 2):
            for k in range(len(tok.text)):
                parts.append(text[last : tok.start + k])
                last = tok.start + k + 1
    parts.append(text[last:end])
    return parts
