"""Composition: a sentence that gives the value to set a variable to (made-up docs)."""

from __future__ import annotations

from hipbot.agents.docs.compose import compose
from hipbot.agents.docs.retrieval import Passage

CRASHES = """Use `frobtrace` to find the job that crashes the frobnicator every few runs.

Set `FROB_SERIAL=1` to find the job that crashes the frobnicator.
"""


def passage(text: str) -> Passage:
    path = "docs/crashes.rst"
    return Passage(1, path, "Frobnicator", "Crashes", f"https://example.org/{path}", text, "prose", (), 1.0)


TERMS = [("frobnicator", 1.0), ("crashes", 1.0), ("job", 0.6), ("find", 0.6), ("runs", 0.2)]


def test_a_setting_with_its_value_leads() -> None:
    """Two sentences that both name what to use: for a question that asks what to do, the one
    that also gives the variable's value (the setting itself) leads."""
    question = "The frobnicator crashes every few runs. How can I find the job that crashes it?"
    out = compose(question, [passage(CRASHES)], TERMS, {})
    assert "FROB_SERIAL=1" in out.text.splitlines()[0], out.text


def test_a_setting_the_question_names_earns_nothing_more() -> None:
    """The variable the question already names is not news: the first sentence keeps the lead."""
    question = "The frobnicator crashes with FROB_SERIAL=1 set. How can I find the job that crashes it?"
    out = compose(question, [passage(CRASHES)], TERMS, {})
    assert "frobtrace" in out.text.splitlines()[0], out.text


def test_a_compiler_define_is_no_setting() -> None:
    """`-DFROB_SERIAL=1` on a command line defines a macro for one build: no setting's bonus."""
    text = CRASHES.replace("`FROB_SERIAL=1`", "`-DFROB_SERIAL=1`")
    question = "The frobnicator crashes every few runs. How can I find the job that crashes it?"
    out = compose(question, [passage(text)], TERMS, {})
    assert "frobtrace" in out.text.splitlines()[0], out.text


BACKENDS = """The frobnicator picks its backend when it starts, from the fast backend or the safe backend.

```shell
export FROB_BACKEND=fast
```

The fast backend of the frobnicator runs jobs in parallel.
"""


def backends(text: str) -> Passage:
    path = "docs/backends.rst"
    return Passage(2, path, "Frobnicator", "Backends", f"https://example.org/{path}", text, "prose", (), 1.0)


def test_a_one_line_setting_is_scored_as_a_sentence() -> None:
    """A code block that only sets a variable (`export FROB_BACKEND=fast`) is the answer to "how
    do I make it use ...", not code to attach to a sentence: it leads."""
    question = "How do I make the frobnicator use the fast backend?"
    terms = [("frobnicator", 1.0), ("fast", 0.8), ("backend", 0.8)]
    out = compose(question, [backends(BACKENDS)], terms, {})
    assert "`export FROB_BACKEND=fast`" in out.text.splitlines()[0], out.text


PLATFORMS = """The frobnicator runs on the fast backend or the safe backend.

```shell
export FROB_BACKEND=safe
```

```shell
export FROB_BACKEND=fast
```
"""


def test_the_setting_to_the_value_asked_for_leads() -> None:
    """Of two settings of one variable, the one whose value the question names (a word that is no
    search term, as "nvidia" or "amd" in the HIP docs) leads."""
    question = "How do I make the frobnicator use the fast backend?"
    terms = [("frobnicator", 1.0), ("backend", 0.8)]
    out = compose(question, [backends(PLATFORMS)], terms, {})
    assert "`export FROB_BACKEND=fast`" in out.text.splitlines()[0], out.text
