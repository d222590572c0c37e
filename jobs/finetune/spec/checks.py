"""Settings that each look fine but cannot work together, or give an adapter nobody can serve.

Each check appends full sentences to ``problems``, so a user sees every problem with a config at once.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence

from hipbot.i18n import N_, Message
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


def _positive(key: str, value: object) -> Message:
    return N_("{key} must be positive, got {value}", key=key, value=value)


def _in_unit(key: str, value: object) -> Message:
    return N_("{key} must be in [0, 1), got {value}", key=key, value=value)


def _unknown(key: str, value: str, names: Sequence[str], known: Sequence[str]) -> Message:
    """``unknown optim 'adamw'; did you mean 'adamw_hf'?``, or the ``known`` names when nothing is close."""
    close = difflib.get_close_matches(value, names, n=1)
    if close:
        return N_(
            "unknown {key} {value!r}; did you mean {suggestion!r}?", key=key, value=value, suggestion=close[0]
        )
    return N_("unknown {key} {value!r} (known: {known})", key=key, value=value, known=", ".join(known))


def _check_optimizer(spec: JobSpec, problems: list[str]) -> None:
    if spec.optim in OPTIMIZERS:
        return
    if spec.optim in HF_OPTIMIZERS:
        package = next(pkg for prefix, pkg in OPTIMIZER_PACKAGES if spec.optim.startswith(prefix))
        problems.append(
            N_(
                "optim {optim!r} needs {package}, which workers do not install; use one of {optimizers}",
                optim=spec.optim,
                package=package,
                optimizers=", ".join(o for o in OPTIMIZERS if o != "adamw_hf"),
            )
        )
        return
    problems.append(_unknown("optim", spec.optim, OPTIMIZERS + HF_OPTIMIZERS, OPTIMIZERS))


def _check_lora(spec: JobSpec, problems: list[str]) -> None:
    """LoRA settings that each look fine but give an adapter nobody can serve."""
    if spec.lora_rank <= 0:
        problems.append(_positive("lora_rank", spec.lora_rank))
    elif spec.lora_rank > VLLM_MAX_LORA_RANK:
        problems.append(
            N_(
                "lora_rank {rank} cannot be served by vLLM: its largest --max-lora-rank is {largest}; "
                "try lora_rank: {largest} or lower",
                rank=spec.lora_rank,
                largest=VLLM_MAX_LORA_RANK,
            )
        )
    if spec.alpha <= 0:
        problems.append(_positive("lora_alpha", spec.alpha))
    if not 0.0 <= spec.lora_dropout < 1.0:
        problems.append(_in_unit("lora_dropout", spec.lora_dropout))
    if not spec.lora_target:
        problems.append(N_("lora_target is empty: use 'all' or a list such as q_proj,v_proj"))
    if "all" in spec.lora_target and len(spec.lora_target) > 1:
        problems.append(N_("lora_target 'all' cannot be combined with other module names"))
    bad = [t for t in spec.lora_target if t.split(".")[-1] in VLLM_UNSERVABLE_TARGETS]
    if bad:
        problems.append(
            N_(
                "lora_target {modules}: vLLM cannot serve LoRA on the embeddings or lm_head; target the "
                "attention/MLP projections (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)",
                modules=", ".join(bad),
            )
        )
    if spec.additional_target:
        problems.append(
            N_(
                "additional_target ({modules}) becomes peft modules_to_save, which vLLM cannot serve: remove it",
                modules=", ".join(spec.additional_target),
            )
        )
    if spec.use_dora:
        problems.append(N_("use_dora: vLLM cannot serve DoRA adapters; use plain LoRA"))
    if spec.loraplus_lr_ratio is not None and spec.loraplus_lr_ratio <= 0:
        problems.append(_positive("loraplus_lr_ratio", spec.loraplus_lr_ratio))
    if spec.pissa_init:
        if not spec.pissa_convert:
            problems.append(
                N_(
                    "pissa_init without pissa_convert: a PiSSA adapter only works on the base model it "
                    "rewrote, so vLLM could not serve it; add pissa_convert: true (the saved adapter then "
                    "has rank 2 x lora_rank)"
                )
            )
        elif 2 * spec.lora_rank > VLLM_MAX_LORA_RANK:
            problems.append(
                N_(
                    "pissa_convert saves a rank-{rank} adapter (2 x lora_rank), above vLLM's largest "
                    "--max-lora-rank {largest}; pick lora_rank {half} or lower",
                    rank=2 * spec.lora_rank,
                    largest=VLLM_MAX_LORA_RANK,
                    half=VLLM_MAX_LORA_RANK // 2,
                )
            )
        if spec.deepspeed and spec.zero_stage == 3:
            problems.append(
                N_("pissa_init is incompatible with DeepSpeed ZeRO-3 (as in LLaMA-Factory): use z2")
            )
        if spec.adapter_name_or_path:
            problems.append(
                N_("pissa_init initialises a new adapter: it cannot continue adapter_name_or_path")
            )
    if len(spec.adapter_name_or_path) > 1:
        problems.append(
            N_(
                "adapter_name_or_path lists {count} adapters: LLaMA-Factory merges all but the last into the "
                "base model, and vLLM serves one adapter on the unmodified base; merge them into a new base "
                "model first, or continue one adapter",
                count=len(spec.adapter_name_or_path),
            )
        )
    if spec.adapter_name_or_path and spec.create_new_adapter:
        problems.append(
            N_(
                "create_new_adapter merges adapter_name_or_path into the base model and trains a new adapter "
                "on top, which vLLM cannot serve on the unmodified base; drop create_new_adapter to keep "
                "training that adapter"
            )
        )


def _check_data(spec: JobSpec, problems: list[str]) -> None:
    if not spec.dataset:
        problems.append(N_("dataset is missing: name one or more datasets declared in dataset_info.json"))
    if spec.dataset_dir == "ONLINE" or spec.dataset_dir.startswith("REMOTE:"):
        problems.append(
            N_(
                "dataset_dir: {dir} reads datasets from the Hub, and workers cannot download datasets: "
                "download them, declare them in a local dataset_info.json, or attach the file",
                dir=spec.dataset_dir,
            )
        )
    if spec.cutoff_len < 8:
        problems.append(N_("cutoff_len must be at least 8 tokens, got {value}", value=spec.cutoff_len))
    if spec.max_samples is not None and spec.max_samples <= 0:
        problems.append(_positive("max_samples", spec.max_samples))
    if not 0.0 <= spec.val_size < 1.0 and not (spec.val_size >= 1 and float(spec.val_size).is_integer()):
        problems.append(
            N_(
                "val_size must be a fraction in [0, 1) or a whole number of samples, got {value}",
                value=spec.val_size,
            )
        )
    if spec.eval_dataset and spec.val_size > 1e-6:
        problems.append(N_("val_size and eval_dataset cannot both be set (as in LLaMA-Factory): pick one"))
    if spec.mask_history and spec.train_on_prompt:
        problems.append(N_("mask_history is incompatible with train_on_prompt (as in LLaMA-Factory)"))
    if spec.interleave_probs is not None:
        if spec.mix_strategy == "concat":
            problems.append(N_("interleave_probs needs mix_strategy: interleave_under or interleave_over"))
        if spec.dataset and len(spec.interleave_probs) != len(spec.dataset):
            problems.append(
                N_(
                    "interleave_probs has {count} values for {datasets} datasets",
                    count=len(spec.interleave_probs),
                    datasets=len(spec.dataset),
                )
            )
        if any(p < 0 for p in spec.interleave_probs) or not sum(spec.interleave_probs) > 0:
            problems.append(N_("interleave_probs must be non-negative and not all zero"))
    if spec.split_special_tokens and spec.use_fast_tokenizer:
        problems.append(N_("split_special_tokens needs use_fast_tokenizer: false (as in LLaMA-Factory)"))
    if spec.template is not None:
        known = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
        if not known_template(spec.template):
            problems.append(_unknown("template", spec.template, sorted(known), sorted(TEMPLATES)))


MAX_EPOCHS = 10_000
MAX_STEPS = 100_000_000


def _check_training(spec: JobSpec, problems: list[str]) -> None:
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if getattr(spec, name) <= 0:
            problems.append(_positive(name, getattr(spec, name)))
    if spec.learning_rate <= 0:
        problems.append(_positive("learning_rate", spec.learning_rate))
    if spec.max_steps <= 0 and spec.num_train_epochs <= 0:
        problems.append(
            N_("set max_steps or num_train_epochs to a positive number: the job would train nothing")
        )
    if spec.num_train_epochs > MAX_EPOCHS:
        problems.append(
            N_(
                "{key} must be at most {most}, got {value:g}",
                key="num_train_epochs",
                most=MAX_EPOCHS,
                value=spec.num_train_epochs,
            )
        )
    if spec.max_steps > MAX_STEPS:
        problems.append(
            N_(
                "{key} must be at most {most}, got {value}",
                key="max_steps",
                most=MAX_STEPS,
                value=spec.max_steps,
            )
        )
    if not 0.0 <= spec.warmup_ratio <= 1.0:
        problems.append(
            N_("{key} must be in [0, 1], got {value}", key="warmup_ratio", value=spec.warmup_ratio)
        )
    if spec.warmup_steps < 0:
        problems.append(
            N_("{key} must not be negative, got {value}", key="warmup_steps", value=spec.warmup_steps)
        )
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(spec, name) < 1.0:
            problems.append(_in_unit(name, getattr(spec, name)))
    if spec.adam_epsilon <= 0:
        problems.append(_positive("adam_epsilon", spec.adam_epsilon))
    if not 0.0 <= spec.label_smoothing_factor < 1.0:
        problems.append(_in_unit("label_smoothing_factor", spec.label_smoothing_factor))
    if spec.neftune_noise_alpha is not None and spec.neftune_noise_alpha <= 0:
        problems.append(_positive("neftune_noise_alpha", spec.neftune_noise_alpha))
    if spec.logging_steps <= 0 or spec.save_steps <= 0:
        problems.append(N_("logging_steps and save_steps must be positive"))
    if spec.eval_steps is not None and spec.eval_steps <= 0:
        problems.append(_positive("eval_steps", spec.eval_steps))
    if spec.pure_bf16 and spec.fp16:
        problems.append(N_("pure_bf16 and fp16 are both set: pure_bf16 trains entirely in bf16"))
    if spec.bf16 and spec.fp16:
        problems.append(
            N_("bf16 and fp16 are both true: choose one precision (bf16 is the default on AMD Instinct)")
        )
    _check_optimizer(spec, problems)
    if spec.lr_scheduler_type not in SCHEDULERS:
        problems.append(_unknown("lr_scheduler_type", spec.lr_scheduler_type, SCHEDULERS, SCHEDULERS))
    elif "min_lr" in spec.lr_scheduler_type and not {"min_lr", "min_lr_rate"} & set(
        spec.lr_scheduler_kwargs or {}
    ):
        problems.append(
            N_(
                "lr_scheduler_type {scheduler} needs lr_scheduler_kwargs with min_lr or min_lr_rate, "
                "e.g. lr_scheduler_kwargs: {{min_lr_rate: 0.1}}",
                scheduler=spec.lr_scheduler_type,
            )
        )
    _check_evaluation(spec, problems)


def _check_evaluation(spec: JobSpec, problems: list[str]) -> None:
    evaluates = spec.eval_strategy != "no" and spec.has_eval
    if spec.eval_strategy != "no" and not spec.has_eval:
        problems.append(
            N_(
                "eval_strategy: {strategy} has nothing to evaluate on: set val_size or eval_dataset",
                strategy=spec.eval_strategy,
            )
        )
    if spec.load_best_model_at_end:
        if not evaluates:
            problems.append(
                N_("load_best_model_at_end needs evaluation: set eval_strategy and val_size or eval_dataset")
            )
        elif spec.save_strategy != "best" and spec.save_strategy != spec.eval_strategy:
            problems.append(
                N_(
                    "load_best_model_at_end needs save_strategy equal to eval_strategy (got {save} and {eval})",
                    save=spec.save_strategy,
                    eval=spec.eval_strategy,
                )
            )
        elif spec.eval_strategy == "steps" and spec.save_strategy == "steps":
            eval_steps = spec.eval_steps or spec.logging_steps
            if spec.save_steps % eval_steps:
                problems.append(
                    N_(
                        "load_best_model_at_end needs save_steps ({save:g}) to be a multiple of eval_steps ({eval:g})",
                        save=spec.save_steps,
                        eval=eval_steps,
                    )
                )
    if spec.early_stopping_steps is not None:
        if spec.early_stopping_steps <= 0:
            problems.append(_positive("early_stopping_steps", spec.early_stopping_steps))
        elif not (evaluates and spec.load_best_model_at_end):
            problems.append(
                N_(
                    "early_stopping_steps needs evaluation and load_best_model_at_end: true "
                    "(it stops when the evaluated metric_for_best_model stops improving)"
                )
            )
    if spec.save_strategy == "best" and not (evaluates and spec.metric_for_best_model):
        problems.append(N_("save_strategy: best needs evaluation and metric_for_best_model"))


def _check_deepspeed(spec: JobSpec, problems: list[str]) -> None:
    if not spec.deepspeed:
        return
    if isinstance(spec.deepspeed, str):
        path = deepspeed_config_path(spec.deepspeed)
        if path is None or not path.is_file():
            names = ", ".join(sorted(LLAMAFACTORY_DEEPSPEED))
            problems.append(
                N_(
                    "deepspeed {value!r} is neither a preset ({presets}) nor an existing JSON file "
                    "(LLaMA-Factory's {names} are known by name)",
                    value=spec.deepspeed,
                    presets=", ".join(DEEPSPEED_PRESETS),
                    names=names,
                )
            )
            return
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(N_("deepspeed config {path} is not valid JSON: {error}", path=path, error=exc))
            return
        if not isinstance(config, dict):
            problems.append(N_("deepspeed config {path} must be a JSON object", path=path))
            return
    if spec.pure_bf16 and spec.zero_stage == 3:
        problems.append(
            N_(
                "pure_bf16 is incompatible with DeepSpeed ZeRO-3: ZeRO-3 keeps fp32 master weights; "
                "use bf16: true with ZeRO-3, or pure_bf16 without DeepSpeed"
            )
        )


def check_spec(spec: JobSpec, problems: list[str]) -> None:
    """Settings that each look fine but cannot work together, or give an adapter nobody can serve."""
    _check_lora(spec, problems)
    _check_data(spec, problems)
    _check_training(spec, problems)
    _check_deepspeed(spec, problems)
