"""The fine-tune job spec: a LLaMA-Factory-compatible YAML file read into a validated ``JobSpec``.

Users paste the YAML they already use with ``llamafactory-cli train``; the same key names mean the
same thing and take the same defaults. Everything wrong with a file is reported at once (unknown
keys with a "did you mean", bad values, settings that cannot work together, adapters vLLM could not
serve), so a user fixes a config in one round trip instead of one error per submit.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

import hipbot.deploy
from hipbot.errors import HipbotError

# vLLM's --max-lora-rank values (vllm/config/lora.py, ``MaxLoRARanks``): a server takes adapters of
# any rank up to its setting, so an adapter above the largest cannot be served anywhere.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_MAX_LORA_RANK = max(VLLM_LORA_RANKS)
# Modules vLLM's LoRA layers do not cover: an adapter that trains them cannot be served.
VLLM_UNSERVABLE_TARGETS = ("lm_head", "embed_tokens", "wte", "word_embeddings", "embed_in", "embed_out")
DEEPSPEED_PRESETS = ("z2", "z3", "z3_offload")
# LLaMA-Factory's examples/deepspeed/*.json by file name: a preset plus the changes that make the
# same file (same ZeRO stage, same offload), so a config naming one trains without copying it.
LLAMAFACTORY_DEEPSPEED: dict[str, tuple[str, dict[str, Any]]] = {
    "ds_z0_config.json": ("z2", {"stage": 0}),
    "ds_z2_config.json": ("z2", {}),
    "ds_z2_offload_config.json": ("z2", {"offload_optimizer": {"device": "cpu", "pin_memory": True}}),
    "ds_z3_config.json": ("z3", {}),
    "ds_z3_offload_config.json": ("z3_offload", {}),
    "ds_z3_partial_offload_config.json": (
        "z3",
        {"offload_optimizer": {"device": "cpu", "pin_memory": False}},
    ),
}
COMPUTE_TYPES = ("bf16", "fp16", "fp32", "pure_bf16")
PRESET_DIR = Path(hipbot.deploy.__file__).resolve().parent / "deepspeed"
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
MEDIA_COLUMNS = ("images", "videos", "audios")

# Keys of LLaMA-Factory's train YAML (and of HF TrainingArguments, which it takes too) that change
# nothing a worker does for a LoRA SFT job: logging, trackers, the Hub, the web UI, inference and
# export settings, speed-only switches, and the knobs of other stages or methods (read only when
# those are chosen, and those are refused). Accepted so that existing files load; otherwise ignored.
IGNORED_KEYS = frozenset(
    {
        # run bookkeeping, logging and trackers: progress is reported by hipbot itself
        "do_train",
        "do_eval",
        "plot_loss",
        "report_to",
        "run_name",
        "logging_dir",
        "logging_strategy",
        "logging_first_step",
        "logging_nan_inf_filter",
        "log_level",
        "log_level_replica",
        "log_on_each_node",
        "disable_tqdm",
        "include_num_input_tokens_seen",
        "include_tokens_per_second",
        "include_effective_tokens_per_second",
        "include_inputs_for_metrics",
        "include_for_metrics",
        "skip_memory_metrics",
        "print_param_status",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "use_swanlab",
        "swanlab_project",
        "swanlab_workspace",
        "swanlab_run_name",
        "swanlab_mode",
        "swanlab_api_key",
        "swanlab_logdir",
        "swanlab_lark_webhook_url",
        "swanlab_lark_secret",
        # the Hub and credentials: adapters are delivered by hipbot
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_token",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        "push_to_hub_model_id",
        "push_to_hub_organization",
        "push_to_hub_token",
        "hf_hub_token",
        "ms_hub_token",
        "om_hub_token",
        # where things are stored and how checkpoints are written on the worker
        "cache_dir",
        "offload_folder",
        "save_safetensors",
        "save_only_model",
        "save_on_each_node",
        "overwrite_cache",
        "tokenized_path",
        "data_shared_file_system",
        "media_dir",
        "restore_callback_states_from_checkpoint",
        "enable_jit_checkpoint",
        # speed, devices and launch: the worker chooses them for its own hardware
        "preprocessing_num_workers",
        "preprocessing_batch_size",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_in_order",
        "dataloader_multiprocessing_context",
        "streaming",
        "buffer_size",
        "neat_packing",
        "flash_attn",
        "use_unsloth",
        "use_unsloth_gc",
        "enable_liger_kernel",
        "use_liger_kernel",
        "liger_kernel_config",
        "use_kt",
        "kt_optimize_rule",
        "cpu_infer",
        "chunk_size",
        "mode",
        "kt_maxlen",
        "kt_use_cuda_graph",
        "kt_mode",
        "kt_force_think",
        "use_mca",
        "use_v1_kernels",
        "upcast_layernorm",
        "upcast_lmhead_output",
        "low_cpu_mem_usage",
        "torch_compile",
        "torch_compile_backend",
        "torch_compile_mode",
        "torchdynamo",
        "torch_empty_cache_steps",
        "auto_find_batch_size",
        "use_cpu",
        "no_cuda",
        "use_mps_device",
        "use_ipex",
        "jit_mode_eval",
        "local_rank",
        "ddp_backend",
        "ddp_timeout",
        "ddp_bucket_cap_mb",
        "ddp_broadcast_buffers",
        "ddp_static_graph",
        "tpu_num_cores",
        "tpu_metrics_debug",
        "xpu_backend",
        "half_precision_backend",
        "fp16_backend",
        "fp16_opt_level",
        "bf16_full_eval",
        "fp16_full_eval",
        "accelerator_config",
        "dispatch_batches",
        "split_batches",
        "mp_parameters",
        "debug",
        "ray_scope",
        "ray_run_name",
        "ray_storage_path",
        "ray_storage_filesystem",
        "ray_num_workers",
        "resources_per_worker",
        "placement_strategy",
        "ray_init_kwargs",
        "remove_unused_columns",
        "label_names",
        "past_index",
        "length_column_name",
        "ignore_data_skip",
        "average_tokens_across_devices",
        "use_cache",
        "use_legacy_prediction_loop",
        "ignore_pad_token_for_loss",
        # evaluation reporting only
        "prediction_loss_only",
        "eval_do_concat_batches",
        "eval_use_gather_object",
        "batch_eval_metrics",
        "eval_on_each_dataset",
        "eval_num_beams",
        "compute_accuracy",
        "sortish_sampler",
        "generation_max_length",
        "generation_num_beams",
        "generation_config",
        # inference, chat and export: used after training, never by it
        "infer_backend",
        "infer_dtype",
        "use_kv_cache",
        "do_sample",
        "temperature",
        "top_p",
        "top_k",
        "num_beams",
        "max_length",
        "max_new_tokens",
        "repetition_penalty",
        "length_penalty",
        "skip_special_tokens",
        "system_message",
        "tool_format",
        "preserve_thinking",
        "vllm_maxlen",
        "vllm_gpu_util",
        "vllm_enforce_eager",
        "vllm_max_lora_rank",
        "vllm_config",
        "sglang_maxlen",
        "sglang_mem_fraction",
        "sglang_tp_size",
        "sglang_config",
        "sglang_lora_backend",
        "export_dir",
        "export_size",
        "export_device",
        "export_quantization_bit",
        "export_quantization_dataset",
        "export_quantization_nsamples",
        "export_quantization_maxlen",
        "export_legacy_format",
        "export_hub_model_id",
        "adapter_folder",
        # multimodal processor settings: text datasets never read them (media columns are refused)
        "image_max_pixels",
        "image_min_pixels",
        "image_do_pan_and_scan",
        "crop_to_patches",
        "video_max_pixels",
        "video_min_pixels",
        "video_fps",
        "video_maxlen",
        "use_audio_in_video",
        "audio_sampling_rate",
        "freeze_vision_tower",
        "freeze_multi_modal_projector",
        # quantization details, read only with quantization_bit (refused)
        "quantization_method",
        "quantization_type",
        "double_quantization",
        "quantization_device_map",
        "fp8_backend",
        "fp8_enable_fsdp_float8_all_gather",
        # other methods' and stages' knobs: LLaMA-Factory reads them only for freeze/OFT/GaLore/APOLLO/
        # BAdam or for rm/ppo/dpo/kto, all refused here; with stage: sft and LoRA they change nothing
        "freeze_trainable_layers",
        "freeze_trainable_modules",
        "freeze_extra_modules",
        "oft_rank",
        "oft_block_size",
        "oft_target",
        "module_dropout",
        "galore_target",
        "galore_rank",
        "galore_update_interval",
        "galore_scale",
        "galore_proj_type",
        "galore_layerwise",
        "apollo_target",
        "apollo_rank",
        "apollo_update_interval",
        "apollo_scale",
        "apollo_proj",
        "apollo_proj_type",
        "apollo_scale_type",
        "apollo_layerwise",
        "apollo_scale_front",
        "badam_mode",
        "badam_start_block",
        "badam_switch_mode",
        "badam_switch_interval",
        "badam_update_ratio",
        "badam_mask_mode",
        "badam_verbose",
        "optim_target_modules",
        "pref_beta",
        "pref_ftx",
        "pref_bco_weight",
        "pref_loss",
        "dpo_label_smoothing",
        "kto_chosen_weight",
        "kto_rejected_weight",
        "simpo_gamma",
        "ppo_buffer_size",
        "ppo_epochs",
        "ppo_score_norm",
        "ppo_target",
        "ppo_whiten_rewards",
        "ref_model",
        "ref_model_adapters",
        "ref_model_quantization_bit",
        "reward_model",
        "reward_model_adapters",
        "reward_model_quantization_bit",
        "reward_model_type",
        "ld_alpha",
        "init_special_tokens",
        # older LLaMA-Factory names of the same kinds of settings
        "visual_inputs",
        "train_mm_proj_only",
        "image_dir",
        "image_resolution",
        "video_resolution",
        "cache_path",
        "reserved_label_len",
        "split",
        "name_module_trainable",
        "num_layer_trainable",
        "lora_bf16_mode",
        "dpo_beta",
        "dpo_loss",
        "dpo_ftx",
        "orpo_beta",
        # speed-only switches of newer releases: attention kernels, fused losses, padding, MFU reports
        "attn",
        "use_cce",
        "pad_to_multiple_of",
        "include_mfu",
        "mfu_profile_every",
        "mfu_warmup_steps",
    }
)

# Keys that cannot work here when set (anything but null/false/empty): the reason, and what to use.
REFUSED_KEYS: dict[str, str] = {
    "quantization_bit": "QLoRA needs bitsandbytes' 4/8-bit kernels; workers train LoRA on bf16/fp16 "
    "weights: remove it (a model too large for one GPU fits with deepspeed: z3_offload)",
    "fp8": "FP8 training needs NVIDIA Transformer Engine/torchao kernels that workers do not run; use bf16: true",
    "use_galore": "GaLore is a full-parameter optimizer; LLaMA-Factory refuses it with LoRA too",
    "use_apollo": "APOLLO is a full-parameter optimizer; LLaMA-Factory refuses it with LoRA too",
    "use_badam": "BAdam is a full-parameter optimizer; LLaMA-Factory refuses it with LoRA too",
    "use_adam_mini": "Adam-mini needs the adam-mini package, which workers do not install; use optim: adamw_torch",
    "use_muon": "the Muon optimizer needs a package workers do not install; use optim: adamw_torch",
    "use_dft_loss": "the DFT loss is not implemented by hipbot's trainer; remove it to train with the usual loss",
    "use_eaft_loss": "the EAFT loss is not implemented by hipbot's trainer; remove it to train with the usual loss",
    "use_asft_loss": "the ASFT loss is not implemented by hipbot's trainer; remove it to train with the usual loss",
    "new_special_tokens": "new token embeddings are not part of a LoRA adapter vLLM can serve on the base model",
    "sequence_parallel_size": "workers shard with DeepSpeed ZeRO, not sequence parallelism: use deepspeed: z3",
    "use_llama_pro": "LLaMA Pro trains blocks added to an expanded model, which vLLM cannot serve next to "
    "the original base model",
    "train_from_scratch": "a randomly initialised base model cannot be served with the adapter; "
    "fine-tune a released model",
    "shift_attn": "S^2-Attn (LongLoRA) changes attention only while training; vLLM serves with the model's "
    "normal attention",
    "mixture_of_depths": "mixture-of-depths changes the model's architecture, which vLLM cannot serve "
    "with a LoRA adapter",
    "rope_scaling": "vLLM serves the base model with its own RoPE settings (LLaMA-Factory refuses rope_scaling "
    "with vLLM too); remove it, or pick a model whose context is long enough",
    "resize_vocab": "new token embeddings are not part of a LoRA adapter vLLM can serve on the base model",
    "add_tokens": "new token embeddings are not part of a LoRA adapter vLLM can serve on the base model",
    "add_special_tokens": "new token embeddings are not part of a LoRA adapter vLLM can serve on the base model",
    "new_special_tokens_config": "new token embeddings are not part of a LoRA adapter vLLM can serve on the "
    "base model",
    "freeze_language_model": "workers train text-only LoRA adapters (no multimodal training)",
    "fsdp": "workers shard with DeepSpeed, not FSDP: use deepspeed: z3 (or z3_offload)",
    "fsdp_config": "workers shard with DeepSpeed, not FSDP: use deepspeed: z3 (or z3_offload)",
    "fsdp_min_num_params": "workers shard with DeepSpeed, not FSDP: use deepspeed: z3 (or z3_offload)",
    "fsdp_transformer_layer_cls_to_wrap": "workers shard with DeepSpeed, not FSDP: use deepspeed: z3 (or z3_offload)",
    "sharded_ddp": "workers shard with DeepSpeed: use deepspeed: z3 (or z3_offload)",
    "tp_size": "workers shard with DeepSpeed ZeRO, not tensor parallelism: use deepspeed: z3",
    "parallelism_config": "workers shard with DeepSpeed ZeRO, not tensor/context parallelism: use deepspeed: z3",
    "do_predict": "hipbot runs training jobs; predictions (do_predict) are a separate LLaMA-Factory run",
    "predict_with_generate": "hipbot runs training jobs; generating predictions is a separate LLaMA-Factory run",
}
# Why a stage or fine-tuning type other than LoRA SFT cannot run here.
METHOD_REASONS = {
    "pt": "workers run supervised fine-tuning (stage: sft); pre-training on raw text is not supported",
    "rm": "reward modelling trains a value head, which vLLM cannot serve with a LoRA adapter; workers run stage: sft",
    "ppo": "PPO needs a reward model and generation during training; workers run stage: sft",
    "dpo": "workers train one answer per prompt (stage: sft), not preference pairs (DPO)",
    "kto": "workers train one answer per prompt (stage: sft), not preference feedback (KTO)",
    "full": "full fine-tuning writes a whole model, not a LoRA adapter vLLM can serve next to the base; "
    "use finetuning_type: lora",
    "freeze": "freeze (partial-parameter) tuning writes whole layers, not a LoRA adapter vLLM can serve; "
    "use finetuning_type: lora",
    "oft": "vLLM cannot serve OFT adapters; use finetuning_type: lora",
}
# Sizes whose default (1, or 0 for "off") asks for no parallelism.
PARALLEL_SIZES = frozenset({"tp_size", "sequence_parallel_size"})
# Old names of the same settings.
ALIASES = {
    "sft_packing": "packing",
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
    "evaluation_strategy": "eval_strategy",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
}


class SpecError(HipbotError):
    """A job file with problems; ``problems`` lists every one, each a full sentence."""

    def __init__(self, problems: list[str], *, source: str = "job config") -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source} has {len(problems)} problem{'s' if len(problems) != 1 else ''}:\n{lines}",
            hint="keys follow LLaMA-Factory's train YAML; see `hipbot finetune validate --help`",
        )


def _split_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [str(part).strip() for part in value if str(part).strip()]
    raise ValueError("must be a comma-separated string or a list")


def _json_dict(value: Any) -> Any:
    """HF TrainingArguments take dict options as JSON text too (``lr_scheduler_kwargs: '{"min_lr": 1e-6}'``)."""
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from exc
    return value


class JobSpec(BaseModel):
    """One LoRA SFT job. Field names and defaults are LLaMA-Factory's (and HF TrainingArguments')."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    # model
    model_name_or_path: str
    trust_remote_code: bool = False
    model_revision: str = "main"
    use_fast_tokenizer: bool = True
    split_special_tokens: bool = False
    adapter_name_or_path: list[str] = []
    create_new_adapter: bool = False
    moe_aux_loss_coef: float | None = None
    # method
    stage: Literal["sft"] = "sft"
    finetuning_type: Literal["lora"] = "lora"
    lora_rank: int = 8
    lora_alpha: int | None = None
    lora_dropout: float = 0.0
    lora_target: list[str] = ["all"]
    additional_target: list[str] = []
    use_rslora: bool = False
    use_dora: bool = False
    loraplus_lr_ratio: float | None = None
    loraplus_lr_embedding: float = 1e-6
    pissa_init: bool = False
    pissa_iter: int = 16
    pissa_convert: bool = False
    pure_bf16: bool = False
    # dataset
    dataset: list[str] = []
    eval_dataset: list[str] = []
    dataset_dir: str = "data"
    template: str | None = None
    default_system: str | None = None
    enable_thinking: bool | None = True
    cutoff_len: int = 2048
    max_samples: int | None = None
    val_size: float = 0.0
    mix_strategy: Literal["concat", "interleave_under", "interleave_over"] = "concat"
    interleave_probs: list[float] | None = None
    packing: bool | None = None
    train_on_prompt: bool = False
    mask_history: bool = False
    # training
    output_dir: str | None = None
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    eval_accumulation_steps: int | None = None
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    label_smoothing_factor: float = 0.0
    neftune_noise_alpha: float | None = None
    num_train_epochs: float = 3.0
    max_steps: int = -1
    lr_scheduler_type: str = "linear"
    lr_scheduler_kwargs: dict[str, Any] | None = None
    warmup_ratio: float = 0.0
    warmup_steps: float = 0
    optim: str = "adamw_torch"
    optim_args: str | None = None
    bf16: bool | None = None
    fp16: bool | None = None
    tf32: bool | None = None
    gradient_checkpointing: bool | None = None
    gradient_checkpointing_kwargs: dict[str, Any] | None = None
    disable_gradient_checkpointing: bool = False
    use_reentrant_gc: bool | None = None
    deepspeed: str | dict[str, Any] | None = None
    ddp_find_unused_parameters: bool | None = None
    group_by_length: bool = False
    disable_shuffling: bool = False
    dataloader_drop_last: bool = False
    logging_steps: float = 10
    save_strategy: Literal["no", "steps", "epoch", "best"] = "steps"
    save_steps: float = 500
    save_total_limit: int | None = None
    eval_strategy: Literal["no", "steps", "epoch"] = "no"
    eval_steps: float | None = None
    eval_delay: float = 0
    eval_on_start: bool = False
    load_best_model_at_end: bool = False
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None
    early_stopping_steps: int | None = None
    resume_from_checkpoint: str | bool | None = None
    overwrite_output_dir: bool = False
    seed: int = 42
    data_seed: int | None = None
    full_determinism: bool = False

    @field_validator(
        "lora_target", "additional_target", "dataset", "eval_dataset", "adapter_name_or_path", mode="before"
    )
    @classmethod
    def _lists(cls, value: Any) -> list[str]:
        return _split_list(value)

    @field_validator("interleave_probs", mode="before")
    @classmethod
    def _probs(cls, value: Any) -> Any:
        return _split_list(value) if value is not None else None

    @field_validator("lr_scheduler_kwargs", "gradient_checkpointing_kwargs", "deepspeed", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return _json_dict(value)

    @field_validator("resume_from_checkpoint", mode="before")
    @classmethod
    def _resume(cls, value: Any) -> Any:
        # HF reads the string "true"/"false" (a CLI override) as the flag
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value

    @property
    def alpha(self) -> int:
        """LLaMA-Factory's default: ``lora_alpha = 2 * lora_rank``."""
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def use_gradient_checkpointing(self) -> bool:
        """LLaMA-Factory turns gradient checkpointing on unless ``disable_gradient_checkpointing``."""
        if self.gradient_checkpointing is not None:
            return self.gradient_checkpointing
        return not self.disable_gradient_checkpointing

    @property
    def has_eval(self) -> bool:
        return bool(self.eval_dataset) or self.val_size > 0

    @property
    def zero_stage(self) -> int:
        return deepspeed_stage(self.deepspeed)

    @property
    def offload(self) -> bool:
        return deepspeed_offload(self.deepspeed)

    def precision(self, bf16_supported: bool) -> str:
        """'bf16', 'fp16' or 'fp32': bf16 by default where the GPU has it, fp16 only on request."""
        if self.pure_bf16 or self.bf16:
            return "bf16"
        if self.fp16:
            return "fp16"
        if self.bf16 is None and self.fp16 is None and bf16_supported:
            return "bf16"
        return "fp32"

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(exclude_defaults=True), sort_keys=False)


