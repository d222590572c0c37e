"""Real LLaMA-Factory user configs: the shapes of its examples/train_lora/*.yaml and data/dataset_info.json
validate and train; what cannot work here fails naming the key and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.errors import HipbotError
from hipbot.jobs.finetune.datasets import (
    build_examples,
    dataset_attr,
    dataset_problems,
    interleave,
    load_records,
    pack,
    to_messages,
)
from hipbot.jobs.finetune.spec import REFUSED_KEYS, SpecError, load_spec, parse_spec
from hipbot.jobs.finetune.step_log import StepLosses
from hipbot.jobs.finetune.trainer import train, write_job

# examples/train_lora/llama3_lora_sft.yaml, as users copy it
LLAMA3_LORA_SFT = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
resume_from_checkpoint: null

### eval
# eval_dataset: alpaca_en_demo
# val_size: 0.1
# per_device_eval_batch_size: 1
# eval_strategy: steps
# eval_steps: 500
"""

# examples/train_lora/qwen3_lora_sft_ds3.yaml-style: DeepSpeed by LLaMA-Factory's path, eval split on
QWEN3_LORA_SFT_DS3 = """\
model_name_or_path: Qwen/Qwen3-4B-Instruct-2507
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: q_proj,v_proj
deepspeed: examples/deepspeed/ds_z3_config.json  # choices: [ds_z0_config.json, ds_z2_config.json, ds_z3_config.json]
dataset: identity,alpaca_en_demo
template: qwen3_nothink
cutoff_len: 2048
max_samples: 1000
output_dir: saves/qwen3-4b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
val_size: 0.1
per_device_eval_batch_size: 1
eval_strategy: steps
eval_steps: 500
"""

BASE = {"model_name_or_path": "m", "dataset": "d"}


def problems_of(**changes: object) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, **changes})
    return info.value.problems


def refusal(**changes: object) -> str:
    found = problems_of(**changes)
    assert len(found) == 1, found
    return found[0]


def test_llamafactory_examples_validate() -> None:
    spec = parse_spec(LLAMA3_LORA_SFT)
    assert spec.dataset == ["identity", "alpaca_en_demo"] and spec.lora_target == ["all"]
    assert spec.learning_rate == 1e-4 and spec.resume_from_checkpoint is None and spec.bf16
    assert spec.gradient_accumulation_steps == 8 and spec.warmup_ratio == 0.1
    ds3 = parse_spec(QWEN3_LORA_SFT_DS3)
    assert ds3.learning_rate == 1e-4  # PyYAML reads 1e-4 (no dot) as a string
    assert ds3.zero_stage == 3 and not ds3.offload and ds3.has_eval and ds3.eval_steps == 500
    for name, stage, offload in [
        ("ds_z0_config.json", 0, False),
        ("ds_z2_config.json", 2, False),
        ("ds_z2_offload_config.json", 2, True),
        ("ds_z3_offload_config.json", 3, True),
        ("ds_z3_partial_offload_config.json", 3, True),
    ]:
        spec = parse_spec({**BASE, "deepspeed": f"examples/deepspeed/{name}"})
        assert (spec.zero_stage, spec.offload) == (stage, offload), name
    inline = parse_spec({**BASE, "deepspeed": '{"zero_optimization": {"stage": 2}}'})
    assert inline.zero_stage == 2


def test_honoured_training_keys_keep_their_values() -> None:
    spec = parse_spec(
        """
model_name_or_path: m
dataset: a,b
eval_dataset: c
eval_strategy: steps
eval_steps: 5
save_steps: 10
load_best_model_at_end: true
metric_for_best_model: eval_loss
early_stopping_steps: 3
lr_scheduler_type: cosine_with_min_lr
lr_scheduler_kwargs: '{"min_lr_rate": 0.1}'
adam_beta2: 0.95
adam_epsilon: 1e-6
loraplus_lr_ratio: 16.0
neftune_noise_alpha: 5
default_system: You port CUDA to HIP.
enable_thinking: false
mix_strategy: interleave_over
interleave_probs: 0.7,0.3
packing: true
disable_shuffling: true
evaluation_strategy: steps
adafactor: false
"""
    )
    assert spec.lr_scheduler_kwargs == {"min_lr_rate": 0.1} and spec.adam_epsilon == 1e-6
    assert spec.interleave_probs == [0.7, 0.3] and spec.eval_dataset == ["c"] and spec.has_eval
    assert spec.optim == "adamw_torch" and parse_spec({**BASE, "adafactor": True}).optim == "adafactor"


