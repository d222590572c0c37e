"""Serving against a real vLLM CPU server (SmolLM2, LoRA on, --max-lora-rank 16).

The whole life of an adapter is one test because each step needs the previous one: a LoRA job
trains through the fine-tune job system, is registered from the job, published, chatted with,
unpublished, published again, survives a real vLLM restart via ``hipbot serve sync``. The restart
is real (about 75 s) rather than simulated by unloading through the API, because what ``sync``
must recover from is a fresh process that has forgotten every runtime-loaded adapter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fixtures_finetune import job_yaml, write_datasets
from fixtures_vllm import build_lora

from hipbot.cli import main
from hipbot.config import load_settings
from hipbot.jobs.finetune.queue import JobQueue
from hipbot.jobs.serve.chat import stream_chat
from hipbot.jobs.serve.publish import publish
from hipbot.jobs.serve.registry import Registry
from hipbot.jobs.serve.vllm_client import AdapterNotLoaded, VllmClient, VllmRejected

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _loaded(url: str) -> dict[str, str]:
    """Adapter name -> path, straight from the server's /v1/models."""
    data = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    return {m["id"]: m["root"] for m in data if m.get("parent")}


def _chat(settings, adapter: str | None = None, **kw) -> list[str]:
    return list(
        stream_chat(settings, "What is the HIP name of cudaMalloc?", adapter=adapter, max_tokens=12,
                    temperature=0.0, timeout=60, **kw)
    )  # fmt: skip


