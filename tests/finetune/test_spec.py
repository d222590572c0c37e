"""Job spec validation: every error a user can make gets its own readable message."""

from __future__ import annotations

import pytest

from hipbot.errors import HipbotError
from hipbot.i18n import localized, using
from hipbot.jobs.finetune.spec import SpecError, load_spec, parse_spec, validate_job
from hipbot.jobs.finetune.spec.parse import _pydantic_message

BASE = {
    "model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "dataset": "alpaca_en_demo",
    "output_dir": "out",
}


def problems(**changes: object) -> list[str]:
    raw = {**BASE, **changes}
    with pytest.raises(SpecError) as info:
        parse_spec({k: v for k, v in raw.items() if v is not None})
    return info.value.problems


def one(**changes: object) -> str:
    found = problems(**changes)
    assert len(found) == 1, found
    return found[0]


def test_llamafactory_defaults_and_aliases() -> None:
    text = """
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: sft
do_train: true
finetuning_type: lora
lora_target: q_proj, v_proj
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 1024
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
compute_type: bf16
ddp_timeout: 180000000
deepspeed: z3_offload
"""
    spec = parse_spec(text)
    assert spec.lora_rank == 8 and spec.alpha == 16 and spec.lora_dropout == 0.0
    assert spec.lora_target == ["q_proj", "v_proj"]
    assert spec.dataset == ["identity", "alpaca_en_demo"]
    assert spec.bf16 is True and spec.precision(bf16_supported=True) == "bf16"
    assert spec.zero_stage == 3 and spec.offload
    assert spec.use_gradient_checkpointing  # LLaMA-Factory's default
    assert parse_spec({**BASE}).lora_target == ["all"]
    lf_paths = parse_spec(
        {**BASE, "deepspeed": "examples/deepspeed/ds_z3_config.json", "template": "qwen3_nothink"}
    )
    assert (
        lf_paths.zero_stage == 3 and not lf_paths.offload
    )  # LLaMA-Factory's example file names map to presets


def test_bf16_is_default_only_where_supported() -> None:
    spec = parse_spec(BASE)
    assert spec.precision(bf16_supported=True) == "bf16"
    assert spec.precision(bf16_supported=False) == "fp32"
    assert parse_spec({**BASE, "fp16": True}).precision(bf16_supported=True) == "fp16"


def test_unknown_key_did_you_mean() -> None:
    assert one(lora_rnak=8) == "unknown key 'lora_rnak'; did you mean 'lora_rank'?"
    assert one(learning_rat=1e-4).endswith("did you mean 'learning_rate'?")
    assert one(completely_unrelated=1) == "unknown key 'completely_unrelated'"


def test_problems_in_chinese_with_the_same_keys_and_values() -> None:
    bad = {"lora_rnak": 8, "cutoff_len": 3.5, "bf16": "maybe", "stage": "dpo", "lora_target": {"a": 1}}
    with pytest.raises(SpecError) as err:
        parse_spec({"model_name_or_path": "m", "dataset": "d", **bad})
    english = str(err.value)
    with using("zh_CN"):
        problems = [localized(p) for p in err.value.problems]
        shown = localized(err.value.message)
    assert str(err.value) == english and english.isascii()  # the error itself stays English
    assert shown.startswith("任务配置 有 5 个问题：\n  - 未知配置项 'lora_rnak'；你是不是想写 'lora_rank'？")
    assert "cutoff_len：输入应为有效的整数，得到的是带小数部分的数（收到的是 3.5）" in problems
    assert "bf16：输入应为有效的布尔值，无法解释该输入（收到的是 'maybe'）" in problems
    assert (
        "stage 'dpo' 不受支持：worker 每个提示词训练一个回答（stage: sft），而不是偏好对（DPO）" in problems
    )
    assert "lora_target：必须是以逗号分隔的字符串或列表（收到的是 {'a': 1}）" in problems  # the spec's own


def test_pydantic_messages_of_other_types_or_wordings_stay_as_pydantic_wrote_them() -> None:
    new_type = {"type": "some_new_type", "loc": ("x",), "msg": "Something new", "input": 1}
    reworded = {"type": "float_parsing", "loc": ("x",), "msg": "Not a number", "input": "a"}
    with using("zh_CN"):
        assert localized(_pydantic_message(new_type)) == "Something new"
        assert localized(_pydantic_message(reworded)) == "Not a number"
        literal = {
            "type": "literal_error",
            "loc": ("x",),
            "msg": "Input should be 'a' or 'b'",
            "ctx": {"expected": "'a' or 'b'"},
        }
        assert localized(_pydantic_message(literal)) == "输入应为 'a' or 'b'"


def test_bf16_and_fp16_together() -> None:
    assert "bf16 and fp16 are both true" in one(bf16=True, fp16=True)


