"""Markdown and reStructuredText -> retrievable chunks that remember their heading path.

Prose is split on headings, then packed paragraph by paragraph into chunks of a few hundred
words, so a passage quoted in an answer always names the section it came from. HIPIFY's
mapping tables are the exception: each table row is one chunk (with its section title), so one
CUDA API is one retrievable unit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_CHARS = 1100  # ~250 word pieces: what all-MiniLM-L6-v2 reads before truncating
MIN_TAIL_CHARS = 250
SEGMENT_MIN_CHARS = 60  # shorter sentences or lines join the next one: alone they embed as noise
_SENTENCE_BREAK = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`*(])|\n")


@dataclass(frozen=True)
class Chunk:
    """One retrievable passage. ``headings`` is the path below the document title."""

    path: str
    title: str
    headings: tuple[str, ...]
    text: str
    kind: str = "prose"  # "prose" or "api_row"
    names: tuple[str, ...] = ()  # identifiers of an API row: CUDA, HIP, roc/MIOpen

    @property
    def section(self) -> str:
        return " > ".join(self.headings) if self.headings else self.title

    @property
    def embed_text(self) -> str:
        """What is embedded and full-text indexed: the text with its place in the docs."""
        return (
            f"{self.title} > {self.section}\n{self.text}" if self.headings else f"{self.title}\n{self.text}"
        )

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.kind}\x00{self.embed_text}".encode()).hexdigest()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence or line of ``text``, blank ones left out."""
    spans, start = [], 0
    for sep in _SENTENCE_BREAK.finditer(text):
        if sep.start() > start and text[start : sep.start()].strip():
            spans.append((start, sep.start()))
        start = sep.end()
    if start < len(text) and text[start:].strip():
        spans.append((start, len(text)))
    return spans


_CODE_MARK = re.compile(r"[;{}]\s*$|/\*|//|^\s*#\s*(?:include|define|if)|```|\w+\([^)]*[&*][^)]*\)")


def is_code(piece: str) -> bool:
    """Code lines embed as noise that looks close to every question: leave them out."""
    plain = sum(c.isalnum() or c in " ,.'-`*_:()?!" for c in piece)
    return plain < 0.85 * len(piece) or bool(_CODE_MARK.search(piece))


def segment_spans(text: str) -> list[tuple[int, int]]:
    """Sentence-sized prose pieces of a passage, each embedded on its own: a question about one
    list item or one remark ("specify it with --cuda-path") matches that piece even when the rest
    of its passage is about something else. Code is left out."""
    out: list[tuple[int, int]] = []
    start = None
    for a, b in sentence_spans(text):
        if is_code(text[a:b]):
            if start is not None:
                out.append((start, a))
            start = None
            continue
        start = a if start is None else start
        if b - start >= SEGMENT_MIN_CHARS:
            out.append((start, b))
            start = None
    if start is not None:
        out.append((start, len(text.rstrip())))
    return [(a, b) for a, b in out if len(text[a:b].split()) >= 3]


