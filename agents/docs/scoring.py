"""Scoring the quotable units of retrieved passages for ``compose``: every sentence, table row and
code block (``sentences.units``) scores by how close its stored sentence embedding is to the
question (``Retriever.segment_scores``), how much of the question's weighted vocabulary it holds,
and the rank of its passage. A long sentence scores a little less (it holds more words and fills
the budget alone); one that names what to use scores more for a question that asks what to do,
one giving a number when it asks how many or how large, one saying what a term is when it asks
what that term is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hipbot.agents.docs.retrieval import Passage, has_cjk
from hipbot.agents.docs.sentences import Unit, units
from hipbot.agents.docs.vocabulary import glossary_terms

COMMAND_CHARS = 120  # a one-line code block up to this long can be quoted as a command
DENSE_WEIGHT = 0.55
LEXICAL_WEIGHT = 0.45
RANK_WEIGHT = 0.04
NEXT_BONUS = 0.04  # the sentence right after the best one often finishes its thought
NAMES_BONUS = 0.05  # a sentence that names what to use (a macro, option, variable, API) ...
DIRECTIVE_BONUS = 0.04  # ... and says to use it, for a question that asks what to do
SPECIFIC_BONUS = 0.02  # for any other question: a sentence that names something specific
SETTING_BONUS = 0.05  # ... more when it gives the value to set a variable to (`AMD_SERIALIZE_KERNEL=3`)
VALUE_BONUS = 0.1  # ... more again when that value is a word of the question (`HIP_PLATFORM=nvidia`)
AMOUNT_BONUS = 0.05  # a sentence that gives a number, for a question that asks how many or how large
DEFINES_BONUS = 0.1  # a sentence that says what a term is, for a question that asks what it is
LEAD_BONUS = 0.15  # the first paragraph of a note whose title is the question asked (``answering_notes``)
POINTER_FACTOR = (
    0.7  # a sentence that only points elsewhere ("For more information, see ...") scores this share
)
DEPRECATED_OPTION_FACTOR = 0.5  # an option list's entry marked deprecated, for a question not naming it
BESIDE_FACTOR = 0.85  # a unit of a chunk next to a retrieved one (same section) scores this share
LONG_CHARS = 150  # a unit longer than this loses LONG_PENALTY of its score per 100 characters more
LONG_PENALTY = 0.05
RUN_ON_CHARS = 350  # a sentence longer than this scores 0.6 of its score ...
ROW_CHARS = 250  # ... a table row is quoted cut to this length instead
MIN_WORDS = 4  # fewer words (a bare name, a heading-like fragment) is never the answer

# An API, type or variable name among the search words: matched whole, not by its first five letters
IDENT_TERM = re.compile(r"^(?=\w*_|(?:hip|cuda|cu[a-z]|roc|miopen|nvrtc)\w{3})\w{6,}$")
_FILLER = re.compile(r"[:,]$")
# A sentence that points elsewhere; quoted without its link it tells the reader nothing
_POINTER = re.compile(
    r"^(?:for (?:more|further|additional) (?:information|details)|for details|see |refer to |please refer|"
    r"more information (?:is|can be)|to learn more|the following (?:table|section|figure|list|example)s? )",
    re.IGNORECASE,
)
# An entry of an option list for a deprecated option: "`--amdgpu-target=<gpu_arch>`: [DEPRECATED] This
# option is being replaced by `--offload-arch=<target>`. Generate code for ... gfx803, gfx900 ...": a
# product name's gfx target matches it in questions that never ask about the option
_DEPRECATED_OPTION = re.compile(r"^`(--?[A-Za-z][\w-]*)(?:=[^`]*)?`\s*:\s*\W*deprecated\b", re.IGNORECASE)
_FRAGMENT = re.compile(r"^(?:[\"']\s*[,)]|[)\]},;])")  # a "sentence" split out of code: starts inside a call
_FENCE = re.compile(r"^\s*(```|~~~)")
# Not prose: a shell or debugger prompt, a runtime log line (":3:hip_peer.cpp :77 : ..."), a MyST
# directive left in the text (":::{grid-item-card} ...").
NOT_PROSE = re.compile(r"[\[$#>]|\(gdb\)|:\d+:\S|:::")
# Names a reader can act on: `code`, a macro or variable in capitals, an option, an API name.
_ACTIONABLE = re.compile(
    r"`[^`\s][^`]*`|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b__\w+\b|(?<![\w/-])--?[a-z][\w-]+=?|"
    r"\b(?:hip|roc|hsa|amd|miopen)[A-Z_]\w+\b|\b\w+\(\)"
)
# An environment variable (or macro) given a value: `HIP_LAUNCH_BLOCKING=1`, `export GPU_MAX_HW_QUEUES=4`.
_SETTING = re.compile(r"(?<![\w-])([A-Z][A-Z0-9]*_[A-Z0-9_]+)=([^\s=`'\"]+)")
_DIRECTIVE = re.compile(
    r"\b(?:must|needs? to|should|use|using|set|setting|enable|disable|pass|add|specify|wrap|encase\w*|"
    r"recommend\w*|required?|requires|instead|replace\w*|export)\b",
    re.IGNORECASE,
)
_ASKS_WHAT_TO_DO = re.compile(
    r"\bhow\b|\bwhat (?:should|can|do|must)\b|\bwhich\b|\b(?:do|does|should|can|could|must) (?:i|we|you)\b|"
    r"\bis there\b|\bany (?:way|setting|option|flag)\b|\bis it possible\b|\ba way to\b|instead|怎么|如何|怎样|哪个|需要|可以|能不能|要不要",
    re.IGNORECASE,
)
_ASKS_AMOUNT = re.compile(
    r"\bhow (?:many|much|large|big|wide)\b|\bwhat(?:'s| is| are)\b[^?]{0,40}?\b(?:sizes?|limits?|maximum|max|"
    r"number|count|width)\b|多大|多少|上限|最大",
    re.IGNORECASE,
)
# A number that is an amount (64, 1024 threads, 64 KB), not a version (6.2), a year or part of a name.
_AMOUNT = re.compile(r"(?<![\w.\-/#])(?<!ROCm )(?<!HIP )(?<!CUDA )(?!(?:19|20)\d\d\b)\d+(?![\w.\-/]\w)")
# "what is the LDS (on AMD GPUs)?", "what does XNACK mean?", "什么是 LDS", "LDS 是什么": the term asked about
_ASKS_WHAT_IS = re.compile(
    r"^\s*what(?:'s| is| are| does)\s+(?:an?\s+|the\s+)?([A-Za-z][\w-]*)(?=\s*\?|\s*$|\s+(?:on|in|for|mean|stand)\b)"
    r"|什么是\s*([A-Za-z][\w-]*)|([A-Za-z][\w-]*)\s*(?:是什么|是啥)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Scored:
    unit: Unit
    passage: int  # index into the passages
    score: float
    names: tuple[str, ...] = ()  # what it names that the question does not (lower-cased)
    bonus: float = 0.0  # the share of ``score`` those names earned
    reach: bool = False  # of a note offered from beyond the passages asked for: it leads or stays out


def _acts(text: str, question: str) -> tuple[float, tuple[str, ...]]:
    """The bonus of a unit that names something the question does not (the macro, option or API
    to use), more when it says to use it; and those names."""
    asked = question.lower()
    names = [m.group(0).strip("`()=").lower() for m in _ACTIONABLE.finditer(text)]
    new = tuple(dict.fromkeys(n for n in names if len(n) > 2 and n not in asked))
    if not new:
        return 0.0, ()
    return NAMES_BONUS + (DIRECTIVE_BONUS if _DIRECTIVE.search(text) else 0.0), new


def _setting(text: str, question: str) -> float:
    """The bonus of a unit that gives a variable the question does not name a value to set it to;
    more when the value is a word of the question (`HIP_PLATFORM=nvidia` for "... for NVIDIA?"):
    the switch to what the question asks for."""
    asked = question.lower()
    values = [v.lower().rstrip(".,;:)") for name, v in _SETTING.findall(text) if name.lower() not in asked]
    if not values:
        return 0.0
    named = any(re.fullmatch(r"[a-z]\w+", v) and re.search(rf"\b{re.escape(v)}\b", asked) for v in values)
    return SETTING_BONUS + (VALUE_BONUS if named else 0.0)


def _defines(text: str, term: str) -> bool:
    """Whether a unit says what ``term`` is: "Local Data Share (LDS)", "LDS (local data share)",
    "XNACK (the GPU's ability to retry ...)", "hipRTC is a library ...", "... stands for ..."."""
    at = re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text, re.IGNORECASE)
    if at is None:
        return False
    after = text[at.end() :].lstrip("`*")
    if re.match(r"\s*(?:\(|,\s+(?:an?|the)\b|(?:is|are)\s+(?:an?|the)\b|stands for|refers to|means)", after):
        return True
    # an acronym spelled out before it: "local data share (LDS)"
    words = rf"((?:[A-Za-z][\w-]*\s+){{{len(term) - 1}}}[A-Za-z][\w-]*)\s*\(`?{re.escape(term)}`?\)"
    spelled = re.search(words, text, re.IGNORECASE)
    return spelled is not None and "".join(w[0] for w in spelled.group(1).split()).lower() == term.lower()


def _command(code: str) -> str | None:
    """The one line of a short code block (fences and comments aside), when it is a command or
    setting short enough to quote inline."""
    lines = [
        line.strip()
        for line in code.splitlines()
        if line.strip() and not _FENCE.match(line) and not line.strip().startswith(("#", "//"))
    ]
    if len(lines) == 1 and len(lines[0]) <= COMMAND_CHARS and "`" not in lines[0]:
        return lines[0]
    return None


def _groups(question: str, terms: list[str]) -> list[list[list[int]]]:
    """For a Chinese question: the search words (indexes into ``terms``) of each glossary word,
    as its alternatives, so one Chinese word counts once however many English words translate it."""
    if not has_cjk(question):
        return []
    out: list[list[list[int]]] = []
    taken: set[int] = set()
    for alternatives in glossary_terms(question):
        group = []
        for phrase in alternatives:
            words = [i for i, t in enumerate(terms) if t in phrase.lower().split() and i not in taken]
            if words:
                group.append(words)
        taken.update(i for words in group for i in words)
        if group:
            out.append(group)
    return out


def _credit(keys: list[tuple[str, float, bool]], groups: list[list[list[int]]], holds: list[bool]) -> float:
    """The weight of the terms a text holds (``holds[i]``: it holds ``keys[i]``); a glossary word's
    group earns its best alternative's."""
    grouped = {i for group in groups for words in group for i in words}
    alone = sum(w for i, (_, w, _) in enumerate(keys) if holds[i] and i not in grouped)
    return alone + sum(max(sum(keys[i][1] for i in words if holds[i]) for words in group) for group in groups)


