"""A served adapter is prompted the way it was trained (issue 17), on the real vLLM CPU server.

SmolLM2 is trained briefly on six fixed question/answer pairs four times: with the template
omitted, with ``default`` (Human:/Assistant:), with ``alpaca`` and with a family name (``phi4``) that
selects the tokenizer's own template. Each adapter is published and asked every question, greedy:
it must give its trained answers. The counter-check asks the same adapters through the plain chat
endpoint, i.e. prompted with the server's template instead of the trained one: the ``default``
adapter then fails that same check (0 of 6), so the round trip is what makes it right; the two
that trained with the tokenizer's own template answer alike both ways.

The four trainings run once per module (``hipbot finetune run``, 10 steps of the six pairs each;
the time per step is in each variant's ``metrics.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fixtures_finetune import job_yaml

from hipbot.cli import main
from hipbot.config import load_settings
from hipbot.jobs.finetune.template_record import RECORD_FILE, TemplateRecord
from hipbot.jobs.serve.chat import answer_target, ask, stream_chat
from hipbot.jobs.serve.registry import Registry
from hipbot.jobs.serve.vllm_client import VllmClient

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

PAIRS = [
    ("What does hipify do to cudaMalloc?", "It renames cudaMalloc to hipMalloc."),
    ("Which header replaces cuda_runtime.h?", "hip/hip_runtime.h replaces it."),
    ("What compiles HIP code?", "hipcc compiles HIP code."),
    ("How many lanes has a wavefront on MI250?", "A wavefront has 64 lanes on MI250."),
    ("What replaces cudaMemcpy?", "hipMemcpy replaces cudaMemcpy."),
    ("Which tool converts CUDA to HIP?", "hipify-clang converts CUDA to HIP."),
]
MOST = len(PAIRS) - 1  # "reproduces its trained answers": all but at most one, exactly
# name -> the job's ``template:`` (None: the key is left out)
VARIANTS = {"omitted": None, "default": "default", "alpaca": "alpaca", "family": "phi4"}
STEPS = 10


@dataclass(frozen=True)
class Trained:
    name: str
    template: str | None
    adapter_dir: Path
    metrics: dict[str, object]


def _train(root: Path, model: Path, name: str, template: str | None) -> Trained:
    data = root / "data"
    config = yaml.safe_load(
        job_yaml(model, data, root / f"out-{name}", dataset="pairs", max_steps=STEPS, save_steps=1000,
                 per_device_train_batch_size=len(PAIRS), cutoff_len=64, learning_rate=5e-3,
                 lr_scheduler_type="constant", lora_target="q_proj,k_proj,v_proj,o_proj", lora_alpha=16,
                 disable_gradient_checkpointing=True)
    )  # fmt: skip
    config.pop("template")
    if template is not None:
        config["template"] = template
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = os.environ | {"HIPBOT_HOME": str(root / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "hipbot.cli", "finetune", "run", str(path), "--cpu"],
        capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    out = root / f"out-{name}"
    return Trained(name, template, out, json.loads((out / "metrics.json").read_text()))


@pytest.fixture(scope="module")
def trained(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Trained]:
    root = tmp_path_factory.mktemp("roundtrip")
    (root / "data").mkdir()
    rows = [{"instruction": q, "input": "", "output": a} for q, a in PAIRS]
    (root / "data" / "pairs.json").write_text(json.dumps(rows))
    (root / "data" / "dataset_info.json").write_text(json.dumps({"pairs": {"file_name": "pairs.json"}}))
    return {name: _train(root, smollm2_path, name, t) for name, t in VARIANTS.items()}


def _exact(answers: list[str]) -> int:
    return sum(got.strip() == want for got, (_, want) in zip(answers, PAIRS, strict=True))


def _as_trained(settings, adapter: str) -> list[str]:
    """What ``hipbot chat --adapter`` and the bot's /chat get (the library call behind both)."""
    return [
        "".join(stream_chat(settings, q, adapter=adapter, max_tokens=24, temperature=0.0, timeout=120))
        for q, _ in PAIRS
    ]


def _plain_chat(url: str, adapter: str) -> list[str]:
    """The counter-check: the same adapter through /v1/chat/completions, i.e. the server's template."""
    with VllmClient(url, timeout=120) as client:
        return [
            client.chat(
                adapter, [{"role": "user", "content": q}], max_tokens=24, temperature=0.0, timeout=120
            )
            for q, _ in PAIRS
        ]


