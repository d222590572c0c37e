"""The composition half of ``hipbot ask``: a short answer built from the sentences that answer the
question, with numbered citations, and the full passages kept for "More" (``--full``, the bot's
button).

Every sentence, table row and code block of the retrieved passages (``sentences.units``) is scored
by how close its stored sentence embedding is to the question (``Retriever.segment_scores``), how
much of the question's weighted vocabulary it holds, and the rank of its passage; a long sentence
scores a little less (it holds more words and fills the budget alone), and one giving a number
scores more when the question asks how many or how large, one saying what a term is when it asks
what that term is. The best one becomes a
direct first sentence; when several score close to it, 2-4 bullets instead, where a unit that
only names what a chosen one already names loses its bonus for naming it. A code block
that follows a chosen sentence is kept whole when the question asks how to do something.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from hipbot.agents.docs.labels import label
from hipbot.agents.docs.parse import sentence_spans
from hipbot.agents.docs.retrieval import Passage, has_cjk
from hipbot.agents.docs.sentences import Unit, units
from hipbot.agents.docs.vocabulary import glossary_terms

ANSWER_CHARS = 600  # the answer before its sources: one Discord message with room to spare
MAX_BULLETS = 4
CODE_CHARS = 500  # a code block longer than this is left to "More"
COMMAND_CHARS = 120  # a one-line code block up to this long can be quoted as a command
EXTRACT_LIMITS = (1400, 900, 700, 500, 400)  # "More": characters quoted from the 1st..5th passage
FOCUS_WEIGHT = 1  # as much as one word of the question
DENSE_WEIGHT = 0.55
LEXICAL_WEIGHT = 0.45
RANK_WEIGHT = 0.04
BULLET_RATIO = 0.8  # a second unit within this share of the best score makes the answer a list
KEEP_RATIO = 0.55  # units below this share of the best score are never quoted
SOURCE_RATIO = 0.7  # ... nor below this share when they would cite one more passage
NEXT_BONUS = 0.04  # the sentence right after the best one often finishes its thought
NAMES_BONUS = 0.05  # a sentence that names what to use (a macro, option, variable, API) ...
DIRECTIVE_BONUS = 0.04  # ... and says to use it, for a question that asks what to do
SPECIFIC_BONUS = 0.02  # for any other question: a sentence that names something specific
SETTING_BONUS = 0.05  # ... more when it gives the value to set a variable to (`AMD_SERIALIZE_KERNEL=3`)
AMOUNT_BONUS = 0.05  # a sentence that gives a number, for a question that asks how many or how large
DEFINES_BONUS = 0.1  # a sentence that says what a term is, for a question that asks what it is
VALUE_BONUS = 0.1  # ... more again when that value is a word of the question (`HIP_PLATFORM=nvidia`)
BESIDE_FACTOR = 0.85  # a unit of a chunk next to a retrieved one (same section) scores this share
LONG_CHARS = 150  # a unit longer than this loses LONG_PENALTY of its score per 100 characters more
LONG_PENALTY = 0.05
RUN_ON_CHARS = 350  # a sentence longer than this scores 0.6 of its score ...
ROW_CHARS = 250  # ... a table row is quoted cut to this length instead
MIN_WORDS = 4  # fewer words (a bare name, a heading-like fragment) is never the answer
NAME_WEIGHT = 1.5  # the weight of the question's own names (APIs, macros, options) among its terms
NAMED_RATIO = 0.4  # a unit quoting a name the answer lacks is added when within this share of the best

_IDENT_TERM = re.compile(r"^(?=\w*_|(?:hip|cuda|cu[a-z]|roc|miopen|nvrtc)\w{3})\w{6,}$")
_HOW_TO = re.compile(
    r"\bhow (?:do|can|to|should)\b|\bexample\b|\bcommand\b|\bsyntax\b|\bsnippet\b|怎么|如何|示例|例子|命令",
    re.IGNORECASE,
)
_CODE_NAME = re.compile(r"_|^-")  # a variable, macro or option rather than a product or library
_FILLER = re.compile(r"[:,]$")
# A sentence that leans on the one before it: "This ...", "It ...", "... docs warn it hurts ..."
_LEANS = re.compile(
    r"^(?:this|these|that|those|it|they|such|both|either)\b|^[^.;:]{0,50}\b(?:it|them|they)\b", re.IGNORECASE
)
_FRAGMENT = re.compile(r"^(?:[\"']\s*[,)]|[)\]},;])")  # a "sentence" split out of code: starts inside a call
_FENCE = re.compile(r"^\s*(```|~~~)")
# Not prose: a shell or debugger prompt, a runtime log line (":3:hip_peer.cpp :77 : ..."), a MyST
# directive left in the text (":::{grid-item-card} ...").
_NOT_PROSE = re.compile(r"[\[$#>]|\(gdb\)|:\d+:\S|:::")
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


@dataclass(frozen=True)
class Scored:
    unit: Unit
    passage: int  # index into the passages
    score: float
    names: tuple[str, ...] = ()  # what it names that the question does not (lower-cased)
    bonus: float = 0.0  # the share of ``score`` those names earned
    reach: bool = False  # of a note offered from beyond the passages asked for: it leads or stays out


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
    return [(t, name_weight) if _IDENT_TERM.match(t) else (t[:5], 1.0) for t in terms]


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
) -> list[Scored]:
    """Every unit of the prose passages, scored; ``terms`` are (word, weight) pairs and ``dense``
    holds each chunk's sentence embeddings as (start, end, cosine with the question). For a
    question that asks what to do, a unit naming what to use scores higher."""
    what_to_do = bool(_ASKS_WHAT_TO_DO.search(question))
    amount = bool(_ASKS_AMOUNT.search(question))
    asked = _ASKS_WHAT_IS.search(question)
    subject = next((g for g in asked.groups() if g), "") if asked else ""
    keys = [(t, w, _IDENT_TERM.match(t) is not None) for t, w in terms]
    groups = _groups(question, [t for t, _, _ in keys])
    total = _credit(keys, groups, [True] * len(keys)) or 1.0
    out: list[Scored] = []
    for rank, passage in enumerate(passages):
        if passage.kind != "prose":
            continue
        segments = dense.get(passage.chunk_id, [])
        heading = f"{passage.title} {passage.section}".lower()
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
                unit = replace(unit, text=_shorten(unit.text, ROW_CHARS))
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
            factor = 1.0
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
            elif unit.text.count('"') >= 4 or _NOT_PROSE.match(unit.text) or len(unit.text) > RUN_ON_CHARS:
                factor = 0.6  # csv-table cells, console output, run-on text
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
    only names what a chosen one or the fact lines (``said``) already name
    ranks without its bonus; one that says what they say is not quoted again. A note offered from
    beyond the passages (``Passage.reach``) is quoted first or not at all: under the docs' answer
    its sentence is only near the question, not part of the answer."""
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
    if item.unit.kind != "code" and not _NOT_PROSE.match(text):
        return text if len(text.split()) >= MIN_WORDS else None
    for line in passage.text[item.unit.start : item.unit.end].splitlines():
        line = line.strip()
        if name in line.lower():
            ok = len(line) <= COMMAND_CHARS and len(line.split()) > 1 and not _NOT_PROSE.search(line)
            return f"`{line}`" if ok else None
    return None


