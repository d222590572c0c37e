"""The agent's tool loop over real HTTP: LangChain's ChatOpenAI talks to an OpenAI-compatible
endpoint on loopback whose replies are scripted (a tool call, then a final answer), so the tool
plumbing is exercised deterministically; the small vLLM test model cannot call tools reliably."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fixtures_docs import IngestedDocs

from hipbot.agents.chat.agent import run_agent


class ScriptedModel(BaseHTTPRequestHandler):
    """First turn: call lookup_api; once a tool result is in the conversation: answer from it."""

    requests: list[dict] = []

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ScriptedModel.requests.append(body)
        tool_results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if tool_results:
            message = {"role": "assistant", "content": f"From the tables: {tool_results[-1][:200]}"}
            finish = "stop"
        else:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "lookup_api",
                    "arguments": json.dumps({"names": "cudaMemcpyToSymbolAsync"}),
                },
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        self._send(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )


@pytest.fixture()
def scripted_endpoint() -> Iterator[str]:
    ScriptedModel.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_agent_calls_a_tool_and_answers_with_its_sources(
    ingested_docs: IngestedDocs, scripted_endpoint: str
) -> None:
    settings = replace(ingested_docs.settings, llm_url=scripted_endpoint, llm_model="scripted")
    answer = run_agent("what replaces cudaMemcpyToSymbolAsync?", settings)

    first, second = ScriptedModel.requests
    assert {t["function"]["name"] for t in first["tools"]} == {
        "lookup_api",
        "search_docs",
        "translate_snippet",
    }
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert "hipMemcpyToSymbolAsync" in tool_message["content"]
    assert answer.mode == "generated"
    assert answer.answer.startswith("From the tables:") and "hipMemcpyToSymbolAsync" in answer.answer
    assert "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md" in {
        s["path"] for s in answer.sources
    }
    assert any(a.get("hip") == "hipMemcpyToSymbolAsync" for a in answer.apis)
