"""The adapter registry and the checks made before anything reaches vLLM (no server needed)."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
from fixtures_vllm import build_lora

from hipbot.cli import main
from hipbot.config import load_settings
from hipbot.errors import HipbotError
from hipbot.jobs.serve.chat import stream_chat
from hipbot.jobs.serve.local_vllm import free_port
from hipbot.jobs.serve.publish import (
    AdapterRejected,
    child_dir,
    inspect_adapter,
    publish,
    register_adapter,
    unpublish,
    unregister_adapter,
)
from hipbot.jobs.serve.registry import Registry, Server, validate_name
from hipbot.jobs.serve.vllm_client import ServerDown

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def settings():
    return load_settings()


@pytest.fixture
def registry(settings) -> Registry:
    return Registry.open(settings)


def _dead_server(registry: Registry, tmp_path: Path, *, base: str = SMOL, max_rank: int = 16) -> Server:
    """A server entry whose port nobody listens on."""
    return registry.add_server(
        Server(
            name="dead",
            url=f"http://127.0.0.1:{free_port()}",
            adapter_dir=tmp_path / "vllm-adapters",
            vllm_adapter_dir="/adapters",
            max_lora_rank=max_rank,
            base_model=base,
            served_model="smollm2",
        )
    )


@pytest.mark.parametrize("name", ["a", "my-adapter", "llama3.1-hip-r8", "0abc"])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "My-Adapter", "a_b", "../etc", ".hidden", "-x", "a/b", "a b", "x" * 65, "é"]
)
def test_bad_names_are_refused(name: str, registry: Registry, settings, lora_rank8: Path) -> None:
    with pytest.raises(HipbotError, match="invalid adapter name"):
        register_adapter(registry, settings, name, lora_rank8, base_model=SMOL)
    assert registry.list() == []


def test_register_records_what_the_files_say(registry: Registry, settings, lora_rank8: Path) -> None:
    adapter = register_adapter(registry, settings, "hip-r8", lora_rank8, job_id="7", owner="ana")
    weights = (lora_rank8 / "adapter_model.safetensors").read_bytes()
    assert adapter.rank == 8
    assert adapter.alpha == 16
    assert adapter.target_modules == ("q_proj", "v_proj")
    assert adapter.sha256 == hashlib.sha256(weights).hexdigest()
    assert adapter.size_bytes > len(weights)
    assert adapter.base_model.endswith("SmolLM2-135M-Instruct")
    assert (adapter.job_id, adapter.owner, adapter.servers, adapter.published_at) == ("7", "ana", (), None)
    assert adapter.path == settings.adapters.resolve() / "hip-r8"
    assert sorted(p.name for p in adapter.path.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert registry.by_job("7") == adapter
    assert [a.name for a in Registry.open(settings).list()] == ["hip-r8"]


def test_register_is_idempotent_but_names_never_change_meaning(
    registry: Registry, settings, lora_rank8: Path, lora_rank32: Path
) -> None:
    first = register_adapter(registry, settings, "hip", lora_rank8)
    assert register_adapter(registry, settings, "hip", lora_rank8) == first
    with pytest.raises(HipbotError, match="already taken by other weights"):
        register_adapter(registry, settings, "hip", lora_rank32)
    unregister_adapter(registry, settings, "hip")
    assert registry.find("hip") is None and not first.path.exists()
    assert register_adapter(registry, settings, "hip", lora_rank32).rank == 32


class _Exploit:
    """Unpickling this would create ``marker``: the test proves nothing is ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickled_weights_are_refused_without_being_loaded(
    registry: Registry, settings, lora_rank8: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil"
    evil.mkdir()
    shutil.copy(lora_rank8 / "adapter_config.json", evil)
    (evil / "adapter_model.bin").write_bytes(pickle.dumps(_Exploit(marker)))
    with pytest.raises(AdapterRejected, match="adapter_model.bin is a pickle: only safetensors"):
        register_adapter(registry, settings, "evil", evil)
    # The same pickle renamed to .safetensors is recognised too.
    (evil / "adapter_model.bin").rename(evil / "adapter_model.safetensors")
    with pytest.raises(AdapterRejected, match="pickle / torch archive"):
        register_adapter(registry, settings, "evil", evil)
    # A pickle beside real safetensors makes the adapter ambiguous.
    shutil.copy(lora_rank8 / "adapter_model.safetensors", evil)
    (evil / "adapter_model.pt").write_bytes(pickle.dumps(_Exploit(marker)))
    with pytest.raises(AdapterRejected, match="adapter_model.pt .a pickle. sits beside"):
        register_adapter(registry, settings, "evil", evil)
    assert not marker.exists()
    assert registry.list() == []


def test_trainer_side_files_are_ignored(
    registry: Registry, settings, lora_rank8: Path, tmp_path: Path
) -> None:
    """HF Trainer writes training_args.bin beside the adapter; it is never read nor copied."""
    out = tmp_path / "job-output"
    shutil.copytree(lora_rank8, out)
    (out / "training_args.bin").write_bytes(pickle.dumps(_Exploit(tmp_path / "pwned")))
    adapter = register_adapter(registry, settings, "from-job", out)
    assert not (adapter.path / "training_args.bin").exists()
    assert not (tmp_path / "pwned").exists()


def test_corrupt_safetensors_is_refused(lora_rank8: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(lora_rank8, bad)
    data = (bad / "adapter_model.safetensors").read_bytes()
    (bad / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        AdapterRejected, match="not a valid safetensors file: tensor .* points outside the file"
    ):
        inspect_adapter(bad)
    (bad / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterRejected, match="adapter_config.json is not valid JSON"):
        inspect_adapter(bad)


def test_weights_outside_lora_layers_are_refused(smollm2_path: Path, tmp_path: Path) -> None:
    adapter = build_lora(smollm2_path, tmp_path / "full", modules_to_save=["lm_head"])
    with pytest.raises(AdapterRejected) as info:
        inspect_adapter(adapter)
    problems = " ".join(info.value.problems)
    assert "modules_to_save=['lm_head']" in problems
    assert "weights outside the LoRA layers: base_model.model.lm_head" in problems


def test_embedding_targets_and_dora_are_refused(lora_rank8: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(lora_rank8, other)
    config = json.loads((other / "adapter_config.json").read_text())
    config |= {"target_modules": ["q_proj", "lm_head"], "use_dora": True}
    (other / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterRejected, match=r"\['lm_head'\] are embedding/output layers.*DoRA"):
        inspect_adapter(other)


def test_rank_above_server_max_is_refused_before_any_request(
    registry: Registry, settings, lora_rank32: Path, tmp_path: Path
) -> None:
    register_adapter(registry, settings, "big", lora_rank32, base_model=SMOL)
    _dead_server(registry, tmp_path, max_rank=16)
    # The server is down: a ServerDown would mean the check ran too late.
    with pytest.raises(AdapterRejected, match="rank 32 is above the server's --max-lora-rank 16"):
        publish(registry, "big", "dead")
    assert registry.deployments() == []
    assert not (tmp_path / "vllm-adapters").exists()


def test_base_model_mismatch_is_refused(
    registry: Registry, settings, lora_rank8: Path, tmp_path: Path
) -> None:
    register_adapter(registry, settings, "hip", lora_rank8)
    _dead_server(registry, tmp_path, base="meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(
        AdapterRejected, match="trained on .*SmolLM2-135M-Instruct, the server serves meta-llama"
    ):
        publish(registry, "hip", "dead")
    with pytest.raises(AdapterRejected, match="no server serves its base model"):
        publish(registry, "hip")


def test_server_down_is_a_clear_error(
    registry: Registry, settings, lora_rank8: Path, tmp_path: Path, capsys
) -> None:
    register_adapter(registry, settings, "hip", lora_rank8)
    server = _dead_server(registry, tmp_path)
    with pytest.raises(ServerDown, match=f"vLLM server dead is not reachable at {server.url}"):
        publish(registry, "hip")
    assert registry.get("hip").servers == ()
    with pytest.raises(ServerDown, match="not reachable"):
        "".join(stream_chat(settings, "hello", base=True, timeout=5))
    assert main(["serve", "publish", "hip"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: vLLM server dead is not reachable") and "Traceback" not in err
    assert main(["serve", "servers", "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["healthy"] is False
    # Unpublishing from a server that is gone forgets the wish (a stopped vLLM forgot it too).
    registry.mark_loaded("hip", "dead", "/adapters/hip", copied=True)
    (result,) = unpublish(registry, "hip")
    assert (result.action, registry.get("hip").servers) == ("forgotten", ())
    assert main(["serve", "sync"]) == 1
    assert "dead: DOWN" in capsys.readouterr().out


def test_chat_needs_a_published_adapter(registry: Registry, settings, lora_rank8: Path) -> None:
    with pytest.raises(HipbotError, match="no adapter named 'nope'"):
        "".join(stream_chat(settings, "hi", adapter="nope"))
    register_adapter(registry, settings, "hip", lora_rank8)
    with pytest.raises(HipbotError, match="registered but not published"):
        "".join(stream_chat(settings, "hi", adapter="hip"))
    with pytest.raises(HipbotError, match="no vLLM server is configured"):
        "".join(stream_chat(settings, "hi", base=True))
    with pytest.raises(HipbotError, match="either an adapter or the base model"):
        "".join(stream_chat(settings, "hi", adapter="hip", base=True))


def test_adapter_paths_stay_inside_their_directory(tmp_path: Path) -> None:
    assert child_dir(tmp_path, "ok.name") == tmp_path.resolve() / "ok.name"
    for name in ("..", "../x", "a/../../b", "/etc"):
        with pytest.raises(HipbotError):
            child_dir(tmp_path, name)


def test_cli_register_and_list(lora_rank8: Path, capsys) -> None:
    assert main(["serve", "register", "cli-r8", "--path", str(lora_rank8), "--owner", "bo"]) == 0
    assert "registered cli-r8: rank 8, q_proj, v_proj" in capsys.readouterr().out
    assert main(["serve", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["owner"], row["rank"], row["servers"]) == ("cli-r8", "bo", 8, [])
    assert main(["serve", "register", "Bad_Name", "--path", str(lora_rank8)]) == 1
    assert "invalid adapter name 'Bad_Name'" in capsys.readouterr().err
    assert main(["serve", "register", "x", "--job", "99"]) == 1
    assert "no job #99" in capsys.readouterr().err
