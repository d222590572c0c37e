"""The job spec as LLaMA-Factory's argument groups: model, data, LoRA and training arguments.

``JobSpec`` joins the four groups into one flat model, so ``spec.lora_rank`` reads as the YAML key
does. Field names and defaults are LLaMA-Factory's (and HF TrainingArguments'); the docstring under
each field is its help text (``JobSpec.model_fields[name].description``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

import hipbot.deploy
from hipbot.i18n import N_

# vLLM's --max-lora-rank values (vllm/config/lora.py, ``MaxLoRARanks``): a server takes adapters of
# any rank up to its setting, so an adapter above the largest cannot be served anywhere.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_MAX_LORA_RANK = max(VLLM_LORA_RANKS)
# Modules vLLM's LoRA layers do not cover: an adapter that trains them cannot be served.
VLLM_UNSERVABLE_TARGETS = ("lm_head", "embed_tokens", "wte", "word_embeddings", "embed_in", "embed_out")
DEEPSPEED_PRESETS = ("z2", "z3", "z3_offload")
# the default: none on one GPU, ZeRO-2 across GPUs, ZeRO-3 (+offload) where memory needs it
DEEPSPEED_AUTO = "auto"
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
    # the names LLaVA/FastChat scripts use, often pasted after llamafactory-cli's --deepspeed
    "zero2.json": ("z2", {}),
    "zero3.json": ("z3", {}),
    "zero3_offload.json": ("z3_offload", {}),
}
COMPUTE_TYPES = ("bf16", "fp16", "fp32", "pure_bf16")
PRESET_DIR = Path(hipbot.deploy.__file__).resolve().parent / "deepspeed"


def split_list(value: object) -> list[str]:
    """A comma-separated string or a list, as LLaMA-Factory reads list-valued keys."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [str(part).strip() for part in value if str(part).strip()]
    raise ValueError(N_("must be a comma-separated string or a list"))


def _json_dict(value: object) -> object:
    """HF TrainingArguments take dict options as JSON text too (``lr_scheduler_kwargs: '{"min_lr": 1e-6}'``)."""
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(N_("not valid JSON: {error}", error=exc)) from exc
    return value


class _Arguments(BaseModel):
    # nan/inf are never a setting (learning_rate: nan would train nothing, silently)
    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        protected_namespaces=(),
        use_attribute_docstrings=True,
        allow_inf_nan=False,
    )


class ModelArguments(_Arguments):
    """Which base model (and adapter) to train, and how to load its tokenizer."""

    model_name_or_path: str
    """Path to the base model, or its Hub id when the worker has it cached."""
    trust_remote_code: bool = False
    """Run the model's own code from its folder; honoured only where the worker's owner allows it."""
    model_revision: str = "main"
    """The model version to use (a branch name, tag name or commit id)."""
    use_fast_tokenizer: bool = True
    """Use the fast tokenizer (backed by the tokenizers library)."""
    split_special_tokens: bool = False
    """Split special tokens during tokenization (needs use_fast_tokenizer: false)."""
    adapter_name_or_path: list[str] = []
    """A LoRA adapter to keep training (one; several would be merged into the base model)."""
    create_new_adapter: bool = False
    """Merge adapter_name_or_path into the base and train a new adapter (refused: vLLM cannot serve it)."""
    moe_aux_loss_coef: float | None = None
    """Coefficient of the auxiliary router loss in mixture-of-experts models."""
    hipbot_fast: bool = True
    """hipbot's fast path (Llama, Qwen2/3, Mistral, Gemma): fused kernels, padding-free batches, fused loss."""
    enable_liger_kernel: bool | None = None
    """Liger's fused Triton kernels (default: on with the fast path, where installed on a GPU)."""
    use_unsloth: bool = False
    """Ask for Unsloth's speed-ups: hipbot's fast path stands in for them."""
    flash_attn: Literal["auto", "disabled", "sdpa", "fa2", "fa3"] = "auto"
    """Attention: auto/fa2/fa3 = padding-free varlen FlashAttention, sdpa = SDPA on padded batches, disabled = eager."""

    @field_validator("adapter_name_or_path", mode="before")
    @classmethod
    def _adapters(cls, value: object) -> list[str]:
        return split_list(value)


