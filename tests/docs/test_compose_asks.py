"""Composition: which questions ask what to do (made-up docs)."""

from __future__ import annotations

from hipbot.agents.docs.compose import compose
from hipbot.agents.docs.retrieval import Passage

SNAPSHOT = """The frobnicator writes the state of every job to a snapshot file in a binary format.
A snapshot file of the frobnicator holds the queue of every job at the time it was written.
Use `frobdump` to print a snapshot as text.
"""


def passage(text: str) -> Passage:
    path = "docs/snapshots.rst"
    return Passage(1, path, "Frobnicator", "Snapshots", f"https://example.org/{path}", text, "prose", (), 1.0)


TERMS = [("frobnicator", 1.0), ("snapshot", 1.0), ("file", 0.6), ("print", 0.6), ("text", 0.5)]


def test_is_it_possible_asks_what_to_do() -> None:
    """ "Is it possible to ...?" asks for the way to do it: the sentence naming the tool leads."""
    for question in (
        "Is it possible to print a snapshot file of the frobnicator as text?",
        "Is there a way to print a snapshot file of the frobnicator as text?",
    ):
        out = compose(question, [passage(SNAPSHOT)], TERMS, {})
        first = out.text.splitlines()[0]
        assert "frobdump" in first, out.text
