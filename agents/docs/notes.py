"""Porting notes: what maintainers answered in GitHub issues and discussions, for the questions
people keep asking that the docs do not answer (running on a GPU ROCm does not list, the half
header, hipify-clang's options, PyTorch's allocator settings on ROCm ...).

A note is one Markdown file: a ``# title``, a short answer, and one or more ``Source: <url>``
lines naming the thread it comes from. hipbot ships its own notes (``agents/docs/notes/``) and
ingests them beside the docs; a maintainer adds more in a folder of their own (``HIPBOT_NOTES``),
for instance after ``hipbot answers feedback`` shows a question the docs cannot answer. A note
is cited with its source thread, like a doc page with its upstream URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hipbot.errors import HipbotError
from hipbot.i18n import N_

NOTES_DIR = Path(__file__).parent / "notes"
PACKAGED = "notes"  # the corpus path of a packaged note: notes/<file>.md
LOCAL = "notes/local"  # ... and of a maintainer's own: notes/local/<file>.md
MAX_NOTE_BYTES = 8_000  # a note is a short answer, not a page

_SOURCE = re.compile(r"^Source:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_URL = re.compile(r"https://[\w.-]+\.[a-z]{2,}/\S*")
_TITLE = re.compile(r"\A\s*# \S")


@dataclass(frozen=True)
class Note:
    rel: str  # its path in the database, under notes/
    title: str
    body: str  # the Markdown without its Source lines: what is chunked and quoted
    sources: tuple[str, ...]

    @property
    def url(self) -> str:
        return self.sources[0]


def read_note(path: Path, rel: str) -> Note:
    """One note file, checked: a ``# title`` first, at least one ``Source: https://...`` line."""
    raw = path.read_bytes()
    if len(raw) > MAX_NOTE_BYTES:
        raise HipbotError(
            N_(
                "note {path} is {size} bytes; a note holds at most {limit}",
                path=path,
                size=len(raw),
                limit=MAX_NOTE_BYTES,
            )
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HipbotError(N_("note {path} is not UTF-8 text", path=path)) from exc
    if not _TITLE.match(text):
        raise HipbotError(
            N_("note {path} does not start with a '# title' line", path=path),
            hint=N_("a note is: '# title', a short answer, then 'Source: https://...'"),
        )
    sources = tuple(_SOURCE.findall(text))
    bad = [s for s in sources if not _URL.fullmatch(s)]
    if not sources or bad:
        raise HipbotError(
            N_("note {path} needs a 'Source: https://...' line naming where it comes from", path=path),
            hint=N_("not a URL: {bad}", bad=", ".join(bad)) if bad else None,
        )
    body = _SOURCE.sub("", text).strip() + "\n"
    title = text.lstrip().splitlines()[0][2:].strip()
    return Note(rel=rel, title=title, body=body, sources=sources)


def note_files(extra: Path | None = None) -> list[tuple[str, Path]]:
    """(corpus path, file) of every packaged note, then of every note in ``extra``."""
    found = [(f"{PACKAGED}/{p.name}", p) for p in sorted(NOTES_DIR.glob("*.md"))]
    if extra is not None:
        if not extra.is_dir():
            raise HipbotError(
                N_("notes folder not found: {path}", path=extra),
                hint=N_("HIPBOT_NOTES names a folder of .md notes"),
            )
        found += [(f"{LOCAL}/{p.relative_to(extra).as_posix()}", p) for p in sorted(extra.rglob("*.md"))]
    return found
