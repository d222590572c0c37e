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
from pydantic_core import ErrorDetails

from hipbot.errors import HipbotError
from hipbot.i18n import N_, Joined, Message
from hipbot.jobs.finetune.spec.checks import check_spec
from hipbot.jobs.finetune.spec.keys import ALIASES, KEYS, METHOD_REASONS, unknown_key
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

JOB_CONFIG = N_("job config")
NOT_A_MAPPING = N_("expected a mapping of keys to values (a LLaMA-Factory train YAML)")


class SpecError(HipbotError):
    """A job file with problems; ``problems`` lists every one, each a full sentence (a ``Message``
    where hipbot wrote it: English as a ``str``, in the user's language where shown)."""

    def __init__(self, problems: list[str], *, source: str = JOB_CONFIG) -> None:
        self.problems = problems
        if len(problems) == 1:
            heading = N_("{source} has 1 problem:", source=source)
        else:
            heading = N_("{source} has {count} problems:", source=source, count=len(problems))
        super().__init__(
            Joined("\n  - ", [heading, *problems]),
            hint=N_("keys follow LLaMA-Factory's train YAML; see `hipbot finetune validate --help`"),
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
                problems.append(
                    N_(
                        "compute_type must be one of {types}, got {value!r}",
                        types=", ".join(COMPUTE_TYPES),
                        value=value,
                    )
                )
                continue
            alias = {"bf16": {"bf16": True}, "fp16": {"fp16": True}, "fp32": {"bf16": False, "fp16": False}}
            implied = alias.get(value, {"pure_bf16": True})
            for name, flag in implied.items():
                if name in raw and raw[name] != flag:
                    problems.append(
                        N_(
                            "compute_type: {value} contradicts {name}: {other}",
                            value=value,
                            name=name,
                            other=raw[name],
                        )
                    )
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
                    N_(
                        "train_sampling_strategy must be random, sequential or group_by_length, got {value!r}",
                        value=value,
                    )
                )
        elif (row := KEYS.get(key)) is None:
            problems.append(unknown_key(key))
        elif row.kind == "refused":
            allowed = row.unset_up_to is not None and isinstance(value, int) and value <= row.unset_up_to
            if _is_set(value) and not allowed:
                shown = json.dumps(value, default=str)
                problems.append(
                    N_("{key}: {value} is not supported: {reason}", key=key, value=shown, reason=row.reason)
                )
        elif row.kind == "honoured":
            data.setdefault(key, value)
    return data


# pydantic's messages by error type, in pydantic's words (its ``ctx`` values in braces): the types a
# YAML file can run into. A message pydantic words otherwise (another version) is shown as it is.
PYDANTIC_MESSAGES = {
    "float_parsing": N_("Input should be a valid number, unable to parse string as a number"),
    "float_type": N_("Input should be a valid number"),
    "finite_number": N_("Input should be a finite number"),
    "int_parsing": N_("Input should be a valid integer, unable to parse string as an integer"),
    "int_type": N_("Input should be a valid integer"),
    "int_from_float": N_("Input should be a valid integer, got a number with a fractional part"),
    "int_parsing_size": N_("Unable to parse input string as an integer, exceeded maximum size"),
    "bool_parsing": N_("Input should be a valid boolean, unable to interpret input"),
    "bool_type": N_("Input should be a valid boolean"),
    "string_type": N_("Input should be a valid string"),
    "list_type": N_("Input should be a valid list"),
    "dict_type": N_("Input should be a valid dictionary"),
    "model_type": N_("Input should be a valid dictionary or instance of {class_name}"),
    "none_required": N_("Input should be None"),
    "literal_error": N_("Input should be {expected}"),
    "enum": N_("Input should be {expected}"),
    "greater_than": N_("Input should be greater than {gt}"),
    "greater_than_equal": N_("Input should be greater than or equal to {ge}"),
    "less_than": N_("Input should be less than {lt}"),
    "less_than_equal": N_("Input should be less than or equal to {le}"),
    "multiple_of": N_("Input should be a multiple of {multiple_of}"),
}


