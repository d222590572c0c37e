"""The fine-tune job spec: a LLaMA-Factory-compatible YAML file read into a validated ``JobSpec``.

Users paste the YAML they already use with ``llamafactory-cli train``; the same key names mean the
same thing and take the same defaults. Everything wrong with a file is reported at once (unknown
keys with a "did you mean", bad values, settings that cannot work together, adapters vLLM could not
serve), so a user fixes a config in one round trip instead of one error per submit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from hipbot.errors import HipbotError
from hipbot.jobs.finetune.spec.checks import check_spec
from hipbot.jobs.finetune.spec.keys import ALIASES, KEYS, METHOD_REASONS, did_you_mean
from hipbot.jobs.finetune.spec.models import (
    COMPUTE_TYPES,
    DEEPSPEED_PRESETS,
    LLAMAFACTORY_DEEPSPEED,
    PRESET_DIR,
    JobSpec,
    split_list,
)
from hipbot.jobs.finetune.spec.overrides import Overrides, RawConfig, apply_overrides
from hipbot.jobs.finetune.spec.safe_yaml import safe_load


class SpecError(HipbotError):
    """A job file with problems; ``problems`` lists every one, each a full sentence."""

    def __init__(self, problems: list[str], *, source: str = "job config") -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source} has {len(problems)} problem{'s' if len(problems) != 1 else ''}:\n{lines}",
            hint="keys follow LLaMA-Factory's train YAML; see `hipbot finetune validate --help`",
        )


def _is_set(value: object) -> bool:
    """A refused key with its default (null, false, 0, empty) asks for nothing and loads."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "none", "null", "false", "no", "0")
    return value not in (None, False, 0) and value != [] and value != {}


def _normalise(raw: RawConfig, problems: list[str]) -> RawConfig:
    """Map aliases, drop ignored keys, refuse what cannot work here and report unknown keys."""
    data: RawConfig = {}
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
        elif (row := KEYS.get(key)) is None:
            problems.append(f"unknown key {key!r}{did_you_mean(key)}")
        elif row.kind == "refused":
            allowed = row.unset_up_to is not None and isinstance(value, int) and value <= row.unset_up_to
            if _is_set(value) and not allowed:
                shown = json.dumps(value, default=str)
                problems.append(f"{key}: {shown} is not supported: {row.reason}")
        elif row.kind == "honoured":
            data.setdefault(key, value)
    return data


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


def _validate(raw: RawConfig, name: str, problems: list[str]) -> JobSpec:
    """The spec of a mapping, or ``SpecError`` listing ``problems`` and every one found here."""
    data = _normalise(raw, problems)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(problems + _pydantic_problems(exc), source=name) from exc
    check_spec(spec, problems)
    if problems:
        raise SpecError(problems, source=name)
    return spec


def _mapping(text: str, name: str) -> RawConfig:
    try:
        raw = safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([f"not valid YAML: {exc}".replace("\n", " ")], source=name) from exc
    if not isinstance(raw, dict):
        raise SpecError(["expected a mapping of keys to values (a LLaMA-Factory train YAML)"], source=name)
    return raw


def _submitted_deepspeed(raw: RawConfig, problems: list[str]) -> RawConfig:
    """A submitted config names a DeepSpeed preset, LLaMA-Factory's example file by name, or
    carries its JSON inline; a path is refused without being looked at (whether a file exists on
    the coordinator or a worker is none of the submitter's business). Example names become the
    preset's mapping, so nothing reads a file the submitter named."""
    value = raw.get("deepspeed")
    if not isinstance(value, str) or value.lstrip().startswith("{") or value in (*DEEPSPEED_PRESETS, "auto"):
        return raw
    raw = dict(raw)
    known = value.rsplit("/", 1)[-1]
    if known in LLAMAFACTORY_DEEPSPEED:
        preset, changes = LLAMAFACTORY_DEEPSPEED[known]
        config = json.loads((PRESET_DIR / f"{preset}.json").read_text(encoding="utf-8"))
        config.setdefault("zero_optimization", {}).update(changes)
        raw["deepspeed"] = config
        return raw
    problems.append(
        f"deepspeed {value!r} is neither a preset ({', '.join(DEEPSPEED_PRESETS)}) nor one of "
        f"LLaMA-Factory's example files, known by name ({', '.join(sorted(LLAMAFACTORY_DEEPSPEED))}); "
        "a submitted config carries its own DeepSpeed JSON inline (deepspeed: {zero_optimization: ...}): "
        "files are not read from other machines"
    )
    del raw["deepspeed"]
    return raw


