"""A question in CUDA's words asks about the HIP name those words stand for (made-up passages over
the real engine)."""

from __future__ import annotations

import pytest

from hipbot.agents.docs.retrieval import Passage, Retriever, translated_names

PASSAGES = [
    "Separate compilation of a large project keeps each translation unit small.",
    "Compilation of each file on its own lets the build run many jobs in parallel.",
    "A project split into many files compiles faster after a small change.",
    "Relinking after separate compilation is quick when only one file changed.",
    "Pass `-fgpu-rdc` to every compile and to the link step.",
]


def made_up(i: int, text: str) -> Passage:
    path = f"docs/made-up-{i}.md"
    return Passage(
        10**9 + 10 * i, path, "Made up", f"Part {i}", f"https://example.org/{path}", text, "prose", (), 1.0
    )


def test_cuda_terms_name_their_hip_names() -> None:
    assert translated_names("Can I limit registers like maxrregcount?") == ["__launch_bounds__"]
    assert translated_names("Is relocatable device code supported?") == ["-fgpu-rdc"]
    assert translated_names("How do warps vote?") == []
    # building for a GPU is what --offload-arch says; running on one is not
    assert translated_names("How do I build one binary for both MI100 and MI250?") == ["-offload-arch"]
    assert translated_names("Compiling for gfx90a fails with an unknown target") == ["-offload-arch"]
    assert translated_names("PyTorch on my Radeon runs out of memory") == []


def test_the_hip_name_is_searched_for_and_quoted(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    ranked = [made_up(i, text) for i, text in enumerate(PASSAGES)]
    searched: list[str] = []

    def search(self, question: str, k: int = 5, identifiers: list[str] | None = None) -> list[Passage]:
        searched.extend(identifiers or [])
        return ranked[:k]

    # on the class: the engine reloads its retriever when another test has re-ingested
    monkeypatch.setattr(Retriever, "search", search)
    answer = engine.ask("How does separate compilation work for a project with many files?")
    assert "-fgpu-rdc" in searched
    assert "-fgpu-rdc" in answer.answer