def test_load_spec_llamafactory_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config inside LLaMA-Factory's tree, run from its root: paths relative to the working
    directory (as llamafactory-cli reads them) or to the file, and LLaMA-Factory's DeepSpeed names."""
    (tmp_path / "data").mkdir()
    (tmp_path / "saves" / "prev").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "mine.json").write_text('{"zero_optimization": {"stage": 2}}')
    path = tmp_path / "examples" / "train_lora" / "job.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "model_name_or_path: m\ndataset: d\ndataset_dir: data\n"
        "deepspeed: examples/deepspeed/ds_z3_offload_config.json\nadapter_name_or_path: saves/prev\n"
    )
    monkeypatch.chdir(tmp_path)
    spec = load_spec(path)
    assert spec.zero_stage == 3 and spec.offload  # not in the tree: the preset of that name
    assert Path(spec.dataset_dir) == (tmp_path / "data").resolve()
    assert Path(spec.adapter_name_or_path[0]) == (tmp_path / "saves" / "prev").resolve()
    path.write_text("model_name_or_path: m\ndataset: d\ndeepspeed: examples/deepspeed/mine.json\n")
    assert load_spec(path).zero_stage == 2


def test_ignored_keys_load() -> None:
    """Trackers, the Hub, UI, inference/export, speed switches and other methods' knobs are accepted."""
    spec = parse_spec(
        {
            **BASE,
            "report_to": ["wandb", "tensorboard"],
            "run_name": "x",
            "use_swanlab": True,
            "swanlab_project": "p",
            "push_to_hub": True,
            "hub_model_id": "me/adapter",
            "flash_attn": "fa2",
            "use_unsloth": True,
            "enable_liger_kernel": True,
            "neat_packing": True,
            "tokenized_path": "cache/tok",
            "streaming": False,
            "torch_compile": True,
            "dataloader_pin_memory": False,
            "save_safetensors": True,
            "infer_backend": "vllm",
            "vllm_maxlen": 4096,
            "export_dir": "out",
            "temperature": 0.7,
            "pref_beta": 0.1,
            "freeze_trainable_layers": 2,
            "galore_rank": 16,
            "image_max_pixels": 262144,
            "quantization_method": "bnb",
            "ddp_timeout": 180000000,
            "include_num_input_tokens_seen": True,
            "compute_accuracy": True,
        }
    )
    # the speed switches are recorded as asked; every other key leaves the job as it was
    switches = {
        "flash_attn": "fa2",
        "use_unsloth": True,
        "enable_liger_kernel": True,
        "neat_packing": True,
        "torch_compile": True,
    }
    assert spec.model_dump() == {**parse_spec(BASE).model_dump(), **switches}


def test_refused_keys_with_default_values_load() -> None:
    spec = parse_spec(
        {
            **BASE,
            "quantization_bit": None,
            "rope_scaling": None,
            "fsdp": "",
            "do_predict": False,
            "use_galore": False,
            "use_dora": False,
            "pissa_init": False,
            "create_new_adapter": True,  # only meaningful with adapter_name_or_path
            "sequence_parallel_size": 1,
            "tp_size": 0,
        }
    )
    assert parse_spec({**BASE, "sft_packing": True}).packing  # the old name
    assert parse_spec({**BASE, "train_sampling_strategy": "sequential"}).disable_shuffling  # transformers 5's
    assert parse_spec({**BASE, "activation_checkpointing": False}).use_gradient_checkpointing is False
    # each asks for nothing (create_new_adapter is only recorded): the job is the one without them
    assert spec.model_dump() == {**parse_spec(BASE).model_dump(), "create_new_adapter": True}


@pytest.mark.parametrize("key", sorted(REFUSED_KEYS))
def test_every_refused_key_names_itself_and_why(key: str) -> None:
    msg = refusal(**{key: 4 if key.endswith(("bit", "size")) else "linear"})
    assert msg.startswith(f"{key}: ") and " is not supported: " in msg and msg.endswith(REFUSED_KEYS[key])