def parse_spec(source: str | RawConfig, *, name: str = "job config") -> JobSpec:
    """Read a submitted YAML text (or an already-parsed mapping) into a ``JobSpec``; raise
    ``SpecError`` listing all problems. Submitted configs come from other people: bounded YAML,
    and no file of this machine is read on their behalf (``deepspeed``)."""
    raw = _mapping(source, name) if isinstance(source, str) else source
    if not isinstance(raw, dict):
        raise SpecError(["expected a mapping of keys to values (a LLaMA-Factory train YAML)"], source=name)
    problems: list[str] = []
    return _validate(_submitted_deepspeed(raw, problems), name, problems)


def _local(base: Path, value: str) -> Path | None:
    """A relative path as LLaMA-Factory reads it (from the working directory) or beside the job file."""
    for root in (base, Path.cwd()):
        if (root / value).exists():
            return (root / value).resolve()
    return None


def _resolve_paths(raw: RawConfig, base: Path) -> RawConfig:
    """Relative ``dataset_dir``/``deepspeed``/``adapter_name_or_path`` found in ``base`` or the
    working directory; ``output_dir`` (and a ``dataset_dir`` found nowhere) taken from ``base``."""
    raw = dict(raw)
    output = raw.get("output_dir")
    if isinstance(output, str) and not Path(output).expanduser().is_absolute():
        raw["output_dir"] = str(base / output)
    data = raw.get("dataset_dir")
    remote = data == "ONLINE" or str(data).startswith("REMOTE:")
    if isinstance(data, str) and not remote and not Path(data).expanduser().is_absolute():
        raw["dataset_dir"] = str(_local(base, data) or base / data)
    adapters = raw.get("adapter_name_or_path")
    if isinstance(adapters, str):
        raw["adapter_name_or_path"] = ",".join(str(_local(base, a) or a) for a in split_list(adapters))
    ds = raw.get("deepspeed")
    if isinstance(ds, str) and ds not in DEEPSPEED_PRESETS and not Path(ds).expanduser().is_absolute():
        found = _local(base, ds)
        if found is not None or Path(ds).name not in LLAMAFACTORY_DEEPSPEED:
            raw["deepspeed"] = str(found or base / ds)
    return raw


@dataclass(frozen=True)
class JobConfig:
    """A job's config as given: the validated spec, and the effective YAML to record (the file's own
    text when nothing overrides it, else the file's keys with the overrides applied)."""

    spec: JobSpec
    text: str
    source: str


def load_job(path: Path | str | None, overrides: Overrides | None = None) -> JobConfig:
    """Read a job file (or none: LLaMA-Factory's defaults) with ``overrides`` applied, every problem
    of both reported at once. Paths in the file are found beside it or, as LLaMA-Factory reads them,
    in the working directory; paths in overrides in the working directory."""
    overrides = overrides or Overrides()
    cwd = Path.cwd()
    if path is None:
        source, text, raw = "command line", "", {}
    else:
        path = Path(path)
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HipbotError(f"cannot read job config {path}: {exc}") from exc
        raw = _mapping(text, source)
    if overrides.values:
        source += " with overrides" if path is not None else ""
        text = yaml.safe_dump(apply_overrides(raw, overrides.values), sort_keys=False, allow_unicode=True)
    base = path.resolve().parent if path is not None else cwd
    from_file = dict(raw)
    from_file.setdefault("dataset_dir", "data")
    resolved = apply_overrides(_resolve_paths(from_file, base), _resolve_paths(overrides.values, cwd))
    return JobConfig(_validate(resolved, source, list(overrides.problems)), text, source)


def attach_deepspeed(config: JobConfig) -> str:
    """The config's text to send to another machine: a DeepSpeed JSON file it names (found here)
    travels inside it, as the inline mapping, since submitted configs never name files."""
    ds = config.spec.deepspeed
    if not isinstance(ds, str) or ds in DEEPSPEED_PRESETS or not Path(ds).expanduser().is_file():
        return config.text
    try:
        inline = json.loads(Path(ds).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HipbotError(f"cannot attach deepspeed config {ds}: {exc}") from exc
    raw = dict(_mapping(config.text, config.source) if config.text.strip() else {})
    raw["deepspeed"] = inline
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def load_spec(path: Path | str) -> JobSpec:
    """Read a job file (see ``load_job``)."""
    return load_job(path).spec


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

            check_attachment(attachment, attachment_name or "dataset.jsonl")
    except HipbotError as exc:
        return Validation(None, str(exc))
    return Validation(spec, None)