class LoraArguments(_Arguments):
    """The method: LoRA SFT, and the adapter's shape."""

    stage: Literal["sft"] = "sft"
    """The training stage; workers run supervised fine-tuning only."""
    finetuning_type: Literal["lora"] = "lora"
    """The fine-tuning method; workers train LoRA adapters only."""
    lora_rank: int = 8
    """The intrinsic dimension (rank) of the LoRA matrices; at most vLLM's largest --max-lora-rank."""
    lora_alpha: int | None = None
    """The LoRA scale factor (default: 2 x lora_rank)."""
    lora_dropout: float = 0.0
    """Dropout rate of the LoRA layers."""
    lora_target: list[str] = ["all"]
    """Modules to apply LoRA to, comma-separated; `all` means every linear layer but lm_head."""
    additional_target: list[str] = []
    """Modules trained and saved whole besides the LoRA layers (refused: vLLM cannot serve them)."""
    use_rslora: bool = False
    """Use the rank-stabilised scaling factor (alpha / sqrt(rank)) for the LoRA layers."""
    use_dora: bool = False
    """Use weight-decomposed LoRA (DoRA; refused: vLLM cannot serve it)."""
    loraplus_lr_ratio: float | None = None
    """LoRA+: the learning-rate ratio lr_B / lr_A."""
    loraplus_lr_embedding: float = 1e-6
    """LoRA+: the learning rate of LoRA layers on embeddings."""
    pissa_init: bool = False
    """Initialise the adapter with PiSSA (principal singular values of the base weights)."""
    pissa_iter: int = 16
    """Fast-SVD iterations for PiSSA; -1 for a full SVD."""
    pissa_convert: bool = False
    """Save the PiSSA adapter as a plain rank-2r LoRA adapter that works on the unmodified base."""
    pure_bf16: bool = False
    """Train entirely in bf16, without mixed precision."""

    @field_validator("lora_target", "additional_target", mode="before")
    @classmethod
    def _targets(cls, value: object) -> list[str]:
        return split_list(value)

    @property
    def alpha(self) -> int:
        """LLaMA-Factory's default: ``lora_alpha = 2 * lora_rank``."""
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank


class DataArguments(_Arguments):
    """Which datasets (from dataset_info.json) and how they become training examples."""

    dataset: list[str] = []
    """Datasets to train on, comma-separated names declared in dataset_info.json."""
    eval_dataset: list[str] = []
    """Datasets to evaluate on, comma-separated names declared in dataset_info.json."""
    dataset_dir: str = "data"
    """The folder holding dataset_info.json and the dataset files."""
    template: str | None = None
    """The chat template (default: the tokenizer's own)."""
    default_system: str | None = None
    """A system message for records that have none."""
    enable_thinking: bool | None = True
    """Thinking mode for reasoning models' templates."""
    cutoff_len: int = 2048
    """Examples are cut to this many tokens."""
    max_samples: int | None = None
    """Take at most this many records from each dataset."""
    val_size: float = 0.0
    """Hold out this fraction (in [0, 1)) or whole number of training examples for evaluation."""
    mix_strategy: Literal["concat", "interleave_under", "interleave_over"] = "concat"
    """How several datasets are mixed: concatenated, or interleaved until the first / the last runs out."""
    interleave_probs: list[float] | None = None
    """Sampling probabilities of the datasets when interleaving, comma-separated."""
    packing: bool | None = None
    """Pack several examples into one sequence of up to cutoff_len tokens."""
    neat_packing: bool = False
    """Pack examples into cutoff_len rows with attention kept inside each example."""
    train_on_prompt: bool = False
    """Also train on the prompt tokens (no prompt mask)."""
    mask_history: bool = False
    """Train on the last assistant turn only, masking earlier turns."""

    @field_validator("dataset", "eval_dataset", mode="before")
    @classmethod
    def _datasets(cls, value: object) -> list[str]:
        return split_list(value)

    @field_validator("interleave_probs", mode="before")
    @classmethod
    def _probs(cls, value: object) -> object:
        return split_list(value) if value is not None else None

    @property
    def has_eval(self) -> bool:
        return bool(self.eval_dataset) or self.val_size > 0


