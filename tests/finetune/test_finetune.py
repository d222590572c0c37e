"""Real LoRA training on CPU with a tiny random Llama: datasets, loss, adapter, resume, local CLI run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.errors import HipbotError
from hipbot.jobs.finetune.datasets import (
    IGNORE_INDEX,
    TEMPLATES,
    build_examples,
    dataset_attr,
    encode,
    to_messages,
)
from hipbot.jobs.finetune.memory import estimate, fit_message
from hipbot.jobs.finetune.outcome import last_checkpoint
from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.trainer import read_progress, train, write_job


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model_dir()


@pytest.fixture(scope="module")
def tokenizer(model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model))


def test_alpaca_and_sharegpt_records_become_messages() -> None:
    alpaca = dataset_attr("a", {"a": {"file_name": "a.json"}})
    row = {
        "instruction": "Port this",
        "input": "cudaFree(p)",
        "output": "hipFree(p)",
        "system": "Be brief.",
        "history": [["hi", "hello"]],
    }
    assert to_messages(row, alpaca) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Port this\ncudaFree(p)"},
        {"role": "assistant", "content": "hipFree(p)"},
    ]
    assert to_messages({"instruction": "no answer"}, alpaca) == []
    openai = dataset_attr(
        "o",
        {
            "o": {
                "file_name": "o.json",
                "formatting": "sharegpt",
                "columns": {"messages": "messages"},
                "tags": {
                    "role_tag": "role",
                    "content_tag": "content",
                    "user_tag": "user",
                    "assistant_tag": "assistant",
                },
            }
        },
    )
    msgs = to_messages(
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, openai
    )
    assert msgs == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    sharegpt = dataset_attr("s", {"s": {"file_name": "s.json", "formatting": "sharegpt"}})
    assert to_messages({"conversations": [{"from": "alien", "value": "?"}]}, sharegpt) == []
    with pytest.raises(
        HipbotError, match="dataset 'alpca' is not declared in dataset_info.json; did you mean 'alpaca'"
    ):
        dataset_attr("alpca", {"alpaca": {"file_name": "x.json"}})
    with pytest.raises(HipbotError, match="formatting must be alpaca or sharegpt"):
        dataset_attr("x", {"x": {"file_name": "x.json", "formatting": "rlhf"}})


def test_prompt_tokens_are_masked(tokenizer) -> None:
    messages = [
        {"role": "user", "content": "Which header replaces cuda_runtime.h?"},
        {"role": "assistant", "content": "hip/hip_runtime.h"},
        {"role": "user", "content": "And the compiler?"},
        {"role": "assistant", "content": "hipcc"},
    ]
    out = encode(tokenizer, messages, TEMPLATES["chatml"], 512)
    labels = [t for t in out["labels"] if t != IGNORE_INDEX]
    text = tokenizer.decode(labels)
    assert "hip/hip_runtime.h" in text and "hipcc" in text
    assert "cuda_runtime" not in text and "compiler" not in text and "<|im_start|>user" not in text
    assert out["labels"][0] == IGNORE_INDEX and len(out["input_ids"]) == len(out["labels"])
    # mask_history trains on the last answer only; the tokenizer's own template works the same way
    last = encode(tokenizer, messages, TEMPLATES["chatml"], 512, mask_history=True)
    assert tokenizer.decode([t for t in last["labels"] if t != IGNORE_INDEX]).strip().startswith("hipcc")
    own = encode(tokenizer, messages, tokenizer.chat_template, 512)
    assert "hipcc" in tokenizer.decode([t for t in own["labels"] if t != IGNORE_INDEX])
    assert encode(tokenizer, messages, TEMPLATES["chatml"], 8) is None  # cut before any answer


def test_datasets_from_every_file_type(tmp_path: Path, model: Path, tokenizer) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = write_datasets(tmp_path / "data")
    (data / "rows.csv").write_text(
        "instruction,input,output\nPort cudaMalloc,,hipMalloc\nPort cudaFree,,hipFree\n"
    )
    pq.write_table(
        pa.Table.from_pylist([{"instruction": "Port cudaMemcpy", "output": "hipMemcpy"}]),
        data / "rows.parquet",
    )
    info = json.loads((data / "dataset_info.json").read_text())
    info.update({"csv_demo": {"file_name": "rows.csv"}, "parquet_demo": {"file_name": "rows.parquet"}})
    (data / "dataset_info.json").write_text(json.dumps(info))
    spec = parse_spec(
        job_yaml(
            model,
            data,
            tmp_path / "out",
            dataset="alpaca_demo,sharegpt_demo,csv_demo,parquet_demo",
            val_size=0.2,
        )
    )
    examples = build_examples(spec, tokenizer)
    assert len(examples.train) + len(examples.eval) == 13 + 8 + 2 + 1 and len(examples.eval) == 4
    spec = parse_spec(job_yaml(model, data, tmp_path / "out", dataset="missing_one"))
    with pytest.raises(HipbotError, match="dataset 'missing_one' is not declared"):
        build_examples(spec, tokenizer)


def test_memory_estimate_shapes() -> None:
    llama8b = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    }
    base = {
        "model_name_or_path": "m",
        "dataset": "d",
        "lora_target": "q_proj,v_proj",
        "per_device_train_batch_size": 4,
        "cutoff_len": 1024,
    }
    plain = estimate(parse_spec({**base, "gradient_checkpointing": False}), llama8b)
    gc = estimate(parse_spec(base), llama8b)
    z3 = estimate(parse_spec({**base, "deepspeed": "z3"}), llama8b, n_gpus=4)
    offload = estimate(parse_spec({**base, "deepspeed": "z3_offload"}), llama8b)
    assert plain.params == 8_030_261_248 and plain.trainable == 3_407_872
    assert 38 < plain.total_gib < 43 and 20 < gc.total_gib < 25  # measured on an H200: 39.96 and 21.99
    assert z3.weights < plain.weights / 3 and offload.weights < 3 * 2**30 and offload.cpu_offload > 14 * 2**30
    msg = fit_message(plain, 24, parse_spec({**base, "gradient_checkpointing": False}))
    assert msg.startswith("needs ~40.") and "the largest worker has 24 GiB; try deepspeed: z3_offload" in msg


def test_cli_run_then_resume_and_adapter(tmp_path: Path, model: Path) -> None:
    """`hipbot finetune run` trains 6 steps (loss falls, files written, job recorded); a second run
    with more steps resumes from checkpoint-6; the adapter loads back with peft and changes outputs."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    data = write_datasets(tmp_path / "data")
    out = tmp_path / "out"
    config = tmp_path / "job.yaml"
    config.write_text(
        job_yaml(model, data, out, max_steps=6, save_steps=3, dataset="alpaca_demo,sharegpt_demo")
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hipbot.cli", "finetune", "run", str(config), "--cpu"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "job #1 succeeded: 6 steps" in proc.stdout
    for name in (
        "adapter_model.safetensors",
        "adapter_config.json",
        "tokenizer.json",
        "metrics.json",
        "loss.png",
    ):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_loss"] < metrics["first_loss"] and metrics["global_step"] == 6
    assert last_checkpoint(out).name == "checkpoint-6"

    from hipbot.jobs.finetune.queue import JobQueue

    job = JobQueue.open().get(1)
    assert job.state == "succeeded" and job.adapter_dir == str(out) and job.progress_step == 6
    assert any("loss" in line for line in JobQueue.open().tail(1, 200))

    base = AutoModelForCausalLM.from_pretrained(str(model))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        before = base(ids).logits
        tuned = PeftModel.from_pretrained(base, str(out))
        after = tuned(ids).logits
    assert not torch.allclose(before, after)
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 8

    spec = parse_spec(
        job_yaml(model, data, out, max_steps=8, save_steps=3, dataset="alpaca_demo,sharegpt_demo")
    )
    write_job(tmp_path / "job2", spec, device="cpu")
    resumed = train(tmp_path / "job2")
    assert resumed["resumed_from"] == "checkpoint-6" and resumed["global_step"] == 8
    assert [line["step"] for line in read_progress(tmp_path / "job2")] == [7, 8]
    assert resumed["first_loss"] == metrics["first_loss"]  # the history of the first run is kept

    # a job resumed from its final checkpoint (a worker died while uploading) has no step left to
    # run, yet it still reports and plots the whole run
    (out / "loss.png").unlink()
    write_job(tmp_path / "job3", spec, device="cpu")
    again = train(tmp_path / "job3")
    assert again["resumed_from"] == "checkpoint-8" and again["global_step"] == 8
    assert again["first_loss"] == metrics["first_loss"] and again["final_loss"] == resumed["final_loss"]
    assert (out / "loss.png").is_file() and read_progress(tmp_path / "job3") == []


def test_remote_code_never_runs_without_the_owner(tmp_path: Path) -> None:
    """A model that ships its own code fails to load with the reason; its code is never executed."""
    model = tmp_path / "custom-model"
    model.mkdir()
    marker = tmp_path / "code-ran"
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "hipbot_custom",
                "auto_map": {
                    "AutoConfig": "configuration_x.XConfig",
                    "AutoModelForCausalLM": "modeling_x.XModel",
                },
            }
        )
    )
    (model / "configuration_x.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    data = write_datasets(tmp_path / "data")
    spec = parse_spec(job_yaml(model, data, tmp_path / "out", trust_remote_code=True))
    write_job(tmp_path / "job", spec, device="cpu")
    with pytest.raises(
        HipbotError,
        match=r"needs its own Python code \(trust_remote_code\), which this machine does not allow",
    ):
        train(tmp_path / "job")
    assert not marker.exists()
