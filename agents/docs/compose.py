"""The composition half of ``hipbot ask``: a short answer built from the sentences that answer the
question, with numbered citations, and the full passages kept for "More" (``--full``, the bot's
button).

Every sentence, table row and code block of the retrieved passages is scored (``scoring.py``). The
best one becomes a direct first sentence; when several score close to it, 2-4 bullets instead,
where a unit that only names what a chosen one already names loses its bonus for naming it. A
code block that follows a chosen sentence is kept whole when the question asks how to do
something.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from hipbot.agents.docs.labels import label
from hipbot.agents.docs.parse import sentence_spans
from hipbot.agents.docs.retrieval import Passage
from hipbot.agents.docs.scoring import (
    COMMAND_CHARS,
    IDENT_TERM,
    MIN_WORDS,
    NOT_PROSE,
    Scored,
    score_units,
    shorten,
)
from hipbot.agents.docs.sentences import units

ANSWER_CHARS = 600  # the answer before its sources: one Discord message with room to spare
MAX_BULLETS = 4
CODE_CHARS = 500  # a code block longer than this is left to "More"
EXTRACT_LIMITS = (1400, 900, 700, 500, 400)  # "More": characters quoted from the 1st..5th passage
FOCUS_WEIGHT = 1  # as much as one word of the question
BULLET_RATIO = 0.8  # a second unit within this share of the best score makes the answer a list
KEEP_RATIO = 0.55  # units below this share of the best score are never quoted
SOURCE_RATIO = 0.7  # ... nor below this share when they would cite one more passage
NAME_WEIGHT = 1.5  # the weight of the question's own names (APIs, macros, options) among its terms
NAMED_RATIO = 0.4  # a unit quoting a name the answer lacks is added when within this share of the best

_HOW_TO = re.compile(
    r"\bhow (?:do|can|to|should)\b|\bexample\b|\bcommand\b|\bsyntax\b|\bsnippet\b|怎么|如何|示例|例子|命令",
    re.IGNORECASE,
)
_CODE_NAME = re.compile(r"_|^-")  # a variable, macro or option rather than a product or library
# A sentence that leans on the one before it: "This ...", "It ...", "... docs warn it hurts ..."
_LEANS = re.compile(
    r"^(?:this|these|that|those|it|they|such|both|either)\b|^[^.;:]{0,50}\b(?:it|them|they)\b", re.IGNORECASE
)
_ASKS_CODE = re.compile(
    r"\b(?:example|command|code|syntax|snippet)\b|\bhow (?:do|can) (?:i|we|you) "
    r"(?:build|compile|link|run|install|launch|call|write|set|use)\b|示例|例子|命令|代码",
    re.IGNORECASE,
)


@dataclass
class Composed:
    """An answer body, the sources with the cited ones first (citation [n] is sources[n-1]), and
    the full passages for "More"."""

    text: str
    sources: list[dict[str, str]]
    more: str
    cited: list[int] = field(default_factory=list)  # chunk ids, in citation order


def trim(
    text: str,
    terms: list[str],
    limit: int = 600,
    name_weight: int = 2,
    focus: tuple[int, int] | None = None,
) -> str:
    """The window of ``text`` (at most ``limit`` chars, original layout) around the sentence or
    line holding most question terms (an API name counts ``name_weight`` words); the sentences of
    ``focus`` (the piece the dense search matched best) get ``FOCUS_WEIGHT`` more."""
    text = text.strip()
    if len(text) <= limit:
        return text
    spans = sentence_spans(text)
    keys = _keys(terms, name_weight)
    words = [sum(w for key, w in keys if key in text[a:b].lower()) for a, b in spans]
    near = [FOCUS_WEIGHT if focus and a < focus[1] and b > focus[0] else 0 for a, b in spans]
    best = max(range(len(spans)), key=lambda i: (words[i] + near[i], words[i], -i))
    lo = hi = best
    while True:
        grown = False
        if hi + 1 < len(spans) and spans[hi + 1][1] - spans[lo][0] <= limit:
            hi += 1
            grown = True
        if lo > 0 and spans[hi][1] - spans[lo - 1][0] <= limit:
            lo -= 1
            grown = True
        if not grown:
            break
    body = text[spans[lo][0] : spans[hi][1]]
    if len(body) > limit:
        body = body[:limit].rsplit(" ", 1)[0]
    return ("\u2026 " if lo > 0 else "") + body + (" \u2026" if hi < len(spans) - 1 else "")


def _keys(terms: list[str], name_weight: float) -> list[tuple[str, float]]:
    """Words match by a 5-letter stem (inflections), API names only whole: "__shf" would find
    every shuffle signature, not the __shfl_xor_sync asked about."""
    return [(t, name_weight) if IDENT_TERM.match(t) else (t[:5], 1.0) for t in terms]


def dedupe_sources(sources: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for s in sources:
        key = (s["path"], s["section"])
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def full_passages(passages: list[Passage], terms: list[str], lang: str = "en") -> str:
    """The best passages, each trimmed around the question's words: what "More" shows."""
    prose = [p for p in passages if p.kind == "prose"] or passages
    parts = [label("from_docs", lang)] if prose else []
    for n, p in enumerate(prose[:5], 1):
        body = trim(p.text, terms, EXTRACT_LIMITS[n - 1], focus=p.focus)
        parts.append(f"[{n}] {p.title} \u203a {p.section} ({p.path})\n{body}\n")
    return "\n".join(parts).strip()