def _full(chosen: list[Scored], text: str, budget: int) -> bool:
    """Whether ``text`` does not fit as one more bullet under ``chosen``."""
    used = sum(len(c.unit.text) + 6 for c in chosen) + len(text) + 6
    return used > budget or len(chosen) >= MAX_BULLETS


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
            keep = list(chosen)
            while _CODE_NAME.search(name) and len(keep) > 1 and _full(keep, text, budget):
                keep.pop()
            if _full(keep, text, budget):
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
    for item in chosen:
        if item.unit.kind != "sentence" or not _LEANS.match(item.unit.text):
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
        lead = before[0]
        if lead in out:
            if out.index(lead) > out.index(item):  # quoted after the sentence that leans on it
                out.remove(lead)
                out.insert(out.index(item), replace(lead, score=item.score))
            continue
        keep = list(out)
        while len(keep) > 1 and keep[-1] is not item and _full(keep, lead.unit.text, budget):
            keep.pop()  # the last bullets give way to what the sentence leans on
        if _full(keep, lead.unit.text, budget):
            continue
        keep.insert(keep.index(item), replace(lead, score=item.score))
        out = keep
    return out


def _code_after(item: Scored, passage: Passage, terms: list[str], asks_code: bool) -> str | None:
    """The code block right after a chosen sentence, when the question asks for code or the block
    shows one of the question's identifiers."""
    names = [t for t in terms if _IDENT_TERM.match(t) or "_" in t or t.startswith("-")]
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


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 1)].rsplit(" ", 1)[0] + "\u2026"


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
) -> Composed:
    """The short answer: ``fact_lines`` (mapping rows, options) first, then a direct sentence or
    2-4 bullets from the passages, each with its citation; sources ordered so [n] is sources[n-1],
    after ``lead`` (the sources of the fact lines). The sentences come from at most ``listed``
    passages, any of ``passages``; the sources and "More" are those and the best uncited ones, at
    most ``listed`` in all."""
    lead = dedupe_sources(lead or [])
    fact_lines = list(fact_lines or [])
    words = [t for t, _ in terms]
    listed = len(passages) if listed is None else listed
    room = max(budget - sum(len(line) + 1 for line in fact_lines), 160 if fact_lines else budget)
    scored = score_units(passages, terms, dense, question)
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
        body.append(f"{_shorten(first.unit.text, room - 5)} [{cite[first.passage]}]")
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