def test_refusals_say_why() -> None:
    assert "QLoRA needs bitsandbytes" in refusal(quantization_bit=4)
    assert "LLaMA-Factory refuses rope_scaling" in refusal(rope_scaling="linear")
    assert "use deepspeed: z3" in refusal(fsdp="full_shard auto_wrap")
    assert "stage 'dpo' is not supported: workers train one answer per prompt" in refusal(stage="dpo")
    assert "stage 'pt' is not supported" in refusal(stage="pt")
    assert "vLLM cannot serve OFT adapters" in refusal(finetuning_type="oft")
    assert "full fine-tuning writes a whole model" in refusal(finetuning_type="full")
    assert refusal(optim="paged_adamw_8bit").startswith("optim 'paged_adamw_8bit' needs bitsandbytes")
    assert refusal(optim="galore_adamw").startswith("optim 'galore_adamw' needs galore-torch")
    assert refusal(optim="adamw_trch") == "unknown optim 'adamw_trch'; did you mean 'adamw_torch'?"
    assert "add pissa_convert: true" in refusal(pissa_init=True)
    assert "rank-1024 adapter" in refusal(pissa_init=True, pissa_convert=True, lora_rank=512)
    assert "incompatible with DeepSpeed ZeRO-3" in refusal(
        pissa_init=True, pissa_convert=True, deepspeed="z3"
    )
    assert "merge them into a new base model first" in refusal(adapter_name_or_path="a,b")
    assert "drop create_new_adapter" in refusal(adapter_name_or_path="a", create_new_adapter=True)
    assert "val_size and eval_dataset cannot both be set" in refusal(val_size=0.1, eval_dataset="e")
    assert "mask_history is incompatible with train_on_prompt" in refusal(
        mask_history=True, train_on_prompt=True
    )
    assert "interleave_probs needs mix_strategy" in refusal(interleave_probs="0.5,0.5", dataset="a,b")
    assert "interleave_probs has 1 values for 2 datasets" in refusal(
        interleave_probs="1", dataset="a,b", mix_strategy="interleave_under"
    )
    assert "needs lr_scheduler_kwargs with min_lr or min_lr_rate" in refusal(
        lr_scheduler_type="cosine_with_min_lr"
    )
    assert "has nothing to evaluate on" in refusal(eval_strategy="steps")
    assert "save_strategy equal to eval_strategy" in refusal(
        val_size=0.1, eval_strategy="steps", save_strategy="epoch", load_best_model_at_end=True
    )
    assert "multiple of eval_steps" in refusal(
        val_size=0.1, eval_strategy="steps", eval_steps=3, save_steps=10, load_best_model_at_end=True
    )
    assert "early_stopping_steps needs evaluation" in refusal(early_stopping_steps=3)
    assert "split_special_tokens needs use_fast_tokenizer: false" in refusal(split_special_tokens=True)
    assert "lr_scheduler_kwargs: not valid JSON" in refusal(lr_scheduler_kwargs="{min_lr: }")
    assert "known by name" in refusal(deepspeed="examples/deepspeed/ds_z3_fp8_config.json")


def test_templates_and_hub_dataset_dir() -> None:
    for name in ("qwen3_nothink", "qwen3_5", "gpt_oss", "deepseekr1", "llama3", "qwen3_6"):
        assert parse_spec({**BASE, "template": name}).template == name
    assert refusal(template="lama3") == "unknown template 'lama3'; did you mean 'llama3'?"
    assert "workers cannot download datasets" in refusal(dataset_dir="ONLINE")


def test_typos_still_get_did_you_mean() -> None:
    assert refusal(lora_rnak=8) == "unknown key 'lora_rnak'; did you mean 'lora_rank'?"
    assert refusal(gradient_accumulation_step=2).endswith("did you mean 'gradient_accumulation_steps'?")
    assert refusal(warmup_raito=0.1).endswith("did you mean 'warmup_ratio'?")
    assert refusal(eval_datset="x").endswith("did you mean 'eval_dataset'?")
    assert refusal(lora_traget="all").endswith("did you mean 'lora_target'?")


# ------------------------------------------------------------------------------------- dataset_info


