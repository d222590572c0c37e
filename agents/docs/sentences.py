"""A passage as the units an answer is composed from: whole sentences, table rows and code blocks.

The chunks keep the docs' layout (reST wraps prose at 80 columns, tables stay as ``| a | b |``
lines, code is fenced or indented), so a line is not a sentence. ``units`` rebuilds sentences
across wrapped lines, turns a table row or list-table item into "name: description", and keeps
each code block whole, with offsets into the chunk text so the sentence-sized embeddings stored at
ingest (``docs_segments``) can score them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from hipbot.agents.docs.parse import is_code

_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[*+-]|\d+[.)])\s+")
_RST_ROW = re.compile(r"^\s*\*\s+-\s+")
_RST_CELL = re.compile(r"^\s*-\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
# A sentence ends at . ! ? before whitespace and a capital, backtick, bracket or digit.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[\"'0-9])")
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|vs|cf|approx|incl|Fig|No)\.$", re.IGNORECASE)
_MARKUP = re.compile(r"\{[a-z]+\}`([^`<]*)(?:<[^>]*>)?`|:[a-z:]+:`~?([^`<]*)(?:<[^>]*>)?`")


@dataclass(frozen=True)
class Unit:
    """One piece an answer can quote: ``text`` is display-ready (whitespace folded), ``start`` and
    ``end`` are offsets in the chunk text, ``kind`` is sentence | row | code."""

    text: str
    start: int
    end: int
    kind: str
    block: int  # index of the block it came from: a code block right after a sentence follows it


def clean(text: str) -> str:
    """Whitespace folded, doc markup ({abbr}`X (...)`, :doc:`X <y>`) reduced to its words."""
    text = _MARKUP.sub(lambda m: m.group(1) or m.group(2) or "", text)
    return re.sub(r"\s+", " ", text).strip()


def _blocks(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of the blocks of a chunk: code (fenced or indented), table, rst list
    table, or prose paragraph; blank lines separate blocks, a fence keeps its blank lines."""
    lines = text.splitlines(keepends=True)
    offsets = []
    pos = 0
    for line in lines:
        offsets.append(pos)
        pos += len(line)
    blocks: list[tuple[int, int, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        start = offsets[i]
        if _FENCE.match(line):
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            j = min(j + 1, len(lines))
            blocks.append((start, offsets[j - 1] + len(lines[j - 1]), "code"))
            i = j
            continue
        j = i
        while j < len(lines) and lines[j].strip():
            j += 1
        end = offsets[j - 1] + len(lines[j - 1])
        body = lines[i:j]
        blocks.append((start, end, _block_kind(body)))
        i = j
    return blocks


def _block_kind(body: list[str]) -> str:
    stripped = [line.strip() for line in body]
    if all(s.startswith("|") for s in stripped):
        return "table"
    if any(s.startswith(("+--", "+==")) for s in stripped) or sum(s.count('","') for s in stripped) >= 2:
        return "grid"  # reST grid and csv tables: cells without their headers read as noise
    if _RST_ROW.match(body[0]) or (
        any(_RST_ROW.match(line) for line in body)
        and 2 * sum(bool(_RST_ROW.match(line) or _RST_CELL.match(line)) for line in body) >= len(body)
    ):
        return "rst_table"  # a list table, also one a chunk starts in the middle of
    indented = all(line.startswith(("    ", "\t")) for line in body)
    if indented and not _LIST_ITEM.match(body[0]):
        code_lines = sum(is_code(s) for s in stripped)
        return "code" if code_lines * 2 >= len(stripped) or len(stripped) == 1 else "prose"
    if sum(is_code(s) for s in stripped) == len(stripped) and any(
        s.endswith((";", "{", "}")) for s in stripped
    ):
        return "code"
    return "prose"


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sentence spans of a prose block; list items always start a new sentence."""
    spans: list[tuple[int, int]] = []
    piece_start = start
    # List items split first, then sentences within each item.
    for match in re.finditer(r"\n(?=\s*(?:[*+-]|\d+[.)])\s)", text[start:end]):
        spans.extend(_split(text, piece_start, start + match.start()))
        piece_start = start + match.end()
    spans.extend(_split(text, piece_start, end))
    return spans


def _split(text: str, start: int, end: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    a = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if _ABBREVIATION.search(text[a : match.start()]) or text.count("`", a, match.start()) % 2:
            continue  # "e.g. X", or a full stop inside `code` (`project(... LANGUAGES HIP)`)
        if text[a : match.start()].strip():
            out.append((a, match.start()))
        a = match.end()
    if text[a:end].strip():
        out.append((a, end))
    return tuple(out)


def _table_rows(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    rows = []
    pos = start
    for line in text[start:end].splitlines(keepends=True):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not _TABLE_RULE.match(line) and len(cells) >= 2 and cells[0] and any(cells[1:]):
            rows.append(
                (pos, pos + len(line.rstrip()), f"{cells[0]}: " + "; ".join(c for c in cells[1:] if c))
            )
        pos += len(line)
    return rows[1:] if rows and not rows[0][2].startswith("`") else rows  # drop the header row


def _rst_rows(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    rows: list[tuple[int, int, list[str]]] = []
    pos = start
    for line in text[start:end].splitlines(keepends=True):
        if _RST_ROW.match(line):
            rows.append((pos, pos + len(line.rstrip()), [_RST_ROW.sub("", line).strip()]))
        elif rows and _RST_CELL.match(line):
            rows[-1][2].append(_RST_CELL.sub("", line).strip())
            rows[-1] = (rows[-1][0], pos + len(line.rstrip()), rows[-1][2])
        elif rows and line.strip():
            rows[-1][2][-1] += " " + line.strip()
            rows[-1] = (rows[-1][0], pos + len(line.rstrip()), rows[-1][2])
        pos += len(line)
    out = []
    for a, b, cells in rows:
        # The first cell is "NAME" then, on wrapped lines, its description.
        name, _, rest = cells[0].partition(" ")
        described = [rest.strip(), *cells[1:]] if rest.strip() else cells[1:]
        out.append((a, b, f"{name}: " + "; ".join(c for c in described if c)))
    header = bool(out) and ("**" in out[0][2] or "Environment variable" in out[0][2])
    return out[1:] if header else out


_HTML = re.compile(r"^\s*</?[a-z][^>]*>", re.IGNORECASE)


@lru_cache(maxsize=4096)
def units(text: str) -> tuple[Unit, ...]:
    """The quotable units of a chunk, in text order (cached: the same passages answer many
    questions). HTML head lines of the ROCm pages are not text."""
    out: list[Unit] = []
    for index, (start, end, kind) in enumerate(_blocks(text)):
        if kind == "code":
            out.append(Unit(text[start:end].strip("\n"), start, end, "code", index))
        elif kind == "grid":
            continue
        elif kind in ("table", "rst_table"):
            rows = _table_rows(text, start, end) if kind == "table" else _rst_rows(text, start, end)
            out.extend(Unit(clean(t), a, b, "row", index) for a, b, t in rows)
        elif _HTML.match(text[start:end]):
            continue
        else:
            for a, b in _sentences(text, start, end):
                piece = clean(_LIST_ITEM.sub("", text[a:b], count=1))
                if len(piece) >= 3 and not _HTML.match(piece):
                    code = is_code(piece) and piece.endswith((";", "{", "}"))
                    out.append(Unit(piece, a, b, "code" if code else "sentence", index))
    return tuple(out)
