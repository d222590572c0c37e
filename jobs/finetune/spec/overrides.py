"""Config overrides as LLaMA-Factory users type them after the YAML (or instead of it).

``llamafactory-cli train job.yaml learning_rate=1e-5`` (OmegaConf's ``key=value``) and
``llamafactory-cli train --lora_target q_proj,v_proj --per_device_train_batch_size 4``
(HfArgumentParser's ``--key value`` / ``--key=value``, ``--flag`` for true, ``--no_flag`` for false).
Values are read as YAML scalars, exactly as the same text after ``key:`` in the file, so the spec's
coercion, aliases and "did you mean" apply unchanged. Pure functions: the CLI, the bot's
``/finetune`` and the console share them.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import yaml

from hipbot.i18n import N_
from hipbot.jobs.finetune.spec.keys import ALIASES, KEYS

# A config as read from YAML (or from overrides): key -> value, before validation.
RawConfig = dict[str, object]

# Shorthands and the fields they set: an override of either side replaces the other in the file,
# so `compute_type=fp16` over a file with `bf16: true` means fp16, not a contradiction.
_SHORTHANDS = {
    "compute_type": frozenset({"bf16", "fp16", "pure_bf16"}),
    "adafactor": frozenset({"optim"}),
    "train_sampling_strategy": frozenset({"disable_shuffling", "group_by_length"}),
}


@dataclass(frozen=True)
class Overrides:
    """Parsed overrides: the values by key (in the order given; a repeated key keeps the last), and
    the arguments that are not overrides, each as a full sentence."""

    values: RawConfig = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def _scalar(text: str) -> object:
    """The value YAML gives ``key: text``; text that would become a mapping or list without being
    written as one (``You are: helpful``) stays text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, dict | list) and not text.lstrip().startswith(("{", "[")):
        return text
    return value


def _assigns_key(word: str) -> bool:
    """``lora_rank=4`` after a bare ``--flag`` is the next override, not the flag's value."""
    name, sep, _ = word.partition("=")
    return bool(sep) and name.strip() in KEYS


def _flag_key(name: str) -> tuple[str, object]:
    """``--no_use_fast_tokenizer`` sets ``use_fast_tokenizer: false`` (HfArgumentParser's spelling)
    when ``no_...`` is not a key itself; any other bare ``--flag`` is true."""
    if name.startswith("no_") and name not in KEYS and name[3:] in KEYS:
        return name[3:], False
    return name, True


def parse_overrides(args: Sequence[str] | str, *, own_options: Collection[str] = ()) -> Overrides:
    """Overrides from command-line words (or one line of text, split as a shell would).

    ``own_options``: the names (underscored) of the calling command's own options, such as ``cpu``:
    an override of one that is not a config key is a problem that says how to pass the option."""
    words = shlex.split(args) if isinstance(args, str) else list(args)
    values: RawConfig = {}
    problems: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, sep, text = word[2:].partition("=")
            name = name.replace("-", "_")
            if sep:
                key, value = name, _scalar(text)
            elif i < len(words) and not words[i].startswith("--") and not _assigns_key(words[i]):
                key, value = name, _scalar(words[i])
                i += 1
            else:
                key, value = _flag_key(name)
        elif "=" in word and not word.startswith(("=", "-")):
            name, _, text = word.partition("=")
            key, value = name.strip(), _scalar(text)
        else:
            problems.append(
                N_(
                    "{word!r} is not an override: write key=value, --key value or --key=value "
                    "(the config file, if any, comes first)",
                    word=word,
                )
            )
            continue
        if key in own_options and key not in KEYS:
            problems.append(
                N_(
                    "{key} is an option of this command, not a config key: write {option}",
                    key=key,
                    option="--" + key.replace("_", "-"),
                )
            )
            continue
        values.pop(key, None)
        values[key] = value
    return Overrides(values, tuple(problems))


def _same_setting(key: str) -> set[str]:
    """The keys of a file that an override of ``key`` replaces: itself, its older or newer names,
    and the fields a shorthand sets (or the shorthand setting them)."""
    canonical = ALIASES.get(key, key)
    keys = {key, canonical} | {old for old, new in ALIASES.items() if new == canonical}
    keys |= _SHORTHANDS.get(canonical, frozenset())
    keys |= {short for short, fields in _SHORTHANDS.items() if canonical in fields}
    return keys


def apply_overrides(raw: RawConfig, values: RawConfig) -> RawConfig:
    """The file's mapping with the overrides applied: an override replaces the file's value of the
    same setting (under any of its names), and new keys come last, in the order given."""
    merged = dict(raw)
    for key, value in values.items():
        replaced = _same_setting(key)
        merged = {k: value if k == key else v for k, v in merged.items() if k == key or k not in replaced}
        merged.setdefault(key, value)
    return merged