def _info(folder: Path, info: dict, files: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = rows if isinstance(rows, str) else json.dumps(rows)
        path.write_text(text, encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


def test_dataset_info_formats(tmp_path: Path) -> None:
    alpaca = dataset_attr(
        "qa",
        {
            "qa": {
                "file_name": "qa.json",
                "columns": {"prompt": "question", "query": "context", "response": "answer", "system": "sys"},
            }
        },
    )
    row = {"question": "Port it", "context": "cudaFree(p)", "answer": "hipFree(p)", "sys": "Be brief."}
    assert to_messages(row, alpaca) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Port it\ncudaFree(p)"},
        {"role": "assistant", "content": "hipFree(p)"},
    ]
    sharegpt = dataset_attr(
        "chat",
        {
            "chat": {
                "file_name": "c.json",
                "formatting": "sharegpt",
                "columns": {"messages": "dialog", "tools": "tools"},
                "tags": {
                    "role_tag": "speaker",
                    "content_tag": "text",
                    "user_tag": "me",
                    "assistant_tag": "bot",
                },
            }
        },
    )
    row = {
        "dialog": [
            {"speaker": "system", "text": "You port code."},
            {"speaker": "me", "text": "hi"},
            {"speaker": "function_call", "text": '{"name": "hipify"}'},
            {"speaker": "observation", "text": "hipMalloc"},
            {"speaker": "bot", "text": "use hipMalloc"},
        ],
        "tools": [{"name": "hipify"}],
    }
    messages = to_messages(row, sharegpt)
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You port code.")
    assert 'You have access to the following tools:\n[{"name": "hipify"}]' in messages[0]["content"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user", "assistant"]
    openai = dataset_attr(
        "o",
        {
            "o": {
                "file_name": "o.jsonl",
                "formatting": "sharegpt",
                "columns": {"messages": "messages"},
                "tags": {
                    "role_tag": "role",
                    "content_tag": "content",
                    "user_tag": "user",
                    "assistant_tag": "assistant",
                    "system_tag": "system",
                },
            }
        },
    )
    row = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": "a"},
        ]
    }
    assert to_messages(row, openai) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


def test_dataset_files_split_and_num_samples(tmp_path: Path) -> None:
    rows = [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(10)]
    data = _info(
        tmp_path / "data",
        {
            "folder": {"file_name": "parts"},
            "head": {"file_name": "all.json", "split": "train[:3]"},
            "tail": {"file_name": "all.json", "split": "train[80%:]"},
            "more": {"file_name": "all.json", "num_samples": 25},
            "test": {"file_name": "all.json", "split": "test"},
        },
        {
            "all.json": rows,
            "parts/a.jsonl": "\n".join(json.dumps(r) for r in rows[:4]),
            "parts/b.json": rows[4:],
            "parts/README.md": "not data",
        },
    )
    info = json.loads((data / "dataset_info.json").read_text())
    assert len(load_records(dataset_attr("folder", info), data)) == 10
    assert [r["instruction"] for r in load_records(dataset_attr("head", info), data)] == ["q0", "q1", "q2"]
    assert [r["instruction"] for r in load_records(dataset_attr("tail", info), data)] == ["q8", "q9"]
    more = load_records(dataset_attr("more", info), data, seed=0)
    assert len(more) == 25 and {r["instruction"] for r in more} == {f"q{i}" for i in range(10)}
    assert more == load_records(dataset_attr("more", info), data, seed=0)  # seeded
    from datasets import Dataset

    Dataset.from_list(rows[:3]).save_to_disk(str(data / "saved"))  # arrow files plus json metadata
    saved = dataset_attr("saved", {"saved": {"file_name": "saved"}})
    assert [r["instruction"] for r in load_records(saved, data)] == ["q0", "q1", "q2"]
    with pytest.raises(HipbotError, match="split 'test' does not exist: a local file has one split, train"):
        load_records(dataset_attr("test", info), data)


def test_dataset_info_refusals(tmp_path: Path) -> None:
    info = {
        "hub": {"hf_hub_url": "llamafactory/alpaca_en", "formatting": "alpaca"},
        "ms": {"ms_hub_url": "llamafactory/alpaca_en"},
        "hub_and_file": {"hf_hub_url": "tatsu-lab/alpaca", "file_name": "alpaca.json"},
        "script": {"script_url": "hh_rlhf_en"},
        "dpo": {
            "file_name": "dpo.json",
            "ranking": True,
            "columns": {"chosen": "chosen", "rejected": "rejected"},
        },
        "kto": {"file_name": "kto.json", "columns": {"kto_tag": "label"}},
        "mllm": {"file_name": "mllm.json", "formatting": "sharegpt", "columns": {"images": "images"}},
        "bad_split": {"file_name": "x.json", "split": "train[::2]"},
        "bad_n": {"file_name": "x.json", "num_samples": -1},
    }
    with pytest.raises(
        HipbotError,
        match=r"is on the Hugging Face Hub \(hf_hub_url: llamafactory/alpaca_en\) and workers cannot download",
    ):
        dataset_attr("hub", info)
    with pytest.raises(HipbotError, match="is on the ModelScope Hub"):
        dataset_attr("ms", info)
    with pytest.raises(HipbotError, match="workers do not run dataset scripts"):
        dataset_attr("script", info)
    with pytest.raises(HipbotError, match=r"is a preference dataset \(ranking: true"):
        dataset_attr("dpo", info)
    with pytest.raises(HipbotError, match="has a kto_tag column"):
        dataset_attr("kto", info)
    with pytest.raises(HipbotError, match="has images columns: workers train text-only"):
        dataset_attr("mllm", info)
    with pytest.raises(HipbotError, match="is not a split name"):
        dataset_attr("bad_split", info)
    with pytest.raises(HipbotError, match="num_samples must be a positive whole number"):
        dataset_attr("bad_n", info)
    # a Hub entry with a local copy uses the copy; without the file it says where the data lives
    attr = dataset_attr("hub_and_file", info)
    with pytest.raises(HipbotError, match="tatsu-lab/alpaca"):
        load_records(attr, tmp_path)
    (tmp_path / "alpaca.json").write_text('[{"instruction": "q", "output": "a"}]')
    assert load_records(attr, tmp_path) == [{"instruction": "q", "output": "a"}]


