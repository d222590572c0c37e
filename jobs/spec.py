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

from hipbot.errors import HipbotError

# vLLM's own list (vllm/config/lora.py, ``MaxLoRARanks``): an adapter of another rank cannot be served.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Modules vLLM's LoRA layers do not cover: an adapter that trains them cannot be served.
VLLM_UNSERVABLE_TARGETS = ("lm_head", "embed_tokens", "wte", "word_embeddings", "embed_in", "embed_out")
DEEPSPEED_PRESETS = ("z2", "z3", "z3_offload")
LLAMAFACTORY_DEEPSPEED = {
    "ds_z2_config.json": "z2",
    "ds_z3_config.json": "z3",
    "ds_z3_offload_config.json": "z3_offload",
}
COMPUTE_TYPES = ("bf16", "fp16", "fp32", "pure_bf16")
PRESET_DIR = Path(__file__).resolve().parent.parent / "deploy" / "deepspeed"

# Keys LLaMA-Factory and HF TrainingArguments accept that change nothing for a LoRA SFT job here:
# accepted so that existing files load, and otherwise ignored.
IGNORED_KEYS = frozenset(
    {
        "do_train",
        "overwrite_cache",
        "preprocessing_num_workers",
        "dataloader_num_workers",
        "plot_loss",
        "report_to",
        "ddp_timeout",
        "flash_attn",
        "save_only_model",
        "run_name",
        "logging_dir",
        "disable_tqdm",
        "include_num_input_tokens_seen",
        "tokenized_path",
        "streaming",
        "buffer_size",
        "upcast_layernorm",
        "enable_liger_kernel",
        "use_unsloth",
        "print_param_status",
        "infer_backend",
        "export_dir",
        "hf_hub_token",
    }
)


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


