"""Settings that each look fine but cannot work together, or give an adapter nobody can serve.

Each check appends full sentences to ``problems``, so a user sees every problem with a config at once.
"""

from __future__ import annotations

import difflib
import json

from hipbot.jobs.finetune.datasets.templates import LLAMAFACTORY_TEMPLATES, TEMPLATES, known_template
from hipbot.jobs.finetune.spec.models import (
    DEEPSPEED_PRESETS,
    LLAMAFACTORY_DEEPSPEED,
    VLLM_MAX_LORA_RANK,
    VLLM_UNSERVABLE_TARGETS,
    JobSpec,
    deepspeed_config_path,
)

SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)
# Optimizers torch itself provides (``adamw_hf`` was transformers' own AdamW, gone in 5.x: same math).
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adafactor", "sgd", "adagrad", "rmsprop")
# transformers' other optimizers (4.x and 5.x names): each needs a package workers do not install.
HF_OPTIMIZERS = (
    "adamw_apex_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_anyprecision",
    "adamw_torch_4bit",
    "adamw_torch_8bit",
    "ademamix",
    "adamw_bnb_8bit",
    "adamw_8bit",
    "ademamix_8bit",
    "lion_8bit",
    "lion_32bit",
    "paged_adamw_32bit",
    "paged_adamw_8bit",
    "paged_ademamix_32bit",
    "paged_ademamix_8bit",
    "paged_lion_32bit",
    "paged_lion_8bit",
    "rmsprop_bnb",
    "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit",
    "galore_adamw",
    "galore_adamw_8bit",
    "galore_adafactor",
    "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise",
    "galore_adafactor_layerwise",
    "lomo",
    "adalomo",
    "grokadamw",
    "schedule_free_radam",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "apollo_adamw",
    "apollo_adamw_layerwise",
    "stable_adamw",
)
# Which package, by the name's prefix (the first that matches).
OPTIMIZER_PACKAGES = (
    ("galore", "galore-torch"),
    ("apollo", "apollo-torch"),
    ("adalomo", "lomo-optim"),
    ("lomo", "lomo-optim"),
    ("schedule_free", "schedulefree"),
    ("grokadamw", "grokadamw"),
    ("adamw_torch_4bit", "torchao"),
    ("adamw_torch_8bit", "torchao"),
    ("adamw_anyprecision", "torchdistx"),
    ("stable_adamw", "torch-optimi"),
    ("adamw_torch_xla", "torch_xla (TPU)"),
    ("adamw_torch_npu", "torch_npu (Ascend)"),
    ("adamw_apex", "NVIDIA apex"),
    ("", "bitsandbytes"),  # 8-bit, paged, lion, ademamix and rmsprop_bnb optimizers
)


def _check_optimizer(spec: JobSpec, problems: list[str]) -> None:
    if spec.optim in OPTIMIZERS:
        return
    if spec.optim in HF_OPTIMIZERS:
        package = next(pkg for prefix, pkg in OPTIMIZER_PACKAGES if spec.optim.startswith(prefix))
        problems.append(
            f"optim {spec.optim!r} needs {package}, which workers do not install; "
            f"use one of {', '.join(o for o in OPTIMIZERS if o != 'adamw_hf')}"
        )
        return
    close = difflib.get_close_matches(spec.optim, OPTIMIZERS + HF_OPTIMIZERS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(OPTIMIZERS)})"
    problems.append(f"unknown optim {spec.optim!r}{hint}")


