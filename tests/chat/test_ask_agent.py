"""The chat agent's tools and its no-LLM path, on the ingested corpus."""

from __future__ import annotations

import pytest
from fixtures_docs import IngestedDocs

from hipbot.agents.chat.agent import ToolLog, looks_like_code, lookup_api_text, run_agent, search_docs_text
from hipbot.agents.docs.answers import get_answerer
from hipbot.errors import HipbotError

SNIPPET = """```cpp
__global__ void k(float* x) { x[threadIdx.x] = __shfl_down_sync(0xffffffff, x[threadIdx.x], 1); }
int main() { float* d; cudaMalloc(&d, 64); k<<<1, 32>>>(d); cudaDeviceSynchronize(); }
```"""


def test_tools_log_their_sources(ingested_docs: IngestedDocs) -> None:
    engine = get_answerer(ingested_docs.settings)
    log = ToolLog()
    text = lookup_api_text(engine, "cudaMemcpyAsync, cublasSgemm cudaMemcpyAsnc", log)
    assert "`hipMemcpyAsync`" in text and "`rocblas_sgemm`" in text and "Did you mean" in text
    assert {a.get("cuda") for a in log.apis if a["found"]} == {"cudaMemcpyAsync", "cublasSgemm"}
    found = search_docs_text(engine, "HIP_VISIBLE_DEVICES", log)
    assert "[HIP/docs/how-to/debugging.rst" in found
    assert "HIP/docs/how-to/debugging.rst" in {s["path"] for s in log.sources}


def test_agent_without_llm_translates_code_and_answers_questions(ingested_docs: IngestedDocs) -> None:
    assert looks_like_code(SNIPPET) and not looks_like_code("what replaces cudaMalloc?")
    translated = run_agent(SNIPPET, ingested_docs.settings)
    assert "hipMalloc(&d, 64)" in translated.answer and "__shfl_down_sync" in translated.answer
    assert "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md" in {
        s["path"] for s in translated.sources
    }
    answer = run_agent(
        "what replaces cudaMemcpyToSymbolAsync?", ingested_docs.settings, history=[("user", "hi")]
    )
    assert answer.mode == "lookup" and answer.apis[0]["hip"] == "hipMemcpyToSymbolAsync"
    with pytest.raises(HipbotError, match="empty"):
        run_agent("  ", ingested_docs.settings)