def test_compute_type_alias_errors() -> None:
    assert "compute_type must be one of bf16, fp16, fp32, pure_bf16" in one(compute_type="fp8")
    assert one(compute_type="fp32", bf16=True) == "compute_type: fp32 contradicts bf16: True"
    assert "bf16 and fp16 are both true" in one(compute_type="bf16", fp16=True)


def test_pure_bf16_with_zero3() -> None:
    msg = one(pure_bf16=True, deepspeed="z3")
    assert "pure_bf16 is incompatible with DeepSpeed ZeRO-3" in msg
    assert parse_spec({**BASE, "pure_bf16": True, "deepspeed": "z2"}).pure_bf16


def test_rank_outside_vllm_set() -> None:
    msg = one(lora_rank=1024)
    assert "lora_rank 1024 cannot be served by vLLM: its largest --max-lora-rank is 512" in msg
    assert problems(lora_rank=0)[0] == "lora_rank must be positive, got 0"
    for rank in (4, 12, 320):  # a server with --max-lora-rank at or above the rank serves it
        assert parse_spec({**BASE, "lora_rank": rank}).lora_rank == rank


def test_unservable_targets() -> None:
    assert "vLLM cannot serve LoRA on the embeddings or lm_head" in one(lora_target="q_proj,lm_head")
    assert "modules_to_save" in one(additional_target="embed_tokens")
    assert "DoRA" in one(use_dora=True)
    assert "'all' cannot be combined" in one(lora_target="all,q_proj")


def test_unsupported_method() -> None:
    assert "stage 'dpo' is not supported" in one(stage="dpo")
    assert "finetuning_type 'full' is not supported" in one(finetuning_type="full")
    assert "quantization_bit: 4 is not supported: QLoRA needs" in one(quantization_bit=4)


def test_bad_values() -> None:
    assert one(dataset=None) == "dataset is missing: name one or more datasets declared in dataset_info.json"
    assert "model_name_or_path is required" in problems(model_name_or_path=None)
    assert "set max_steps or num_train_epochs" in one(num_train_epochs=0)
    assert "learning_rate must be positive" in one(learning_rate=0)
    assert "lora_dropout must be in [0, 1)" in one(lora_dropout=1.5)
    assert "cutoff_len must be at least 8" in one(cutoff_len=2)
    assert "per_device_train_batch_size must be positive" in one(per_device_train_batch_size=0)
    assert "val_size must be a fraction" in one(val_size=1.5)
    assert "warmup_ratio must be in [0, 1]" in one(warmup_ratio=2)
    assert "unknown lr_scheduler_type 'cosin'; did you mean 'cosine'?" in one(lr_scheduler_type="cosin")
    assert "unknown template 'lama3'; did you mean 'llama3'?" in one(template="lama3")
    assert "deepspeed 'z4' is neither a preset" in one(deepspeed="z4")
    assert "lora_rank: Input should be a valid integer" in one(lora_rank="eight")


def test_all_problems_reported_at_once() -> None:
    found = problems(lora_rnak=8, bf16=True, fp16=True, lora_rank=700, lora_target="lm_head")
    assert len(found) == 4
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "lora_rank": 700, "fp16": True, "bf16": True})
    assert str(info.value).startswith("job config has 2 problems:")
    assert isinstance(info.value, HipbotError)


def test_not_yaml_or_not_mapping() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec("model_name_or_path: [unclosed")
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_spec("- a\n- b\n")


def test_load_spec_resolves_paths(tmp_path) -> None:
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3}}')
    path = tmp_path / "job.yaml"
    path.write_text("model_name_or_path: m\ndataset: d\ndeepspeed: ds.json\noutput_dir: out\n")
    spec = load_spec(path)
    assert spec.dataset_dir == str(tmp_path / "data") and spec.output_dir == str(tmp_path / "out")
    assert spec.zero_stage == 3 and not spec.offload
    with pytest.raises(HipbotError, match="cannot read job config"):
        load_spec(tmp_path / "missing.yaml")


def test_validate_job_with_attachment() -> None:
    yaml_text = "model_name_or_path: m\ndataset: mine\n"
    ok = validate_job(yaml_text, b'[{"instruction": "a", "output": "b"}]', "mine.json")
    assert ok.ok and ok.error is None
    bad = validate_job(yaml_text, b"not json", "mine.json")
    assert not bad.ok and "mine.json: not valid json" in bad.error
    empty = validate_job(yaml_text, b'[{"instruction": "a"}]', "mine.json")
    assert "no record has a prompt and an answer" in empty.error
    wrong = validate_job(yaml_text, b"x", "mine.txt")
    assert "use a .json, .jsonl, .csv or .parquet file" in wrong.error
    assert "lora_rank 1024" in validate_job(yaml_text + "lora_rank: 1024\n").error