def test_job_adapter_lifecycle_on_vllm(
    request: pytest.FixtureRequest, smollm2_path: Path, tmp_path: Path, capsys
) -> None:
    # 1. Train through the job system (CLI, local queue) while the server starts.
    config = tmp_path / "job.yaml"
    config.write_text(
        job_yaml(smollm2_path, write_datasets(tmp_path / "data"), tmp_path / "out", max_steps=1,
                 per_device_train_batch_size=1, cutoff_len=32, disable_gradient_checkpointing=True)
    )  # fmt: skip
    training = subprocess.Popen(
        [sys.executable, "-m", "hipbot.cli", "finetune", "run", str(config), "--cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
    )
    server = request.getfixturevalue("vllm_server")
    output, _ = training.communicate(timeout=600)
    assert training.returncode == 0, output[-2000:]
    settings = load_settings()
    (job,) = JobQueue.open(settings.database).list()
    assert job.state == "succeeded"

    # 2. Register the job's adapter and a server whose adapter volume is separate (files copied).
    volume = tmp_path / "vllm-volume"
    assert main(["serve", "servers", "add", "cpu", server.url, "--adapter-dir", str(volume)]) == 0
    assert main(["serve", "register", "hip-smol", "--job", str(job.id)]) == 0
    registry = Registry.open(settings)
    adapter = registry.get("hip-smol")
    assert (adapter.job_id, adapter.rank, adapter.target_modules) == (str(job.id), 8, ("q_proj", "v_proj"))
    capsys.readouterr()

    # 3. Publish: visible in /v1/models from the copy in the server's volume; twice is fine.
    assert main(["serve", "publish", "hip-smol"]) == 0
    assert "hip-smol on cpu: loaded" in capsys.readouterr().out
    # The session's server is shared: other tests' adapters may be loaded too.
    assert _loaded(server.url).get("hip-smol") == str(volume.resolve() / "hip-smol")
    assert [r.action for r in publish(registry, "hip-smol")] == ["already loaded"]
    assert registry.get("hip-smol").servers == ("cpu",)
    assert registry.get("hip-smol").published_at is not None

    # 4. Chat with it (streamed in pieces), through the library and the CLI; the base model too.
    pieces = _chat(settings, "hip-smol")
    assert len(pieces) > 1 and "".join(pieces).strip()
    assert main(["chat", "--adapter", "hip-smol", "--max-tokens", "8", "Say hi"]) == 0
    assert capsys.readouterr().out.strip()
    assert "".join(_chat(settings, base=True)).strip()

    # 5. Unpublish: gone from the server and from the copy; chatting says how to fix it.
    assert main(["serve", "unpublish", "hip-smol"]) == 0
    assert "hip-smol on cpu: unloaded" in capsys.readouterr().out
    assert "hip-smol" not in _loaded(server.url)
    assert not (volume / "hip-smol").exists()
    with pytest.raises(AdapterNotLoaded, match="not published on any server"):
        _chat(settings, "hip-smol")

    # 6. Publish again, restart vLLM: the registry still wants it, the server forgot it.
    assert [r.action for r in publish(registry, "hip-smol")] == ["loaded"]
    server.stop()
    server.start()
    assert _loaded(server.url) == {}
    with pytest.raises(AdapterNotLoaded, match="was vLLM restarted") as info:
        _chat(settings, "hip-smol")
    assert info.value.hint == "hipbot serve sync"
    assert main(["serve", "servers", "check"]) == 1
    assert "missing: hip-smol (run: hipbot serve sync)" in capsys.readouterr().out

    # 7. Sync brings it back.
    assert main(["serve", "sync"]) == 0
    assert "cpu: 1 loaded" in capsys.readouterr().out
    assert "hip-smol" in _loaded(server.url)
    assert "".join(_chat(settings, "hip-smol")).strip()
    assert main(["serve", "sync"]) == 0
    assert "cpu: 1 already loaded" in capsys.readouterr().out
    assert main(["serve", "unpublish", "hip-smol"]) == 0


def test_server_refusals_become_clear_errors(
    vllm_server, lora_rank32: Path, lora_rank8: Path, capsys
) -> None:
    # A server record that overstates --max-lora-rank lets the adapter through the pre-check:
    # vLLM's own refusal (HTTP 500 "LoRA rank 32 is greater than max_lora_rank 16") must read well.
    assert main(["serve", "servers", "add", "lying", vllm_server.url, "--max-lora-rank", "64"]) == 0
    assert main(["serve", "publish", "big", "--path", str(lora_rank32)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: vLLM server lying refused to load adapter 'big'")
    assert "LoRA rank 32 is greater than max_lora_rank 16" in err
    assert Registry.open(load_settings()).find("big") is None  # the refused publish is undone whole
    # Stored weights that changed after registration are never served.
    assert main(["serve", "register", "small", "--path", str(lora_rank8)]) == 0
    stored = Registry.open(load_settings()).get("small").path / "adapter_model.safetensors"
    data = bytearray(stored.read_bytes())
    data[-1] ^= 0xFF
    stored.write_bytes(bytes(data))
    assert main(["serve", "publish", "small", "--server", "lying"]) == 1
    assert "stored weights of 'small' changed since registration" in capsys.readouterr().err
    with VllmClient(vllm_server.url) as client:
        with pytest.raises(VllmRejected, match="HTTP 500.*greater than max_lora_rank 16") as info:
            client.load_adapter("big-direct", str(lora_rank32))
        assert info.value.status == 500
        with pytest.raises(VllmRejected, match="HTTP 404.*No adapter found"):
            client.load_adapter("nowhere", "/nonexistent/adapter")
        with pytest.raises(AdapterNotLoaded, match="'ghost' is not loaded on vLLM server") as missing:
            client.chat("ghost", [{"role": "user", "content": "hi"}], max_tokens=2)
        assert missing.value.hint == "publish it: hipbot serve publish ghost"
        assert client.unload_adapter("ghost") is False
        assert "big" not in client.adapters()


def test_a_rank_outside_the_max_lora_rank_choices_is_served(
    vllm_server, smollm2_path: Path, tmp_path: Path
) -> None:
    """--max-lora-rank takes one of (1, 8, 16, 32 ...), adapters any rank up to it: the reason the job
    spec accepts lora_rank 12 and refuses only ranks above the largest choice, 512."""
    adapter = build_lora(smollm2_path, tmp_path / "r12", rank=12)
    with VllmClient(vllm_server.url) as client:
        client.load_adapter("rank12", str(adapter))
        try:
            reply = client.chat("rank12", [{"role": "user", "content": "hi"}], max_tokens=2)
            assert reply.strip()
        finally:
            client.unload_adapter("rank12")


def test_servers_add_asks_the_server_and_check_reports(vllm_server, capsys) -> None:
    assert main(["serve", "servers", "add", "local", vllm_server.url + "/v1/"]) == 0
    server = Registry.open(load_settings()).server("local")
    assert (server.url, server.served_model, server.max_lora_rank) == (vllm_server.url, "smollm2", 16)
    assert server.base_model.endswith("SmolLM2-135M-Instruct")
    capsys.readouterr()
    assert main(["serve", "servers", "check", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["healthy"] and report["models"] == ["smollm2"] and report["missing"] == []
    assert report["latency_ms"] < 1000
