"""Generated answers (``HIPBOT_LLM_URL``) in the same shape as the composed ones: the direct answer
first, numbered citations that point at retrieved passages only, in the question's language.

The model sees the passages numbered [1]..[n] (and the mapping facts as [API]); its citations are
checked against those numbers. An answer that cites nothing retrieved (no [n] at all, or only
numbers that were never given) is not trusted: the caller falls back to the composed answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipbot.agents.docs.compose import trim
from hipbot.agents.docs.retrieval import Passage
from hipbot.config import Settings

GENERATION_PASSAGES = 4  # x 600 characters: fits a 2048-token context with the answer
_CITATION = re.compile(r"\[(\d{1,2})\]")
_LANGUAGE = {"zh": "Chinese (简体中文)", "en": "English"}


@dataclass
class Generated:
    """The model's answer with its citations renumbered to ``sources`` (cited passages only)."""

    text: str
    sources: list[dict[str, str]]


def context_for(passages: list[Passage], fact_lines: list[str], terms: list[str]) -> str:
    context = [
        f"[{n}] {p.title} > {p.section} ({p.path})\n{trim(p.text, terms, 600, focus=p.focus)}"
        for n, p in enumerate(passages[:GENERATION_PASSAGES], 1)
    ]
    if fact_lines:
        context.insert(0, "[API] HIPIFY mapping tables and documented options\n" + "\n".join(fact_lines))
    return "\n\n".join(context)


def checked(text: str, passages: list[Passage]) -> Generated | None:
    """The answer with citations renumbered in order of first use, or None when it cites no
    retrieved passage. Citations of numbers that were never given are dropped from the text."""
    given = len(passages[:GENERATION_PASSAGES])
    order: list[int] = []
    for match in _CITATION.finditer(text):
        n = int(match.group(1))
        if 1 <= n <= given and n not in order:
            order.append(n)
    if not order:
        return None
    renumber = {old: new for new, old in enumerate(order, 1)}

    def replace(match: re.Match[str]) -> str:
        n = int(match.group(1))
        return f"[{renumber[n]}]" if n in renumber else ""

    body = re.sub(r"[ \t]+\n", "\n", _CITATION.sub(replace, text)).strip()
    return Generated(body, [passages[n - 1].source() for n in order])


def generated(
    settings: Settings,
    question: str,
    passages: list[Passage],
    fact_lines: list[str],
    terms: list[str],
    lang: str = "en",
) -> Generated | None:
    """An LLM answer that may only use the retrieved passages (and the mapping facts); None when
    it cites nothing retrieved. Raises HipbotError when the endpoint fails."""
    from hipbot.agents.chat.llm import answer_model, generate

    asked = f"{question}\n\n(Answer in {_LANGUAGE.get(lang, 'English')}.)"
    text = generate(answer_model(settings), asked, context_for(passages, fact_lines, terms))
    return checked(text.strip(), passages)