def parse_file(path: Path, rel: str) -> list[Chunk]:
    """Chunks of one docs file; ``rel`` is its path relative to the corpus root."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return parse_text(text, rel)


def parse_text(text: str, rel: str) -> list[Chunk]:
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    sections = _rst_sections(text) if rel.endswith(".rst") else _md_sections(text)
    title = next((heads[0] for heads, _ in sections if heads), Path(rel).stem.replace("_", " "))
    chunks: list[Chunk] = []
    for heads, lines in sections:
        below_title = tuple(heads[1:]) if heads and heads[0] == title else tuple(heads)
        chunks.extend(_section_chunks(rel, title, below_title, lines))
    return chunks


# --- Markdown -------------------------------------------------------------------------------

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _md_sections(text: str) -> list[tuple[list[str], list[str]]]:
    lines = text.split("\n")
    if lines and lines[0].strip() == "---":  # YAML front matter
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
        lines = lines[end + 1 :]
    sections: list[tuple[list[str], list[str]]] = [([], [])]
    stack: list[tuple[int, str]] = []
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _MD_HEADING.match(line)
        if match:
            level = len(match.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, clean_heading(match.group(2))))
            sections.append(([h for _, h in stack], []))
            continue
        sections[-1][1].append(line)
    return sections


def clean_heading(raw: str) -> str:
    raw = re.sub(r"\{#[^}]*\}\s*$", "", raw)  # MyST explicit anchors
    return _inline(raw).replace("`", "").strip()


# --- reStructuredText -----------------------------------------------------------------------

_ADORNMENT = re.compile(r"^([=\-~^*#\"'`:.+_<>])\1{2,}\s*$")
_SKIP_DIRECTIVES = ("meta", "toctree", "contents", "index", "raw", "only", "image", "figure")


_SUBSTITUTION = re.compile(r"^\s*\.\.\s+\|([^|]+)\|\s+([\w:-]+)::(.*)$")
_RST_COMMENT = re.compile(r"^(\s*)\.\.(?:\s+(?![_|\[])(?!.*::).*)?$")


def _substitutions(lines: list[str]) -> dict[str, str]:
    """``.. |name| raw:: html`` (a layout trick) reads as a space, ``.. |name| replace:: ...`` as
    its name: what a reader of the rendered page sees in its place."""
    found = {}
    for line in lines:
        match = _SUBSTITUTION.match(line)
        if match:
            found[f"|{match.group(1)}|"] = " " if match.group(2) == "raw" else match.group(1)
    return found


def _rst_sections(text: str) -> list[tuple[list[str], list[str]]]:
    lines = text.split("\n")
    substitutions = _substitutions(lines)
    if substitutions:
        pattern = re.compile("|".join(re.escape(name) for name in substitutions))
        lines = [
            line if _SUBSTITUTION.match(line) else pattern.sub(lambda m: substitutions[m.group(0)], line)
            for line in lines
        ]
    styles: list[tuple[str, bool]] = []
    sections: list[tuple[list[str], list[str]]] = [([], [])]
    stack: list[tuple[int, str]] = []
    skip_indent: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if skip_indent is not None:
            if line.strip() and _indent(line) <= skip_indent:
                skip_indent = None
            else:
                i += 1
                continue
        title, style, consumed = _rst_title(lines, i)
        if title is not None and style is not None:
            if style not in styles:
                styles.append(style)
            level = styles.index(style)
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, clean_heading(title)))
            sections.append(([h for _, h in stack], []))
            i += consumed
            continue
        if _SUBSTITUTION.match(line) or _RST_COMMENT.match(line):
            # substitution definitions and comments, with their indented bodies, are not text
            skip_indent = _indent(line)
            i += 1
            continue
        directive = re.match(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$", line)
        if directive:
            name = directive.group(2).split(":")[-1]
            if name in _SKIP_DIRECTIVES:
                skip_indent = len(directive.group(1))
            elif name in ("note", "tip", "warning", "important", "caution", "attention", "hint"):
                sections[-1][1].append(f"{directive.group(1)}{name.capitalize()}: {directive.group(3)}")
            elif directive.group(3).strip() and name not in ("code-block", "code", "sourcecode", "highlight"):
                sections[-1][1].append(directive.group(1) + directive.group(3))  # list-table captions
            i += 1
            continue
        if re.match(r"^\s*\.\.\s+_[^:]+:\s*$", line):
            i += 1  # link targets
            continue
        if re.match(r"^\s+:[a-z][\w-]*:(\s.*)?$", line):
            i += 1  # directive options (:header-rows:, :widths:, ...)
            continue
        sections[-1][1].append(line)
        i += 1
    return sections


def _rst_title(lines: list[str], i: int) -> tuple[str | None, tuple[str, bool] | None, int]:
    """A title at line i: ``text`` + underline, or overline + ``text`` + underline."""
    line = lines[i]
    over = _ADORNMENT.match(line)
    if over and i + 2 < len(lines):
        text, under = lines[i + 1], lines[i + 2]
        if text.strip() and _ADORNMENT.match(under) and under.strip()[0] == over.group(1):
            return text.strip(), (over.group(1), True), 3
    if line.strip() and not over and not line.startswith(" ") and i + 1 < len(lines):
        under = _ADORNMENT.match(lines[i + 1])
        if under and len(lines[i + 1].rstrip()) >= len(line.rstrip()):
            return line.strip(), (under.group(1), False), 2
    return None, None, 0


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


# --- shared ---------------------------------------------------------------------------------


def _inline(text: str) -> str:
    """Strip the markup a reader does not need: roles, link targets, bold, double backticks."""
    text = re.sub(r":[\w:-]+:`([^`<]*?)\s*<[^>]*>`", r"\1", text)  # :ref:`text <target>`
    text = re.sub(r":[\w:-]+:`([^`]*)`", r"\1", text)  # :ref:`target`
    text = re.sub(r"\{[\w:-]+\}`([^`<]*?)\s*<[^>]*>`", r"\1", text)  # MyST {doc}`text <t>`
    text = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`_{1,2}", r"\1", text)  # rst links
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # markdown links / images
    text = re.sub(r"(?<!`)``(?!`)", "`", text).replace("**", "")
    return re.sub(r"\\([_*`\\])", r"\1", text)


_TABLE_KINDS = {"CUDA": "CUDA", "HIP": "HIP", "ROC": "ROC", "MIOPEN": "MIOpen"}
_VERSION_LABELS = ("added", "deprecated", "changed", "removed", "experimental")


def _section_chunks(rel: str, title: str, heads: tuple[str, ...], lines: list[str]) -> Iterator[Chunk]:
    prose: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and _is_mapping_header(lines[i]):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            yield from _mapping_rows(rel, title, heads, lines[i:j])
            i = j
            continue
        prose.append(lines[i])
        i += 1
    for text in _pack(prose):
        yield Chunk(rel, title, heads, text)


def _is_mapping_header(line: str) -> bool:
    """HIPIFY's tables start ``|**CUDA**|**A**|...``; other tables (supported_apis.md) stay prose."""
    cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
    return len(cells) > 2 and cells[0] == "CUDA" and cells[1] == "A"


