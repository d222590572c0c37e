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


def test_generated_answer_cites_only_retrieved_passages_or_falls_back(llm_settings) -> None:
    engine = Answerer(llm_settings)
    answer = engine.ask("How do I force HIP to use the NVIDIA platform?", k=3)
    # a small model may cite nothing it was given: the composed answer is then the answer
    assert answer.mode in {"generated", "extractive"}
    paths = [s["path"] for s in answer.sources]
    assert FAQ in paths and answer.more
    cited = [int(n) for n in re.findall(r"\[(\d+)\]", answer.answer)]
    assert cited and max(cited) <= len(answer.sources)
    # Exact lookups never go through the model.
    assert engine.ask("what replaces cudaMemcpyToSymbolAsync?").mode == "lookup"


def test_agent_falls_back_to_grounded_answers_when_the_server_has_no_tool_calling(llm_settings) -> None:
    # This server runs without --enable-auto-tool-choice: the agent must still answer, exactly.
    answer = run_agent(
        "what replaces cudaMemcpyToSymbolAsync?",
        llm_settings,
        history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
    )
    assert answer.mode == "lookup" and answer.apis[0]["hip"] == "hipMemcpyToSymbolAsync"
    assert answer.sources[0]["path"] == "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md"