FIELDS = tuple(JobSpec.model_fields)


def deepspeed_config_path(value: str | None) -> Path | None:
    """A preset name (``z2``, ``z3``, ``z3_offload``) or a path to a DeepSpeed JSON file."""
    if not value:
        return None
    if value in DEEPSPEED_PRESETS:
        return PRESET_DIR / f"{value}.json"
    path = Path(value).expanduser()
    if not path.is_file() and path.name in LLAMAFACTORY_DEEPSPEED:
        return PRESET_DIR / f"{LLAMAFACTORY_DEEPSPEED[path.name][0]}.json"
    return path


def deepspeed_config(value: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The DeepSpeed config a job trains with: an inline mapping, a preset, LLaMA-Factory's example
    file by name (examples/deepspeed/ds_z3_config.json: the presets carry the same keys and "auto"
    values), or a JSON file. ``None`` without DeepSpeed or when the file cannot be read."""
    if not value:
        return None
    if isinstance(value, dict):
        return value
    path = deepspeed_config_path(value)
    if path is None or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = Path(value).name
    if not Path(value).expanduser().is_file() and name in LLAMAFACTORY_DEEPSPEED:
        config.setdefault("zero_optimization", {}).update(LLAMAFACTORY_DEEPSPEED[name][1])
    return config if isinstance(config, dict) else None


def deepspeed_stage(value: str | dict[str, Any] | None) -> int:
    stage = (deepspeed_config(value) or {}).get("zero_optimization", {}).get("stage", 0)
    return int(stage) if isinstance(stage, int | float) else 0


def deepspeed_offload(value: str | dict[str, Any] | None) -> bool:
    zero = (deepspeed_config(value) or {}).get("zero_optimization", {})
    return any(
        isinstance(zero.get(key), dict) and zero[key].get("device", "none") in ("cpu", "nvme")
        for key in ("offload_param", "offload_optimizer")
    )


KNOWN_KEYS = (
    tuple(FIELDS)
    + tuple(IGNORED_KEYS)
    + tuple(REFUSED_KEYS)
    + tuple(ALIASES)
    + ("compute_type", "adafactor", "train_sampling_strategy")
)


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.75) or difflib.get_close_matches(
        key, FIELDS, n=1, cutoff=0.6
    )
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_set(value: Any) -> bool:
    """A refused key with its default (null, false, 0, empty) asks for nothing and loads."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "none", "null", "false", "no", "0")
    return value not in (None, False, 0) and value != [] and value != {}


def _normalise(raw: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """Map aliases, drop ignored keys, refuse what cannot work here and report unknown keys."""
    data: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
        key = ALIASES.get(key, key)
        if key == "compute_type":
            if value not in COMPUTE_TYPES:
                problems.append(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, got {value!r}")
                continue
            alias = {"bf16": {"bf16": True}, "fp16": {"fp16": True}, "fp32": {"bf16": False, "fp16": False}}
            implied = alias.get(value, {"pure_bf16": True})
            for name, flag in implied.items():
                if name in raw and raw[name] != flag:
                    problems.append(f"compute_type: {value} contradicts {name}: {raw[name]}")
                data[name] = flag
        elif key == "adafactor":  # the old TrainingArguments flag for optim: adafactor
            if _is_set(value):
                data["optim"] = "adafactor"
        elif key == "train_sampling_strategy":  # transformers 5's spelling of the two flags
            flag = {"sequential": "disable_shuffling", "group_by_length": "group_by_length"}.get(str(value))
            if flag:
                data[flag] = True
            elif value not in ("random", "batch_rebalance"):
                problems.append(
                    f"train_sampling_strategy must be random, sequential or group_by_length, got {value!r}"
                )
        elif key in IGNORED_KEYS:
            continue
        elif key in REFUSED_KEYS:
            if _is_set(value) and not (key in PARALLEL_SIZES and isinstance(value, int) and value <= 1):
                shown = json.dumps(value, default=str)
                problems.append(f"{key}: {shown} is not supported: {REFUSED_KEYS[key]}")
        elif key not in FIELDS:
            problems.append(f"unknown key {key!r}{_did_you_mean(key)}")
        else:
            data.setdefault(key, value)
    return data


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
        from hipbot.jobs.finetune.datasets import LLAMAFACTORY_TEMPLATES, TEMPLATES, known_template

        known = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
        if not known_template(spec.template):
            close = difflib.get_close_matches(spec.template, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(TEMPLATES))})"
            problems.append(f"unknown template {spec.template!r}{hint}")


def _check_training(spec: JobSpec, problems: list[str]) -> None:
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if getattr(spec, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(spec, name)}")
    if spec.learning_rate <= 0:
        problems.append(f"learning_rate must be positive, got {spec.learning_rate}")
    if spec.max_steps <= 0 and spec.num_train_epochs <= 0:
        problems.append("set max_steps or num_train_epochs to a positive number: the job would train nothing")
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


def _check(spec: JobSpec, problems: list[str]) -> None:
    """Settings that each look fine but cannot work together, or give an adapter nobody can serve."""
    _check_lora(spec, problems)
    _check_data(spec, problems)
    _check_training(spec, problems)
    _check_deepspeed(spec, problems)


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "missing":
            out.append(f"{where} is required")
        elif err["type"] == "literal_error" and where in ("stage", "finetuning_type"):
            why = METHOD_REASONS.get(
                str(err.get("input")), "workers run stage: sft with finetuning_type: lora"
            )
            out.append(f"{where} {err.get('input')!r} is not supported: {why}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            out.append(f"{where}: {msg} (got {err.get('input')!r})")
    return out


def parse_spec(source: str | dict[str, Any], *, name: str = "job config") -> JobSpec:
    """Read YAML text (or an already-parsed mapping) into a ``JobSpec``; raise ``SpecError`` listing all problems."""
    if isinstance(source, str):
        try:
            raw = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise SpecError([f"not valid YAML: {exc}".replace("\n", " ")], source=name) from exc
    else:
        raw = source
    if not isinstance(raw, dict):
        raise SpecError(["expected a mapping of keys to values (a LLaMA-Factory train YAML)"], source=name)
    problems: list[str] = []
    data = _normalise(raw, problems)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(problems + _pydantic_problems(exc), source=name) from exc
    _check(spec, problems)
    if problems:
        raise SpecError(problems, source=name)
    return spec


def _local(base: Path, value: str) -> Path | None:
    """A relative path as LLaMA-Factory reads it (from the working directory) or beside the job file."""
    for root in (base, Path.cwd()):
        if (root / value).exists():
            return (root / value).resolve()
    return None


def load_spec(path: Path | str) -> JobSpec:
    """Read a job file. Relative ``dataset_dir``/``deepspeed``/``adapter_name_or_path`` are found beside
    the file or, as LLaMA-Factory reads them, in the working directory; ``output_dir`` (and a
    ``dataset_dir`` found nowhere) is taken from the file's folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HipbotError(f"cannot read job config {path}: {exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([f"not valid YAML: {exc}".replace("\n", " ")], source=str(path)) from exc
    if isinstance(raw, dict):
        base = path.resolve().parent
        output = raw.get("output_dir")
        if isinstance(output, str) and not Path(output).expanduser().is_absolute():
            raw["output_dir"] = str(base / output)
        data = raw.get("dataset_dir", "data")
        remote = data == "ONLINE" or str(data).startswith("REMOTE:")
        if isinstance(data, str) and not remote and not Path(data).expanduser().is_absolute():
            raw["dataset_dir"] = str(_local(base, data) or base / data)
        adapters = raw.get("adapter_name_or_path")
        if isinstance(adapters, str):
            raw["adapter_name_or_path"] = ",".join(str(_local(base, a) or a) for a in _split_list(adapters))
        ds = raw.get("deepspeed")
        if isinstance(ds, str) and ds not in DEEPSPEED_PRESETS and not Path(ds).expanduser().is_absolute():
            found = _local(base, ds)
            if found is not None or Path(ds).name not in LLAMAFACTORY_DEEPSPEED:
                raw["deepspeed"] = str(found or base / ds)
    return parse_spec(raw, name=str(path))


@dataclass(frozen=True)
class Validation:
    """What front ends (Discord, HTTP) show: the spec when it is fine, else the message to print."""

    spec: JobSpec | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.spec is not None


def validate_job(
    yaml_text: str, attachment: bytes | None = None, attachment_name: str | None = None
) -> Validation:
    """Check a pasted job YAML and an optional attached dataset file without touching disk or network."""
    try:
        spec = parse_spec(yaml_text)
        if attachment is not None:
            from hipbot.jobs.finetune.datasets import check_attachment

            check_attachment(attachment, attachment_name or "dataset.jsonl", spec)
    except HipbotError as exc:
        return Validation(None, str(exc))
    return Validation(spec, None)