def _similar(a: str, b: str) -> bool:
    wa, wb = set(a.lower().split()), set(b.lower().split())
    return bool(wa and wb) and len(wa & wb) / min(len(wa), len(wb)) > 0.6


def _value(item: Scored, quoted: str) -> float:
    """A unit's score once others are chosen: names already quoted earn it nothing more."""
    if item.names and all(n in quoted for n in item.names):
        return item.score - item.bonus
    return item.score


def _pick(scored: list[Scored], budget: int, passages: int, said: tuple[str, ...] = ()) -> list[Scored]:
    """The best unit, then the next best that are close enough, whole (a unit that does not fit is
    skipped, never cut), from at most ``passages`` passages, until the budget is spent or four
    are chosen; a unit from a passage not yet cited must be closer (``SOURCE_RATIO``): a bullet
    from another page that is only near the question reads as noise under the answer. A unit that
    only names what a chosen one or the fact lines (``said``) already name ranks without its
    bonus; one that says what they say is not quoted again. A note offered from beyond the
    passages (``Passage.reach``) is quoted first or not at all: under the docs' answer its
    sentence is only near the question, not part of the answer."""
    chosen: list[Scored] = []
    used = 0
    quoted = " ".join(said).lower()
    remaining = [s for s in scored if s.unit.kind != "code"]
    while remaining and len(chosen) < MAX_BULLETS and used < budget:
        ranked = sorted(remaining, key=lambda s: -_value(s, quoted))
        for item in ranked:
            value = _value(item, quoted)
            if chosen and value < KEEP_RATIO * chosen[0].score:
                return chosen
            cited = {c.passage for c in chosen}
            if item.passage not in cited and len(cited) >= passages:
                continue
            if chosen and item.reach and item.passage not in cited:
                continue
            if chosen and item.passage not in cited and value < SOURCE_RATIO * chosen[0].score:
                continue
            text = item.unit.text
            cost = len(text) + 6
            if (chosen and used + cost > budget) or any(
                _similar(text, other) for other in [*said, *(c.unit.text for c in chosen)]
            ):
                continue
            chosen.append(replace(item, score=value))
            remaining.remove(item)
            used += min(cost, budget)
            quoted += " " + text.lower()
            break
        else:
            break
    return chosen


def _line_naming(item: Scored, passage: Passage, name: str) -> str | None:
    """What a unit quotes for ``name``: a prose unit itself, or of a code block (or a unit that is
    code, console output or a shell comment run together) its one line naming it, as a command,
    when that line is short and itself neither output nor a comment."""
    text = item.unit.text
    if item.unit.kind != "code" and not NOT_PROSE.match(text):
        return text if len(text.split()) >= MIN_WORDS else None
    for line in passage.text[item.unit.start : item.unit.end].splitlines():
        line = line.strip()
        if name in line.lower():
            ok = len(line) <= COMMAND_CHARS and len(line.split()) > 1 and not NOT_PROSE.search(line)
            return f"`{line}`" if ok else None
    return None