def score_units(
    passages: list[Passage],
    terms: list[tuple[str, float]],
    dense: dict[int, list[tuple[int, int, float]]],
    question: str = "",
    answering: frozenset[int] = frozenset(),
) -> list[Scored]:
    """Every unit of the prose passages, scored; ``terms`` are (word, weight) pairs and ``dense``
    holds each chunk's sentence embeddings as (start, end, cosine with the question). For a
    question that asks what to do, a unit naming what to use scores higher; so does the first
    paragraph of a note that answers the question asked (``answering``: its chunk ids)."""
    what_to_do = bool(_ASKS_WHAT_TO_DO.search(question))
    amount = bool(_ASKS_AMOUNT.search(question))
    asked = _ASKS_WHAT_IS.search(question)
    subject = next((g for g in asked.groups() if g), "") if asked else ""
    keys = [(t, w, IDENT_TERM.match(t) is not None) for t, w in terms]
    groups = _groups(question, [t for t, _, _ in keys])
    total = _credit(keys, groups, [True] * len(keys)) or 1.0
    out: list[Scored] = []
    for rank, passage in enumerate(passages):
        if passage.kind != "prose":
            continue
        segments = dense.get(passage.chunk_id, [])
        heading = f"{passage.title} {passage.section}".lower()
        lead_end = -1  # the units before it are the first paragraph of a note answering the question
        if passage.chunk_id in answering:  # that paragraph is the note's first line; bullets follow
            newline = passage.text.find("\n")
            lead_end = newline if newline >= 0 else len(passage.text)
        for unit in units(passage.text):
            low = unit.text.lower()
            hit = _credit(keys, groups, [(t if ident else t[:5]) in low for t, _, ident in keys])
            # the section heading says what a terse row or sentence is about
            hit += 0.3 * _credit(keys, groups, [(t if ident else t[:5]) in heading for t, _, ident in keys])
            cosine = max(
                (s for a, b, s in segments if a < unit.end and b > unit.start),
                default=0.8 * max((s for _, _, s in segments), default=0.0),
            )
            score = DENSE_WEIGHT * cosine + LEXICAL_WEIGHT * min(hit / total, 1.0) + RANK_WEIGHT / (rank + 1)
            command = what_to_do and unit.kind == "code" and _command(unit.text)
            if command:
                # a one-line command or setting that names what to use answers "how do I ..."
                unit = replace(unit, text=f"`{command}`", kind="command")
            if unit.kind == "row" and len(unit.text) > RUN_ON_CHARS:
                # a long table row says what it is about first (name, then description): quoted cut
                unit = replace(unit, text=shorten(unit.text, ROW_CHARS))
            bonus, names = _acts(unit.text, question) if unit.kind != "code" else (0.0, ())
            setting = _setting(unit.text, question) if what_to_do and unit.kind != "code" else 0.0
            if not what_to_do:
                bonus = min(bonus, SPECIFIC_BONUS)
            else:
                bonus += setting  # the setting itself, not only its name
            if amount and unit.kind != "code" and _AMOUNT.search(unit.text):
                bonus += AMOUNT_BONUS  # "64 threads" answers "what is the warp size"
            if subject and unit.kind != "code" and _defines(unit.text, subject):
                bonus += DEFINES_BONUS  # "The Local Data Share (LDS) is ..." answers "what is the LDS"
            score += bonus
            lead = unit.start < lead_end
            if lead:
                score += LEAD_BONUS  # written as the answer to the question the note's title asks
            factor = 1.0
            deprecated = _DEPRECATED_OPTION.match(unit.text)
            if setting and unit.kind == "command":
                pass  # `export HIP_PLATFORM=nvidia`: a one-line setting is an answer, scored as a sentence
            elif (
                unit.kind == "code"
                or len(unit.text) < 25
                or len(unit.text.split()) < MIN_WORDS
                or _FILLER.search(unit.text)
                or _FRAGMENT.match(unit.text)
            ):
                factor = 0.5  # code is attached to a sentence, never the answer's first line
            elif (
                unit.text.count('"') >= 4
                or NOT_PROSE.match(unit.text)
                or (len(unit.text) > RUN_ON_CHARS and not lead)  # the answer a note was written to give
            ):
                factor = 0.6  # csv-table cells, console output, run-on text
            elif deprecated and deprecated.group(1).lower() not in question.lower():
                factor = DEPRECATED_OPTION_FACTOR  # on its way out, and not what the question names
            elif _POINTER.match(unit.text):
                factor = POINTER_FACTOR  # "For more information, see ...": where to read, not the answer
            elif len(unit.text) > LONG_CHARS:
                # a long sentence holds more of the question's words and fills the budget alone
                factor = 1 - LONG_PENALTY * (len(unit.text) - LONG_CHARS) / 100
            if passage.beside:
                factor *= BESIDE_FACTOR  # not retrieved itself, only next to a passage that was
            out.append(Scored(unit, rank, score * factor, names, bonus * factor, passage.reach))
    out.sort(key=lambda s: -s.score)
    if out:
        best = out[0]
        follow = [
            replace(s, score=s.score + NEXT_BONUS)
            if s.passage == best.passage and s.unit.block == best.unit.block and s.unit.start >= best.unit.end
            else s
            for s in out
        ]
        out = sorted(follow, key=lambda s: -s.score)
    return out


def shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 1)].rsplit(" ", 1)[0] + "\u2026"