def _pydantic_message(err: ErrorDetails) -> str:
    """pydantic's message for ``err``, a ``Message`` when its type is one of ``PYDANTIC_MESSAGES``
    and pydantic worded it so, or the spec's own validator raised one (the same English either way)."""
    msg = err["msg"].removeprefix("Value error, ")
    error = err.get("ctx", {}).get("error")
    if err["type"] == "value_error" and isinstance(error, ValueError) and error.args == (msg,):
        return error.args[0]  # the spec's own validators raise Messages
    template = PYDANTIC_MESSAGES.get(err["type"])
    if template is None:
        return msg
    ctx = {k: v for k, v in err.get("ctx", {}).items() if not isinstance(v, BaseException)}
    try:
        message = Message(template, **ctx)
    except (KeyError, IndexError, ValueError):
        return msg
    return message if message == msg else msg


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out: list[str] = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "missing":
            out.append(N_("{where} is required", where=where))
        elif err["type"] == "literal_error" and where in ("stage", "finetuning_type"):
            why = METHOD_REASONS.get(
                str(err.get("input")), N_("workers run stage: sft with finetuning_type: lora")
            )
            out.append(
                N_(
                    "{where} {value!r} is not supported: {reason}",
                    where=where,
                    value=err.get("input"),
                    reason=why,
                )
            )
        else:
            message = _pydantic_message(err)
            out.append(
                N_("{where}: {message} (got {value!r})", where=where, message=message, value=err.get("input"))
            )
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
        error = str(exc).replace("\n", " ")
        raise SpecError([N_("not valid YAML: {error}", error=error)], source=name) from exc
    if not isinstance(raw, dict):
        raise SpecError([NOT_A_MAPPING], source=name)
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
        N_(
            "deepspeed {value!r} is neither a preset ({presets}) nor one of LLaMA-Factory's example files, "
            "known by name ({examples}); a submitted config carries its own DeepSpeed JSON inline "
            "(deepspeed: {{zero_optimization: ...}}): files are not read from other machines",
            value=value,
            presets=", ".join(DEEPSPEED_PRESETS),
            examples=", ".join(sorted(LLAMAFACTORY_DEEPSPEED)),
        )
    )
    del raw["deepspeed"]
    return raw


def parse_spec(source: str | RawConfig, *, name: str = JOB_CONFIG) -> JobSpec:
    """Read a submitted YAML text (or an already-parsed mapping) into a ``JobSpec``; raise
    ``SpecError`` listing all problems. Submitted configs come from other people: bounded YAML,
    and no file of this machine is read on their behalf (``deepspeed``)."""
    raw = _mapping(source, name) if isinstance(source, str) else source
    if not isinstance(raw, dict):
        raise SpecError([NOT_A_MAPPING], source=name)
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
        source, text, raw = N_("command line"), "", {}
    else:
        path = Path(path)
        source: str = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HipbotError(N_("cannot read job config {path}: {error}", path=path, error=exc)) from exc
        raw = _mapping(text, source)
    if overrides.values:
        source = N_("{path} with overrides", path=source) if path is not None else source
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
        raise HipbotError(N_("cannot attach deepspeed config {path}: {error}", path=ds, error=exc)) from exc
    raw = dict(_mapping(config.text, config.source) if config.text.strip() else {})
    raw["deepspeed"] = inline
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def load_spec(path: Path | str) -> JobSpec:
    """Read a job file (see ``load_job``)."""
    return load_job(path).spec


@dataclass(frozen=True)
class Validation:
    """What front ends (Discord, HTTP) show: the spec when it is fine, else the message to print
    (English as a ``str``, in the user's language through ``localized``)."""

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
        hint = [N_("hint: {hint}", hint=exc.hint)] if exc.hint else []
        return Validation(None, Joined("\n  ", [exc.message, *hint]))
    return Validation(spec, None)