def _full(chosen: list[Scored], text: str, budget: int) -> bool:
    """Whether ``text`` does not fit as one more bullet under ``chosen``."""
    used = sum(len(c.unit.text) + 6 for c in chosen) + len(text) + 6
    return used > budget or len(chosen) >= MAX_BULLETS


def _room(chosen: list[Scored], text: str, budget: int, least: int = 1) -> list[Scored] | None:
    """``chosen`` less as many of its last bullets as ``text`` needs to fit beside them (at least
    ``least`` kept), or None when it cannot fit."""
    keep = list(chosen)
    while len(keep) > least and _full(keep, text, budget):
        keep.pop()
    return None if _full(keep, text, budget) else keep


def _add_named(
    chosen: list[Scored],
    scored: list[Scored],
    names: list[str],
    said: tuple[str, ...],
    budget: int,
    passages: list[Passage],
    listed: int,
) -> list[Scored]:
    """A name the question asks about (an API, macro, variable, option) that neither the fact lines
    nor the chosen units quote: the best unit quoting it (a code block's one line counts) joins the
    answer when it scores within ``NAMED_RATIO`` of the best unit: in place of the last bullets when
    the name is code (a variable, macro or option: `GPU_POOL_TRIM`, `-fgpu-rdc`), only where there
    is room for it otherwise (the gfx1030, PyTorch or rocBLAS a question names as its setting is
    not worth the sentence that answers)."""
    if not chosen:
        return chosen
    quoted = " ".join([*said, *(c.unit.text for c in chosen)]).lower()
    for name in names:
        if name in quoted:
            continue
        cited = {c.passage for c in chosen}
        for item in scored:
            if item.score < NAMED_RATIO * chosen[0].score:
                break
            if item in chosen or name not in item.unit.text.lower():
                continue
            text = _line_naming(item, passages[item.passage], name)
            if text is None or (item.passage not in cited and len(cited) >= listed and len(chosen) < 2):
                continue
            keep = _room(chosen, text, budget, 1 if _CODE_NAME.search(name) else len(chosen))
            if keep is None:
                break
            chosen = [*keep, replace(item, unit=replace(item.unit, text=text, kind="command"))]
            quoted += " " + text.lower()
            break
    return chosen


def _with_antecedents(
    chosen: list[Scored], scored: list[Scored], passages: list[Passage], budget: int, said: tuple[str, ...]
) -> list[Scored]:
    """A chosen sentence that leans on the one right before it ("It hurts performance on discrete
    GPUs", "Linking objects without them fails") is preceded by that sentence when it fits, in
    place of the last bullets if need be: the sentence it refers to names what "it" is. One the
    fact lines (``said``) already quote is not quoted again."""
    out = list(chosen)

    def at(unit: Scored) -> int | None:
        return next((i for i, o in enumerate(out) if (o.passage, o.unit) == (unit.passage, unit.unit)), None)

    for item in chosen:
        if at(item) is None or item.unit.kind != "sentence" or not _LEANS.match(item.unit.text):
            continue
        text = passages[item.passage].text
        before = [
            s
            for s in scored
            if s.passage == item.passage
            and s.unit.kind == "sentence"
            and s.unit.end <= item.unit.start
            and not text[s.unit.end : item.unit.start].strip(" \n\t-*")
        ]
        if not before or any(_similar(before[0].unit.text, line) for line in said):
            continue
        lead = replace(before[0], score=out[at(item)].score)
        placed = at(lead)
        if placed is not None:
            if placed > at(item):  # quoted after the sentence that leans on it
                out.pop(placed)
                out.insert(at(item), lead)
            continue
        keep = _room(out, lead.unit.text, budget, at(item) + 1)  # the last bullets give way to it
        if keep is not None:
            out = keep
            out.insert(at(item), lead)
    return out