def _mapping_rows(rel: str, title: str, heads: tuple[str, ...], lines: list[str]) -> Iterator[Chunk]:
    header = [c.strip().strip("*") for c in lines[0].strip().strip("|").split("|")]
    groups = [(i, _TABLE_KINDS[c]) for i, c in enumerate(header) if c in _TABLE_KINDS]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        parts: list[str] = []
        names: list[str] = []
        for start, kind in groups:
            name = cells[start].strip("`").strip() if start < len(cells) else ""
            versions = [
                f"{label} {cells[start + 1 + j]}"
                for j, label in enumerate(_VERSION_LABELS)
                if start + 1 + j < len(cells)
                and cells[start + 1 + j]
                and not (kind == "CUDA" and label == "experimental")
            ]
            if name:
                names.append(name)
                parts.append(f"{kind}: {name}" + (f" ({', '.join(versions)})" if versions else ""))
            elif kind != "CUDA":
                parts.append(f"{kind}: not supported")
        if names:
            yield Chunk(rel, title, heads, "; ".join(parts), kind="api_row", names=tuple(names))


def _pack(lines: list[str]) -> Iterator[str]:
    """Paragraphs packed greedily into chunks of at most MAX_CHARS (long paragraphs split on lines)."""
    paragraphs: list[str] = []
    current: list[str] = []
    fenced = False
    for line in lines:
        fence = bool(_FENCE.match(line))
        if fence and not fenced and current:
            # a code block right under its sentence ("... run:" then a fence) is a block of its own
            paragraphs.append("\n".join(current))
            current = []
        fenced ^= fence
        if line.strip():
            current.append(line.rstrip())
            if fence and not fenced:  # the closing fence ends the block
                paragraphs.append("\n".join(current))
                current = []
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    chunks: list[str] = []
    buffer = ""
    for para in paragraphs:
        para = _inline(para)
        pieces = [para] if len(para) <= MAX_CHARS else _split_long(para)
        for piece in pieces:
            if buffer and len(buffer) + len(piece) + 2 > MAX_CHARS:
                chunks.append(buffer)
                buffer = ""
            buffer = f"{buffer}\n\n{piece}" if buffer else piece
    if buffer.strip():
        # A short tail ("10. Build and run tests.") means nothing alone: keep it with what precedes it.
        if (
            chunks
            and len(buffer) < MIN_TAIL_CHARS
            and len(chunks[-1]) + len(buffer) <= MAX_CHARS + MIN_TAIL_CHARS
        ):
            chunks[-1] = f"{chunks[-1]}\n\n{buffer}"
        else:
            chunks.append(buffer)
    yield from chunks


def _split_long(para: str) -> list[str]:
    out: list[str] = []
    buffer = ""
    for line in para.split("\n"):
        while len(line) > MAX_CHARS:  # one huge line: cut at a space
            cut = line.rfind(" ", 0, MAX_CHARS)
            cut = cut if cut > MAX_CHARS // 2 else MAX_CHARS
            if buffer:
                out.append(buffer)
                buffer = ""
            out.append(line[:cut])
            line = line[cut:].lstrip()
        if buffer and len(buffer) + len(line) + 1 > MAX_CHARS:
            out.append(buffer)
            buffer = ""
        buffer = f"{buffer}\n{line}" if buffer else line
    if buffer:
        out.append(buffer)
    return out