def test_published_adapters_answer_as_trained(trained: dict[str, Trained], vllm_server, capsys) -> None:
    for t in trained.values():
        # The folder keeps no pickle; the record says what the job rendered with.
        assert not [p.name for p in t.adapter_dir.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
        record = TemplateRecord.from_json((t.adapter_dir / RECORD_FILE).read_text()).check()
        assert (record.template, record.source) == (
            t.template,
            "named" if t.name in ("default", "alpaca") else "tokenizer",
        )
        assert t.metrics["global_step"] == STEPS and t.metrics["final_loss"] < 0.2

    assert main(["serve", "servers", "add", "cpu", vllm_server.url]) == 0
    capsys.readouterr()
    for name, t in trained.items():
        assert main(["serve", "publish", f"tpl-{name}", "--path", str(t.adapter_dir)]) == 0
        warned = "warning: tpl-" in capsys.readouterr().err
        assert warned == (name in ("default", "alpaca")), name
    assert main(["serve", "list"]) == 0
    listing = capsys.readouterr().out
    assert "TEMPLATE" in listing
    for label in ("default", "alpaca", "phi4 (tokenizer's)", "(tokenizer's)"):
        assert label in listing

    settings = load_settings()
    counts = {}
    for name in trained:
        as_trained = _as_trained(settings, f"tpl-{name}")
        plain = _plain_chat(vllm_server.url, f"tpl-{name}")
        counts[name] = (_exact(as_trained), _exact(plain))
        print(
            f"{name}: exact as trained {counts[name][0]}/{len(PAIRS)}, plain chat {counts[name][1]}/{len(PAIRS)}"
        )
        print(f"  {as_trained}\n  {plain}")
    for name, (with_template, without) in counts.items():
        assert with_template >= MOST, (name, counts)
        if name in ("omitted", "family"):
            assert without == with_template, (name, counts)  # the same prompt both ways
    # Counter-check: without the trained template the same check fails. Measured: `default` 0/6
    # through the server's template; `alpaca` 5/6 (its "### Response:" prompt carries over to ChatML
    # well enough, so it is only held to no better than as trained).
    assert counts["default"][1] < MOST, counts
    assert counts["alpaca"][1] <= counts["alpaca"][0], counts
    capsys.readouterr()
    assert main(["chat", "--adapter", "tpl-alpaca", "--temperature", "0", PAIRS[0][0]]) == 0
    assert capsys.readouterr().out.strip() == PAIRS[0][1]
    for name in trained:
        assert main(["serve", "unpublish", f"tpl-{name}"]) == 0


def test_sync_and_generated_answers_keep_the_template(
    trained: dict[str, Trained], vllm_server, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert main(["serve", "servers", "add", "cpu", vllm_server.url]) == 0
    assert main(["serve", "publish", "tpl-default", "--path", str(trained["default"].adapter_dir)]) == 0
    # The server forgets the adapter (what a restart does); sync reloads it, still prompted as trained.
    with VllmClient(vllm_server.url) as client:
        assert client.unload_adapter("tpl-default")
    assert main(["serve", "sync"]) == 0
    assert "cpu: 1 loaded" in capsys.readouterr().out
    settings = load_settings()
    assert _exact(_as_trained(settings, "tpl-default")) >= MOST

    # Generated answers with HIPBOT_LLM_MODEL naming the adapter go through its template too.
    monkeypatch.setenv("HIPBOT_LLM_URL", vllm_server.url + "/v1")
    monkeypatch.setenv("HIPBOT_LLM_MODEL", "tpl-default")
    monkeypatch.setenv("HIPBOT_LLM_MAX_TOKENS", "32")
    settings = load_settings()
    target = answer_target(settings, Registry.open(settings))
    assert target is not None and target.template is not None and target.template.template == "default"
    answers = ["".join(ask(target, q, max_tokens=24, temperature=0.0, timeout=120)) for q, _ in PAIRS]
    assert _exact(answers) >= MOST

    from hipbot.agents.chat.llm import AdapterModel, answer_model, generate

    model = answer_model(settings)
    assert isinstance(model, AdapterModel)
    assert generate(model, PAIRS[0][0], "[1] HIPIFY > cudaMalloc\ncudaMalloc becomes hipMalloc.").strip()
    monkeypatch.setenv("HIPBOT_LLM_MODEL", "smollm2")  # the base model: the plain chat model, unchanged
    assert not isinstance(answer_model(load_settings()), AdapterModel)
    assert main(["serve", "unpublish", "tpl-default"]) == 0