def _code_after(item: Scored, passage: Passage, terms: list[str], asks_code: bool) -> str | None:
    """The code block right after a chosen sentence, when the question asks for code or the block
    shows one of the question's identifiers."""
    names = [t for t in terms if IDENT_TERM.match(t) or "_" in t or t.startswith("-")]
    for unit in units(passage.text):
        if (
            unit.kind == "code"
            and item.unit.block <= unit.block <= item.unit.block + 1
            and unit.start >= item.unit.end
        ):
            low = unit.text.lower()
            if len(unit.text) <= CODE_CHARS and (asks_code or any(n in low for n in names)):
                return unit.text
            return None
    return None


def compose(
    question: str,
    passages: list[Passage],
    terms: list[tuple[str, float]],
    dense: dict[int, list[tuple[int, int, float]]],
    fact_lines: list[str] | None = None,
    lang: str = "en",
    budget: int = ANSWER_CHARS,
    lead: list[dict[str, str]] | None = None,
    listed: int | None = None,
    answering: frozenset[int] = frozenset(),
) -> Composed:
    """The short answer: ``fact_lines`` (mapping rows, options) first, then a direct sentence or
    2-4 bullets from the passages, each with its citation; sources ordered so [n] is sources[n-1],
    after ``lead`` (the sources of the fact lines). The sentences come from at most ``listed``
    passages, any of ``passages``; the sources and "More" are those and the best uncited ones, at
    most ``listed`` in all. ``answering``: the notes whose first paragraph answers the question
    asked (``Retriever.answering_notes``)."""
    lead = dedupe_sources(lead or [])
    fact_lines = list(fact_lines or [])
    words = [t for t, _ in terms]
    listed = len(passages) if listed is None else listed
    room = max(budget - sum(len(line) + 1 for line in fact_lines), 160 if fact_lines else budget)
    scored = score_units(passages, terms, dense, question, answering)
    chosen = _pick(scored, room, listed, tuple(fact_lines))
    names = [t for t, w in terms if w >= NAME_WEIGHT]
    chosen = _add_named(chosen, scored, names, tuple(fact_lines), room, passages, listed)
    chosen = _with_antecedents(chosen, scored, passages, room, tuple(fact_lines))
    if not chosen and not fact_lines:
        shown = passages[:listed]
        return Composed(
            label("nothing", lang), [p.source() for p in shown], full_passages(shown, words, lang)
        )
    # Citation numbers follow the sources list, where two passages of one section are one source.
    keys: list[tuple[str, str]] = [(s["path"], s["section"]) for s in lead]
    order: list[int] = []  # passage indexes in citation order
    for item in chosen:
        key = (passages[item.passage].path, passages[item.passage].section)
        if key not in keys:
            keys.append(key)
            order.append(item.passage)
    cite = {
        i: keys.index((p.path, p.section)) + 1 for i, p in enumerate(passages) if (p.path, p.section) in keys
    }
    body = []
    code = None
    if chosen and _HOW_TO.search(question):
        asks_code = bool(_ASKS_CODE.search(question))
        code = _code_after(
            chosen[0], passages[chosen[0].passage], [w for w in words if len(w) > 3], asks_code
        )
    if chosen and (code or len(chosen) == 1 or chosen[1].score < BULLET_RATIO * chosen[0].score):
        # one clear answer: its sentence first, then the code it introduces or what supports it
        first = chosen[0]
        body.append(f"{shorten(first.unit.text, room - 5)} [{cite[first.passage]}]")
        if code:
            body.append(code)
        else:
            body.extend(f"- {c.unit.text} [{cite[c.passage]}]" for c in chosen[1:])
    elif chosen:
        body.extend(f"- {c.unit.text} [{cite[c.passage]}]" for c in chosen)
    cited_sources = [passages[i].source() for i in order]
    uncited = [i for i in range(min(listed, len(passages))) if i not in cite][: max(listed - len(order), 0)]
    rest = [passages[i].source() for i in uncited]
    shown = [p for i, p in enumerate(passages) if i in cite or i in uncited]
    more = full_passages(shown, words, lang)
    text = "\n".join([*fact_lines, *body]).strip()
    sources = dedupe_sources(lead + cited_sources + rest)
    return Composed(text, sources, more, [passages[i].chunk_id for i in order])
