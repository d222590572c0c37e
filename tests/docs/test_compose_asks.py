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


KERNEL = (
    "Yes: the frobnicator runtime works with the driver in the stock Linux kernel from kernel 4.18 on, "
    "where the compute interface landed, so on a distribution kernel you install only the user-space "
    "packages (`frobctl install --no-module`) and skip the vendor module, which only adds features "
    "that later kernels gain anyway; check the kernel with `uname -r` first.\n"
    "- The vendor module of the frobnicator runtime is tested against the LTS kernels of each distribution.\n"
)


def test_the_first_paragraph_of_a_note_answering_the_question_leads_however_long() -> None:
    """A note whose title is the question asked (``Retriever.answering``) was written to answer it
    with its first paragraph: that paragraph outscores its bullets even past the run-on length
    that costs other sentences 0.4 of their score; for another question the bullet leads."""
    note = Passage(
        7, "notes/kernel.md", "Kernel", "Kernel", "https://example.org/7", KERNEL, "prose", (), 1.0
    )
    assert len(KERNEL.splitlines()[0]) > 350
    terms = [("frobnicator", 1.0), ("distribution", 1.0), ("kernel", 0.6), ("vendor", 0.6), ("module", 0.6)]
    question = "Can I run the frobnicator runtime on my distribution's kernel instead of the vendor module?"
    first = compose(question, [note], terms, {}, answering=frozenset({7})).text.splitlines()[0]
    assert first.removeprefix("- ").startswith("Yes: the frobnicator runtime works"), first
    first = compose(question, [note], terms, {}).text.splitlines()[0]
    assert "LTS kernels" in first, first