def test_dataset_problems_lists_every_dataset(tmp_path: Path) -> None:
    data = _info(
        tmp_path / "data",
        {
            "identity": {"file_name": "identity.json"},
            "alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en", "ms_hub_url": "llamafactory/alpaca_en"},
            "dpo_en_demo": {"file_name": "dpo_en_demo.json", "ranking": True},
            "gone": {"file_name": "gone.json"},
        },
        {"identity.json": [{"instruction": "who are you", "output": "hipbot"}]},
    )
    spec = parse_spec({**BASE, "dataset": "identity,alpaca_en,dpo_en_demo", "eval_dataset": "gone,idenity"})
    found = dataset_problems(spec, data)
    assert len(found) == 4 and "alpaca_en' is on the Hugging Face Hub" in found[0]
    assert "preference dataset" in found[1] and "gone.json does not exist" in found[2]
    assert "did you mean 'identity'?" in found[3]
    assert dataset_problems(parse_spec({**BASE, "dataset": "identity"}), data) == []


def test_mixing_and_packing() -> None:
    a = [{"input_ids": [1] * n, "labels": [1] * n} for n in (3, 3, 3)]
    b = [{"input_ids": [2] * 2, "labels": [2] * 2}]
    assert [x["input_ids"][0] for x in interleave([a, b], "interleave_under", None, 0)] == [1, 2]
    over = interleave([a, b], "interleave_over", None, 0)
    assert [x["input_ids"][0] for x in over] == [1, 2, 1, 2, 1]  # until every one ran out once
    assert len(interleave([a, b], "concat", None, 0)) == 4
    packed = pack(a + b, 8)
    assert sorted(len(x["input_ids"]) for x in packed) == [3, 8]  # first fit, longest first
    assert sum(len(x["labels"]) for x in packed) == 11


# ---------------------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model_dir()