class JobSpec(BaseModel):
    """One LoRA SFT job. Field names and defaults are LLaMA-Factory's (and HF TrainingArguments')."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    # model
    model_name_or_path: str
    trust_remote_code: bool = False
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
    pure_bf16: bool = False
    # dataset
    dataset: list[str] = []
    dataset_dir: str = "data"
    template: str | None = None
    cutoff_len: int = 2048
    max_samples: int | None = None
    val_size: float = 0.0
    train_on_prompt: bool = False
    mask_history: bool = False
    # training
    output_dir: str | None = None
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    num_train_epochs: float = 3.0
    max_steps: int = -1
    lr_scheduler_type: str = "linear"
    warmup_ratio: float = 0.0
    warmup_steps: int = 0
    optim: str = "adamw_torch"
    bf16: bool | None = None
    fp16: bool | None = None
    gradient_checkpointing: bool | None = None
    disable_gradient_checkpointing: bool = False
    deepspeed: str | None = None
    logging_steps: float = 10
    save_steps: float = 500
    save_total_limit: int | None = None
    eval_strategy: str = "no"
    eval_steps: float | None = None
    resume_from_checkpoint: str | bool | None = None
    overwrite_output_dir: bool = False
    seed: int = 42

    @field_validator("lora_target", "additional_target", "dataset", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> list[str]:
        return _split_list(value)

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
        # LLaMA-Factory configs name its example files (examples/deepspeed/ds_z3_config.json):
        # the presets here carry the same keys and "auto" values.
        return PRESET_DIR / f"{LLAMAFACTORY_DEEPSPEED[path.name]}.json"
    return path


def _deepspeed_json(value: str | None) -> dict[str, Any]:
    path = deepspeed_config_path(value)
    if path is None or not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def deepspeed_stage(value: str | None) -> int:
    stage = _deepspeed_json(value).get("zero_optimization", {}).get("stage", 0)
    return int(stage) if isinstance(stage, int | float) else 0


def deepspeed_offload(value: str | None) -> bool:
    zero = _deepspeed_json(value).get("zero_optimization", {})
    return any(
        isinstance(zero.get(key), dict) and zero[key].get("device", "none") in ("cpu", "nvme")
        for key in ("offload_param", "offload_optimizer")
    )


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, list(FIELDS) + ["compute_type"], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _normalise(raw: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """Map aliases, drop ignored keys and report unknown ones."""
    data: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
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
        elif key in IGNORED_KEYS:
            continue
        elif key == "quantization_bit":
            if value is not None:
                problems.append(
                    "quantization_bit (QLoRA) is not supported: workers train LoRA on bf16/fp16 weights"
                )
        elif key not in FIELDS:
            problems.append(f"unknown key {key!r}{_did_you_mean(key)}")
        else:
            data.setdefault(key, value)
    return data


def _check(spec: JobSpec, problems: list[str]) -> None:
    """Settings that each look fine but cannot work together, or give an adapter nobody can serve."""
    if spec.bf16 and spec.fp16:
        problems.append(
            "bf16 and fp16 are both true: choose one precision (bf16 is the default on AMD Instinct)"
        )
    if spec.pure_bf16 and spec.fp16:
        problems.append("pure_bf16 and fp16 are both set: pure_bf16 trains entirely in bf16")
    if spec.pure_bf16 and spec.deepspeed and spec.zero_stage == 3:
        problems.append(
            "pure_bf16 is incompatible with DeepSpeed ZeRO-3: ZeRO-3 keeps fp32 master weights; "
            "use bf16: true with ZeRO-3, or pure_bf16 without DeepSpeed"
        )
    if spec.lora_rank not in VLLM_LORA_RANKS:
        nearest = min(VLLM_LORA_RANKS, key=lambda r: (abs(r - spec.lora_rank), r))
        problems.append(
            f"lora_rank {spec.lora_rank} cannot be served by vLLM (allowed: "
            f"{', '.join(map(str, VLLM_LORA_RANKS))}); try lora_rank: {nearest}"
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
    if not spec.dataset:
        problems.append("dataset is missing: name one or more datasets declared in dataset_info.json")
    if spec.cutoff_len < 8:
        problems.append(f"cutoff_len must be at least 8 tokens, got {spec.cutoff_len}")
    if spec.max_samples is not None and spec.max_samples <= 0:
        problems.append(f"max_samples must be positive, got {spec.max_samples}")
    if not 0.0 <= spec.val_size < 1.0 and not (spec.val_size >= 1 and float(spec.val_size).is_integer()):
        problems.append(
            f"val_size must be a fraction in [0, 1) or a whole number of samples, got {spec.val_size}"
        )
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        if getattr(spec, name) <= 0:
            problems.append(f"{name} must be positive, got {getattr(spec, name)}")
    if spec.learning_rate <= 0:
        problems.append(f"learning_rate must be positive, got {spec.learning_rate}")
    if spec.max_steps <= 0 and spec.num_train_epochs <= 0:
        problems.append("set max_steps or num_train_epochs to a positive number: the job would train nothing")
    if not 0.0 <= spec.warmup_ratio <= 1.0:
        problems.append(f"warmup_ratio must be in [0, 1], got {spec.warmup_ratio}")
    if spec.logging_steps <= 0 or spec.save_steps <= 0:
        problems.append("logging_steps and save_steps must be positive")
    schedulers = (
        "linear",
        "cosine",
        "cosine_with_restarts",
        "polynomial",
        "constant",
        "constant_with_warmup",
        "inverse_sqrt",
        "reduce_lr_on_plateau",
        "cosine_with_min_lr",
        "warmup_stable_decay",
    )
    if spec.lr_scheduler_type not in schedulers:
        close = difflib.get_close_matches(spec.lr_scheduler_type, schedulers, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(schedulers)})"
        problems.append(f"unknown lr_scheduler_type {spec.lr_scheduler_type!r}{hint}")
    if spec.deepspeed:
        path = deepspeed_config_path(spec.deepspeed)
        if path is None or not path.is_file():
            problems.append(
                f"deepspeed {spec.deepspeed!r} is neither a preset ({', '.join(DEEPSPEED_PRESETS)}) "
                "nor an existing JSON file"
            )
        else:
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                problems.append(f"deepspeed config {path} is not valid JSON: {exc}")
    if spec.template is not None:
        from hipbot.jobs.datasets import LLAMAFACTORY_TEMPLATES, TEMPLATES

        known = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
        if spec.template not in known:
            close = difflib.get_close_matches(spec.template, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(TEMPLATES))})"
            problems.append(f"unknown template {spec.template!r}{hint}")


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "missing":
            out.append(f"{where} is required")
        elif err["type"] == "literal_error" and where in ("stage", "finetuning_type"):
            out.append(
                f"{where} {err.get('input')!r} is not supported: workers run stage: sft with finetuning_type: lora"
            )
        else:
            out.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
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


def load_spec(path: Path | str) -> JobSpec:
    """Read a job file; relative ``dataset_dir``/``deepspeed``/``output_dir`` are taken from the file's folder."""
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
        for key in ("dataset_dir", "output_dir"):
            if isinstance(raw.get(key), str) and not Path(raw[key]).expanduser().is_absolute():
                raw[key] = str(base / raw[key])
        if "dataset_dir" not in raw:
            raw["dataset_dir"] = str(base / "data")
        ds = raw.get("deepspeed")
        relative = (
            isinstance(ds, str) and ds not in DEEPSPEED_PRESETS and not Path(ds).expanduser().is_absolute()
        )
        if relative and ((base / ds).is_file() or Path(ds).name not in LLAMAFACTORY_DEEPSPEED):
            raw["deepspeed"] = str(base / ds)
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
            from hipbot.jobs.datasets import check_attachment

            check_attachment(attachment, attachment_name or "dataset.jsonl", spec)
    except HipbotError as exc:
        return Validation(None, str(exc))
    return Validation(spec, None)