def _check_lora(spec: JobSpec, problems: list[str]) -> None:
    """LoRA settings that each look fine but give an adapter nobody can serve."""
    if spec.lora_rank <= 0:
        problems.append(f"lora_rank must be positive, got {spec.lora_rank}")
    elif spec.lora_rank > VLLM_MAX_LORA_RANK:
        problems.append(
            f"lora_rank {spec.lora_rank} cannot be served by vLLM: its largest --max-lora-rank is "
            f"{VLLM_MAX_LORA_RANK}; try lora_rank: {VLLM_MAX_LORA_RANK} or lower"
        )
    if spec.alpha <= 0:
        problems.append(f"lora_alpha must be positive, got {spec.alpha}")
    if not 0.0 <= spec.lora_dropout < 1.0:
        problems.append(f"lora_dropout must be in [0, 1), got {spec.lora_dropout}")
    if not spec.lora_target:
        problems.append("lora_target is empty: use 'all' or a list such as q_proj,v_proj")
    if "all" in spec.lora_target and len(spec.lora_target) > 1:
        problems.append("lora_target 'all' cannot be combined with other module names")
    bad = [t for t in spec.lora_target if t.split(".")[-1] in VLLM_UNSERVABLE_TARGETS]
    if bad:
        problems.append(
            f"lora_target {', '.join(bad)}: vLLM cannot serve LoRA on the embeddings or lm_head; "
            "target the attention/MLP projections (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)"
        )
    if spec.additional_target:
        problems.append(
            f"additional_target ({', '.join(spec.additional_target)}) becomes peft modules_to_save, "
            "which vLLM cannot serve: remove it"
        )
    if spec.use_dora:
        problems.append("use_dora: vLLM cannot serve DoRA adapters; use plain LoRA")
    if spec.loraplus_lr_ratio is not None and spec.loraplus_lr_ratio <= 0:
        problems.append(f"loraplus_lr_ratio must be positive, got {spec.loraplus_lr_ratio}")
    if spec.pissa_init:
        if not spec.pissa_convert:
            problems.append(
                "pissa_init without pissa_convert: a PiSSA adapter only works on the base model it "
                "rewrote, so vLLM could not serve it; add pissa_convert: true (the saved adapter then "
                "has rank 2 x lora_rank)"
            )
        elif 2 * spec.lora_rank > VLLM_MAX_LORA_RANK:
            problems.append(
                f"pissa_convert saves a rank-{2 * spec.lora_rank} adapter (2 x lora_rank), above vLLM's "
                f"largest --max-lora-rank {VLLM_MAX_LORA_RANK}; pick lora_rank {VLLM_MAX_LORA_RANK // 2} or lower"
            )
        if spec.deepspeed and spec.zero_stage == 3:
            problems.append("pissa_init is incompatible with DeepSpeed ZeRO-3 (as in LLaMA-Factory): use z2")
        if spec.adapter_name_or_path:
            problems.append("pissa_init initialises a new adapter: it cannot continue adapter_name_or_path")
    if len(spec.adapter_name_or_path) > 1:
        problems.append(
            f"adapter_name_or_path lists {len(spec.adapter_name_or_path)} adapters: LLaMA-Factory merges all "
            "but the last into the base model, and vLLM serves one adapter on the unmodified base; "
            "merge them into a new base model first, or continue one adapter"
        )
    if spec.adapter_name_or_path and spec.create_new_adapter:
        problems.append(
            "create_new_adapter merges adapter_name_or_path into the base model and trains a new adapter "
            "on top, which vLLM cannot serve on the unmodified base; drop create_new_adapter to keep "
            "training that adapter"
        )


