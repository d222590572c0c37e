"""Generation against a real OpenAI-compatible server (vLLM CPU with SmolLM2-135M, shared fixture)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from fixtures_docs import IngestedDocs

from hipbot.agents.chat.agent import run_agent
from hipbot.agents.chat.llm import base_url, served_model
from hipbot.agents.docs.answers import Answerer

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

FAQ = "HIP/docs/how-to/faq.md"


@pytest.fixture(scope="module")
def llm_settings(ingested_docs: IngestedDocs, vllm_server):
    # A short answer keeps this CPU-served test quick; the length does not change what is checked.
    return replace(
        ingested_docs.settings, llm_url=vllm_server.url, llm_model=None, llm_timeout=180.0, llm_max_tokens=64
    )


def test_endpoint_url_and_model_are_discovered(llm_settings, vllm_server) -> None:
    assert base_url(vllm_server.url) == f"{vllm_server.url}/v1"
    assert served_model(llm_settings) == vllm_server.served_model_name


def test_generated_answer_cites_only_retrieved_passages_or_falls_back(llm_settings, monkeypatch) -> None:
    """What the answer cites is what the model's own text cited: its words, its [n] renumbered to the
    passages it was given. Only a model text that cites none of them falls back to the composed answer."""
    from hipbot.agents.chat import llm

    asked: list[tuple[str, str]] = []  # (the passages the model saw, the model's text)
    real_generate = llm.generate

    def recording(model, question: str, context: str, *args, **kwargs) -> str:
        text = real_generate(model, question, context, *args, **kwargs)
        asked.append((context, text))
        return text

    monkeypatch.setattr(llm, "generate", recording)
    engine = Answerer(llm_settings)
    answer = engine.ask("How do I force HIP to use the NVIDIA platform?", k=3)
    assert len(asked) == 1  # the model was asked, once; exact lookups never go through it
    assert engine.ask("what replaces cudaMemcpyToSymbolAsync?").mode == "lookup" and len(asked) == 1
    context, said = asked[0]
    given = dict(re.findall(r"^\[(\d+)\] .* \(([^()]+)\)$", context, flags=re.MULTILINE))
    assert FAQ in given.values() and answer.more
    cited = list(dict.fromkeys(n for n in re.findall(r"\[(\d{1,2})\]", said) if n in given))
    if not cited:  # a small model may cite nothing it was given: the composed answer stands
        assert answer.mode == "extractive" and FAQ in [s["path"] for s in answer.sources]
        return
    assert answer.mode == "generated"
    # the model's words, nothing appended; its citations renumbered in order of first use
    words = lambda text: re.sub(r"\[\d{1,2}\]", " ", text).split()  # noqa: E731
    assert words(answer.answer) == words(said)
    assert sorted({int(n) for n in re.findall(r"\[(\d+)\]", answer.answer)}) == list(range(1, len(cited) + 1))
    cited_paths = list(dict.fromkeys(given[n] for n in cited))  # passages of one page share a source
    assert list(dict.fromkeys(s["path"] for s in answer.sources))[: len(cited_paths)] == cited_paths


def test_agent_falls_back_to_grounded_answers_when_the_server_has_no_tool_calling(llm_settings) -> None:
    # This server runs without --enable-auto-tool-choice: the agent must still answer, exactly.
    answer = run_agent(
        "what replaces cudaMemcpyToSymbolAsync?",
        llm_settings,
        history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
    )
    assert answer.mode == "lookup" and answer.apis[0]["hip"] == "hipMemcpyToSymbolAsync"
    assert answer.sources[0]["path"] == "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md"