def test_build_examples_with_eval_dataset_system_and_packing(tmp_path: Path, model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    data = write_datasets(tmp_path / "data")
    plain = build_examples(parse_spec(job_yaml(model, data, tmp_path / "o")), tokenizer)
    spec = parse_spec(
        job_yaml(
            model,
            data,
            tmp_path / "o",
            eval_dataset="sharegpt_demo",
            default_system="You port CUDA to HIP.",
            packing=True,
            cutoff_len=256,
        )
    )
    examples = build_examples(spec, tokenizer)
    assert len(examples.eval) == 8 and len(examples.train) < len(plain.train)
    text = tokenizer.decode(examples.train[0]["input_ids"])
    assert "You port CUDA to HIP." in text and text.count("<|im_start|>system") > 1  # several packed in one
    assert "You port CUDA to HIP." not in tokenizer.decode(plain.train[0]["input_ids"])


def test_training_arguments_and_loraplus_optimizer(tmp_path: Path, model: Path) -> None:
    """The honoured keys reach HF TrainingArguments; LoRA+ gives lora_B its own learning rate."""
    from hipbot.jobs.finetune.trainer import _load_model, _lora, _trainer_class, _training_arguments

    spec = parse_spec(
        job_yaml(
            model,
            tmp_path,
            tmp_path / "out",
            adam_beta2=0.95,
            lr_scheduler_type="cosine_with_min_lr",
            lr_scheduler_kwargs={"min_lr_rate": 0.1},
            neftune_noise_alpha=5,
            label_smoothing_factor=0.1,
            disable_shuffling=True,
            val_size=2,
            eval_strategy="steps",
            eval_steps=2,
            loraplus_lr_ratio=16,
            optim="adamw_hf",
            gradient_checkpointing_kwargs={"use_reentrant": True},
        )
    )
    args = _training_arguments(spec, tmp_path / "out", "fp32", use_cpu=True)
    assert args.adam_beta2 == 0.95 and args.lr_scheduler_kwargs == {"min_lr_rate": 0.1}
    assert args.neftune_noise_alpha == 5 and args.label_smoothing_factor == 0.1
    assert args.train_sampling_strategy == "sequential" and args.optim == "adamw_torch"
    assert args.eval_strategy == "steps" and args.eval_steps == 2
    assert args.activation_checkpointing_kwargs == {"use_reentrant": True}
    base, _ = _load_model(spec, "fp32", allow_remote_code=False)
    peft_model = _lora(base, spec, tmp_path / "out")
    rows = [{"input_ids": [1], "labels": [1]}]
    trainer = _trainer_class(spec, StepLosses())(
        model=peft_model, args=args, train_dataset=rows, eval_dataset=rows
    )
    optimizer = trainer.create_optimizer()
    rates = sorted({group["lr"] for group in optimizer.param_groups if group["params"]})
    assert rates == [spec.learning_rate, spec.learning_rate * 16]


def test_pissa_then_continue_the_adapter(tmp_path: Path, model: Path) -> None:
    """pissa_init + pissa_convert trains 2 steps and leaves a plain rank-2r LoRA that changes the
    unmodified base; adapter_name_or_path then continues that adapter (2 more steps, same rank)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    data = write_datasets(tmp_path / "data")
    first = tmp_path / "pissa"
    spec = parse_spec(
        job_yaml(
            model, data, first, max_steps=2, save_steps=2, pissa_init=True, pissa_convert=True, pissa_iter=4
        )
    )
    write_job(tmp_path / "job1", spec, device="cpu")
    assert train(tmp_path / "job1")["global_step"] == 2
    config = json.loads((first / "adapter_config.json").read_text())
    assert config["r"] == 16 and config["init_lora_weights"] is True
    base = AutoModelForCausalLM.from_pretrained(str(model))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        before = base(ids).logits
        after = PeftModel.from_pretrained(base, str(first))(ids).logits
    assert not torch.allclose(before, after) and (after - before).abs().max() < 5

    second = tmp_path / "continued"
    spec = parse_spec(
        job_yaml(model, data, second, max_steps=2, save_steps=2, adapter_name_or_path=str(first))
    )
    write_job(tmp_path / "job2", spec, device="cpu")
    assert train(tmp_path / "job2")["global_step"] == 2
    assert json.loads((second / "adapter_config.json").read_text())["r"] == 16
    from safetensors.torch import load_file

    old, new = (
        load_file(str(first / "adapter_model.safetensors")),
        load_file(str(second / "adapter_model.safetensors")),
    )
    assert old.keys() == new.keys() and any(not torch.equal(old[k], new[k]) for k in old)


def test_training_with_llamafactory_options(tmp_path: Path, model: Path) -> None:
    """One real run with the options that change training: eval_dataset evaluated every 2 steps with
    the best checkpoint kept and early stopping, LoRA+, NEFTune, a min-lr cosine schedule, packing."""
    data = write_datasets(tmp_path / "data")
    out = tmp_path / "out"
    spec = parse_spec(
        job_yaml(
            model,
            data,
            out,
            max_steps=4,
            save_steps=2,
            eval_dataset="sharegpt_demo",
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=8,
            load_best_model_at_end=True,
            early_stopping_steps=2,
            loraplus_lr_ratio=8,
            neftune_noise_alpha=5,
            lr_scheduler_type="cosine_with_min_lr",
            lr_scheduler_kwargs='{"min_lr_rate": 0.1}',
            warmup_steps=1,
            packing=True,
            default_system="You port CUDA to HIP.",
            disable_shuffling=True,
        )
    )
    write_job(tmp_path / "job", spec, device="cpu")
    metrics = train(tmp_path / "job")
    assert metrics["global_step"] == 4 and "eval_loss" in metrics["eval"]
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "eval_loss" in h] == [2, 4]
    assert state["best_model_checkpoint"].endswith(("checkpoint-2", "checkpoint-4"))
    lrs = [h["learning_rate"] for h in state["log_history"] if "learning_rate" in h]
    assert (
        lrs[0] == 0 and min(lrs[1:]) >= 0.1 * spec.learning_rate * 0.999
    )  # warmup, then down to min_lr_rate
    assert (out / "adapter_model.safetensors").is_file()