def _check_data(spec: JobSpec, problems: list[str]) -> None:
    if not spec.dataset:
        problems.append("dataset is missing: name one or more datasets declared in dataset_info.json")
    if spec.dataset_dir == "ONLINE" or spec.dataset_dir.startswith("REMOTE:"):
        problems.append(
            f"dataset_dir: {spec.dataset_dir} reads datasets from the Hub, and workers cannot download "
            "datasets: download them, declare them in a local dataset_info.json, or attach the file"
        )
    if spec.cutoff_len < 8:
        problems.append(f"cutoff_len must be at least 8 tokens, got {spec.cutoff_len}")
    if spec.max_samples is not None and spec.max_samples <= 0:
        problems.append(f"max_samples must be positive, got {spec.max_samples}")
    if not 0.0 <= spec.val_size < 1.0 and not (spec.val_size >= 1 and float(spec.val_size).is_integer()):
        problems.append(
            f"val_size must be a fraction in [0, 1) or a whole number of samples, got {spec.val_size}"
        )
    if spec.eval_dataset and spec.val_size > 1e-6:
        problems.append("val_size and eval_dataset cannot both be set (as in LLaMA-Factory): pick one")
    if spec.mask_history and spec.train_on_prompt:
        problems.append("mask_history is incompatible with train_on_prompt (as in LLaMA-Factory)")
    if spec.interleave_probs is not None:
        if spec.mix_strategy == "concat":
            problems.append("interleave_probs needs mix_strategy: interleave_under or interleave_over")
        if spec.dataset and len(spec.interleave_probs) != len(spec.dataset):
            problems.append(
                f"interleave_probs has {len(spec.interleave_probs)} values for {len(spec.dataset)} datasets"
            )
        if any(p < 0 for p in spec.interleave_probs) or not sum(spec.interleave_probs) > 0:
            problems.append("interleave_probs must be non-negative and not all zero")
    if spec.split_special_tokens and spec.use_fast_tokenizer:
        problems.append("split_special_tokens needs use_fast_tokenizer: false (as in LLaMA-Factory)")
    if spec.template is not None:
        known = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
        if not known_template(spec.template):
            close = difflib.get_close_matches(spec.template, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(TEMPLATES))})"
            problems.append(f"unknown template {spec.template!r}{hint}")


MAX_EPOCHS = 10_000
MAX_STEPS = 100_000_000


def _check_training(spec: JobSpec, problems: list[str]) -> None:
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if getattr(spec, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(spec, name)}")
    if spec.learning_rate <= 0:
        problems.append(f"learning_rate must be positive, got {spec.learning_rate}")
    if spec.max_steps <= 0 and spec.num_train_epochs <= 0:
        problems.append("set max_steps or num_train_epochs to a positive number: the job would train nothing")
    if spec.num_train_epochs > MAX_EPOCHS:
        problems.append(f"num_train_epochs must be at most {MAX_EPOCHS}, got {spec.num_train_epochs:g}")
    if spec.max_steps > MAX_STEPS:
        problems.append(f"max_steps must be at most {MAX_STEPS}, got {spec.max_steps}")
    if not 0.0 <= spec.warmup_ratio <= 1.0:
        problems.append(f"warmup_ratio must be in [0, 1], got {spec.warmup_ratio}")
    if spec.warmup_steps < 0:
        problems.append(f"warmup_steps must not be negative, got {spec.warmup_steps}")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(spec, name) < 1.0:
            problems.append(f"{name} must be in [0, 1), got {getattr(spec, name)}")
    if spec.adam_epsilon <= 0:
        problems.append(f"adam_epsilon must be positive, got {spec.adam_epsilon}")
    if not 0.0 <= spec.label_smoothing_factor < 1.0:
        problems.append(f"label_smoothing_factor must be in [0, 1), got {spec.label_smoothing_factor}")
    if spec.neftune_noise_alpha is not None and spec.neftune_noise_alpha <= 0:
        problems.append(f"neftune_noise_alpha must be positive, got {spec.neftune_noise_alpha}")
    if spec.logging_steps <= 0 or spec.save_steps <= 0:
        problems.append("logging_steps and save_steps must be positive")
    if spec.eval_steps is not None and spec.eval_steps <= 0:
        problems.append(f"eval_steps must be positive, got {spec.eval_steps}")
    if spec.pure_bf16 and spec.fp16:
        problems.append("pure_bf16 and fp16 are both set: pure_bf16 trains entirely in bf16")
    if spec.bf16 and spec.fp16:
        problems.append(
            "bf16 and fp16 are both true: choose one precision (bf16 is the default on AMD Instinct)"
        )
    _check_optimizer(spec, problems)
    if spec.lr_scheduler_type not in SCHEDULERS:
        close = difflib.get_close_matches(spec.lr_scheduler_type, SCHEDULERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(SCHEDULERS)})"
        problems.append(f"unknown lr_scheduler_type {spec.lr_scheduler_type!r}{hint}")
    elif "min_lr" in spec.lr_scheduler_type and not {"min_lr", "min_lr_rate"} & set(
        spec.lr_scheduler_kwargs or {}
    ):
        problems.append(
            f"lr_scheduler_type {spec.lr_scheduler_type} needs lr_scheduler_kwargs with min_lr or min_lr_rate, "
            "e.g. lr_scheduler_kwargs: {min_lr_rate: 0.1}"
        )
    _check_evaluation(spec, problems)