class TrainingArguments(_Arguments):
    """The optimisation, precision, sharding, checkpoints and evaluation (HF TrainingArguments)."""

    output_dir: str | None = None
    """Where the adapter and checkpoints are written (default: the job's folder)."""
    per_device_train_batch_size: int = 8
    """Training batch size per GPU."""
    per_device_eval_batch_size: int = 8
    """Evaluation batch size per GPU."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (effective batch = per-device batch x GPUs x this)."""
    eval_accumulation_steps: int | None = None
    """Evaluation steps whose outputs are gathered before moving them to the CPU."""
    learning_rate: float = 5e-5
    """The initial learning rate."""
    weight_decay: float = 0.0
    """Weight decay of the optimizer (not applied to biases and norms)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay rate."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay rate."""
    adam_epsilon: float = 1e-8
    """Adam's epsilon."""
    max_grad_norm: float = 1.0
    """Clip gradients to this norm (0 disables clipping)."""
    label_smoothing_factor: float = 0.0
    """Label smoothing of the loss (0 for none)."""
    neftune_noise_alpha: float | None = None
    """NEFTune: the scale of the noise added to the embeddings while training."""
    num_train_epochs: float = 3.0
    """Epochs to train (unless max_steps is set)."""
    max_steps: int = -1
    """Optimizer steps to train; overrides num_train_epochs when positive."""
    lr_scheduler_type: str = "linear"
    """The learning-rate schedule."""
    lr_scheduler_kwargs: dict[str, Any] | None = None
    """Extra arguments of the schedule (a mapping or JSON text), e.g. {min_lr_rate: 0.1}."""
    warmup_ratio: float = 0.0
    """Warm the learning rate up linearly over this fraction of the steps."""
    warmup_steps: float = 0
    """Warm the learning rate up linearly over this many steps (overrides warmup_ratio)."""
    optim: str = "adamw_torch"
    """The optimizer: one torch itself provides."""
    optim_args: str | None = None
    """Extra optimizer arguments, as `key=value,key=value`."""
    bf16: bool | None = None
    """bf16 mixed precision (the default where the GPU supports it)."""
    fp16: bool | None = None
    """fp16 mixed precision."""
    tf32: bool | None = None
    """Allow TF32 matrix multiplications."""
    gradient_checkpointing: bool | None = None
    """Recompute activations in the backward pass to save memory (default: on)."""
    gradient_checkpointing_kwargs: dict[str, Any] | None = None
    """Arguments of gradient checkpointing (a mapping or JSON text), e.g. {use_reentrant: false}."""
    disable_gradient_checkpointing: bool = False
    """Turn gradient checkpointing off."""
    use_reentrant_gc: bool | None = None
    """Use reentrant gradient checkpointing."""
    deepspeed: str | dict[str, Any] | None = None
    """DeepSpeed ZeRO: a preset (z2, z3, z3_offload), LLaMA-Factory's example file name, a JSON file or a mapping."""
    ddp_find_unused_parameters: bool | None = None
    """DistributedDataParallel's find_unused_parameters."""
    group_by_length: bool = False
    """Batch examples of similar length together."""
    disable_shuffling: bool = False
    """Train on the examples in order."""
    dataloader_drop_last: bool = False
    """Drop the last incomplete batch."""
    logging_steps: float = 10
    """Log the mean loss and grad_norm every this many steps (the loss plot's points); the progress shows every step's loss."""
    save_strategy: Literal["no", "steps", "epoch", "best"] = "steps"
    """When to save checkpoints."""
    save_steps: float = 500
    """Save a checkpoint every this many steps (save_strategy: steps)."""
    save_total_limit: int | None = None
    """Keep at most this many checkpoints."""
    eval_strategy: Literal["no", "steps", "epoch"] = "no"
    """When to evaluate."""
    eval_steps: float | None = None
    """Evaluate every this many steps (default: logging_steps)."""
    eval_delay: float = 0
    """Epochs or steps to wait before the first evaluation."""
    eval_on_start: bool = False
    """Evaluate once before training."""
    load_best_model_at_end: bool = False
    """End with the best checkpoint by metric_for_best_model."""
    metric_for_best_model: str | None = None
    """The metric that picks the best checkpoint (default: loss)."""
    greater_is_better: bool | None = None
    """Whether a larger metric_for_best_model is better."""
    early_stopping_steps: int | None = None
    """Stop when metric_for_best_model has not improved for this many evaluations."""
    resume_from_checkpoint: str | bool | None = None
    """A checkpoint folder to resume from, or true for the latest in output_dir."""
    overwrite_output_dir: bool = False
    """Start afresh in output_dir instead of resuming from its last checkpoint."""
    seed: int = 42
    """Random seed."""
    data_seed: int | None = None
    """Random seed of the data sampler (default: seed)."""
    full_determinism: bool = False
    """Deterministic algorithms everywhere (slower; for debugging)."""
    torch_compile: bool = False
    """Compile the model with torch.compile."""

    @field_validator("lr_scheduler_kwargs", "gradient_checkpointing_kwargs", "deepspeed", mode="before")
    @classmethod
    def _json(cls, value: object) -> object:
        return _json_dict(value)

    @field_validator("deepspeed", mode="after")
    @classmethod
    def _auto(cls, value: object) -> object:
        return None if value == DEEPSPEED_AUTO else value  # no DeepSpeed named: chosen at launch

    @field_validator("resume_from_checkpoint", mode="before")
    @classmethod
    def _resume(cls, value: object) -> object:
        # HF reads the string "true"/"false" (a CLI override) as the flag
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value

    @property
    def use_gradient_checkpointing(self) -> bool:
        """LLaMA-Factory turns gradient checkpointing on unless ``disable_gradient_checkpointing``."""
        if self.gradient_checkpointing is not None:
            return self.gradient_checkpointing
        return not self.disable_gradient_checkpointing

    @property
    def zero_stage(self) -> int:
        return deepspeed_stage(self.deepspeed)

    @property
    def offload(self) -> bool:
        return deepspeed_offload(self.deepspeed)


# (Validators have distinct names across the groups: pydantic merges them by name.)
# Bases listed last-group-first: pydantic collects fields from the last base to the first, so the
# fields keep LLaMA-Factory's order (model, method, data, training) in dumps and recorded configs.
class JobSpec(TrainingArguments, DataArguments, LoraArguments, ModelArguments):
    """One LoRA SFT job. Field names and defaults are LLaMA-Factory's (and HF TrainingArguments')."""

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
GROUPS: dict[str, type[_Arguments]] = {
    "model": ModelArguments,
    "lora": LoraArguments,
    "data": DataArguments,
    "training": TrainingArguments,
}


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
