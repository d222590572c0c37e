"""The composition half of ``hipbot ask``: an extractive answer (the best passages, trimmed around
the question's words) or, when ``HIPBOT_LLM_URL`` is set, a generated one that may only use them.
"""

from __future__ import annotations

import re

from hipbot.agents.docs.parse import sentence_spans
from hipbot.agents.docs.retrieval import Passage
from hipbot.config import Settings

EXTRACT_LIMITS = (1400, 900, 700, 500, 400)  # characters quoted from the 1st..5th passage
FOCUS_WEIGHT = 1  # as much as one word of the question
GENERATION_PASSAGES = 4  # x 600 characters: fits a 2048-token context with the answer

_IDENT_TERM = re.compile(r"^(?=\w*_|(?:hip|cuda|cu[a-z]|roc|miopen|nvrtc)\w{3})\w{6,}$")


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
    # Words match by a 5-letter stem (inflections), API names only whole: "__shf" would find
    # every shuffle signature, not the __shfl_xor_sync asked about.
    keys = [(t, name_weight) if _IDENT_TERM.match(t) else (t[:5], 1) for t in terms]
    words = [sum(w for key, w in keys if key in text[a:b].lower()) for a, b in spans]
    near = [FOCUS_WEIGHT if focus and a < focus[1] and b > focus[0] else 0 for a, b in spans]
    # on a tie the sentence with the question's own words wins over the dense match
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


def dedupe_sources(sources: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for s in sources:
        key = (s["path"], s["section"])
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def extractive(passages: list[Passage], fact_lines: list[str], terms: list[str]) -> str:
    if not passages and not fact_lines:
        return "The HIP docs have nothing on this. Try naming the CUDA API or the HIP feature."
    parts = list(fact_lines)
    prose = [p for p in passages if p.kind == "prose"] or passages
    if prose:
        parts.append("From the HIP docs:" if not fact_lines else "\nFrom the HIP docs:")
    for n, p in enumerate(prose[:5], 1):
        limit = EXTRACT_LIMITS[n - 1]
        parts.append(
            f"[{n}] {p.title} \u203a {p.section} ({p.path})\n{trim(p.text, terms, limit, focus=p.focus)}\n"
        )
    return "\n".join(parts).strip()


def generated(
    settings: Settings, question: str, passages: list[Passage], fact_lines: list[str], terms: list[str]
) -> str:
    """An LLM answer that may only use the retrieved passages (and the mapping facts), with sources;
    raises HipbotError when the endpoint fails."""
    from hipbot.agents.chat.llm import chat_model, generate

    context = [
        f"[{n}] {p.title} > {p.section} ({p.path})\n{trim(p.text, terms, 600, focus=p.focus)}"
        for n, p in enumerate(passages[:GENERATION_PASSAGES], 1)
    ]
    if fact_lines:
        context.insert(0, "[API] HIPIFY mapping tables\n" + "\n".join(fact_lines))
    text = generate(chat_model(settings), question, "\n\n".join(context))
    cited = "\n".join(
        f"[{n}] {p.path} \u203a {p.section}" for n, p in enumerate(passages[:GENERATION_PASSAGES], 1)
    )
    return f"{text.strip()}\n\nSources:\n{cited}"