def _check_evaluation(spec: JobSpec, problems: list[str]) -> None:
    evaluates = spec.eval_strategy != "no" and spec.has_eval
    if spec.eval_strategy != "no" and not spec.has_eval:
        problems.append(
            f"eval_strategy: {spec.eval_strategy} has nothing to evaluate on: set val_size or eval_dataset"
        )
    if spec.load_best_model_at_end:
        if not evaluates:
            problems.append(
                "load_best_model_at_end needs evaluation: set eval_strategy and val_size or eval_dataset"
            )
        elif spec.save_strategy != "best" and spec.save_strategy != spec.eval_strategy:
            problems.append(
                f"load_best_model_at_end needs save_strategy equal to eval_strategy "
                f"(got {spec.save_strategy} and {spec.eval_strategy})"
            )
        elif spec.eval_strategy == "steps" and spec.save_strategy == "steps":
            eval_steps = spec.eval_steps or spec.logging_steps
            if spec.save_steps % eval_steps:
                problems.append(
                    f"load_best_model_at_end needs save_steps ({spec.save_steps:g}) to be a multiple of "
                    f"eval_steps ({eval_steps:g})"
                )
    if spec.early_stopping_steps is not None:
        if spec.early_stopping_steps <= 0:
            problems.append(f"early_stopping_steps must be positive, got {spec.early_stopping_steps}")
        elif not (evaluates and spec.load_best_model_at_end):
            problems.append(
                "early_stopping_steps needs evaluation and load_best_model_at_end: true "
                "(it stops when the evaluated metric_for_best_model stops improving)"
            )
    if spec.save_strategy == "best" and not (evaluates and spec.metric_for_best_model):
        problems.append("save_strategy: best needs evaluation and metric_for_best_model")


def _check_deepspeed(spec: JobSpec, problems: list[str]) -> None:
    if not spec.deepspeed:
        return
    if isinstance(spec.deepspeed, str):
        path = deepspeed_config_path(spec.deepspeed)
        if path is None or not path.is_file():
            names = ", ".join(sorted(LLAMAFACTORY_DEEPSPEED))
            problems.append(
                f"deepspeed {spec.deepspeed!r} is neither a preset ({', '.join(DEEPSPEED_PRESETS)}) "
                f"nor an existing JSON file (LLaMA-Factory's {names} are known by name)"
            )
            return
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"deepspeed config {path} is not valid JSON: {exc}")
            return
        if not isinstance(config, dict):
            problems.append(f"deepspeed config {path} must be a JSON object")
            return
    if spec.pure_bf16 and spec.zero_stage == 3:
        problems.append(
            "pure_bf16 is incompatible with DeepSpeed ZeRO-3: ZeRO-3 keeps fp32 master weights; "
            "use bf16: true with ZeRO-3, or pure_bf16 without DeepSpeed"
        )


def check_spec(spec: JobSpec, problems: list[str]) -> None:
    """Settings that each look fine but cannot work together, or give an adapter nobody can serve."""
    _check_lora(spec, problems)
    _check_data(spec, problems)
    _check_training(spec, problems)
    _check_deepspeed(spec, problems)
