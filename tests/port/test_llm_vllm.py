"""``hipbot port --llm`` against the real vLLM CPU server (SmolLM2-135M): a unit no rule fixes goes
to the model with its diagnostics, the request reaches the server, and whatever the small model
answers, the tree is left as the rules left it unless the unit then compiles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from hipbot.cli import main

pytestmark = [pytest.mark.hipcc, pytest.mark.vllm, pytest.mark.slow]

# Compiles after translation except for one name the source never declares: no rule knows it.
BROKEN = (
    "#include <cuda_runtime.h>\n"
    "__global__ void scale(float* x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] = x[i] * undefined_scale;\n"
    "}\n"
)
GOOD = "#include <cuda_runtime.h>\n__global__ void one(float* x) { x[0] = 1.0f; }\n"


def _chat_requests(url: str) -> float:
    """Chat completions the server answered (its Prometheus ``http_requests_total``)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    pattern = r'^http_requests_total\{handler="/v1/chat/completions",[^}]*status="2xx"\} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def _port(src: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["port", str(src), "-o", str(out), "--rocm", "5.2", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_model_stage_asks_the_server_and_keeps_only_what_compiles(
    vllm_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken.cu").write_text(BROKEN)
    (src / "good.cu").write_text(GOOD)

    _, rules_only = _port(src, tmp_path / "rules", capsys, "--no-llm")
    assert rules_only["summary"]["model"] == "off"
    by_source = {u["source"]: u for u in rules_only["units"]}
    assert by_source["good.cu"]["status"] == "compiled"
    assert by_source["broken.cu"]["status"] == "failed"

    monkeypatch.setenv("HIPBOT_LLM_URL", vllm_server.url + "/v1")
    monkeypatch.setenv("HIPBOT_LLM_MAX_TOKENS", "128")  # an edit is short; the CPU server is slow
    before = _chat_requests(vllm_server.url)
    _, with_model = _port(src, tmp_path / "model", capsys, "--llm")
    assert _chat_requests(vllm_server.url) >= before + 1  # the failing unit went to the model
    assert with_model["summary"]["model"] != "off"
    units = {u["source"]: u for u in with_model["units"]}
    assert units["good.cu"]["status"] == "compiled" and units["good.cu"]["stage"] != "model"
    broken = units["broken.cu"]
    out_rules = (tmp_path / "rules" / by_source["broken.cu"]["output"]).read_bytes()
    out_model = (tmp_path / "model" / broken["output"]).read_bytes()
    if broken["status"] == "compiled":  # the model's edit made it compile: a diff with its reason
        assert broken["stage"] == "model"
        assert any(e["rule"] == "model" and e["diff"] for e in broken["edits"])
        assert b"undefined_scale" not in out_model
    else:  # anything else the model said was refused: the file is as the rules left it
        assert out_model == out_rules
        assert not any(e["rule"] == "model" for e in broken["edits"])
        assert broken["cause"]
