"""Which retrieved passages an answer may quote from (made-up passages over the real engine)."""

from __future__ import annotations

import pytest

from hipbot.agents.docs.retrieval import Passage

FILLER = [
    "The cafeteria on the second floor opens at nine and closes at three.",
    "Parking permits are renewed every spring at the front desk.",
    "The library lends books for two weeks and charges no late fees.",
    "Visitors sign in at reception and wear a badge at all times.",
    "The shuttle to the station leaves every half hour from the north gate.",
    "Meeting rooms are booked through the calendar of the facilities team.",
    "Printers on every floor accept badges for secure release of jobs.",
]
TARGET = "The staging ring of the frobnicator is sized with `FROB_RING_MB`; its default is 64 megabytes."


def made_up(i: int, text: str) -> Passage:
    path = f"docs/made-up-{i}.md"
    return Passage(
        10**9 + 10 * i, path, "Made up", f"Part {i}", f"https://example.org/{path}", text, "prose", (), 1.0
    )


def test_an_answer_may_quote_the_eighth_passage(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of five listed passages, the answer's sentences may come from three more: the passage that
    says it can rank eighth behind passages that share only the question's common words."""
    ranked = [made_up(i, text) for i, text in enumerate(FILLER)] + [made_up(7, TARGET)]
    monkeypatch.setattr(engine.retriever, "search", lambda question, k=5, identifiers=None: ranked[:k])
    answer = engine.ask("How is the staging ring of the frobnicator sized?")
    assert "FROB_RING_MB" in answer.answer
    assert len(answer.sources) <= 5
