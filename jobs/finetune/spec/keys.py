"""One table of every key a LLaMA-Factory train YAML may hold: honoured, ignored or refused.

The ignored and refused keys are data (``keys.yaml``, beside this module); the honoured keys are the
spec's fields, with their help text (``models.py``). ``KEYS`` joins both, so a front end can show
what any key does here, and the spec's reader can tell a known key from a typo.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from hipbot.i18n import N_, Message
from hipbot.jobs.finetune.spec.models import FIELDS, GROUPS

KeyKind = Literal["honoured", "ignored", "refused"]
KEYS_FILE = Path(__file__).with_name("keys.yaml")


@dataclass(frozen=True)
class KeyInfo:
    """One key: what it does (``help``), what hipbot does with it (``kind``) and why (``reason``)."""

    key: str
    kind: KeyKind
    group: str
    help: str
    reason: str = ""
    # an older name: the field it sets
    sets: str | None = None
    # a refused key whose values up to this ask for nothing (tp_size: 1)
    unset_up_to: int | None = None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _IgnoredGroup(_Strict):
    group: str
    reason: str
    keys: dict[str, str]


class _Refused(_Strict):
    help: str
    reason: str
    unset_up_to: int | None = None


class _KeysFile(_Strict):
    ignored: list[_IgnoredGroup]
    refused: dict[str, _Refused]
    methods: dict[str, str]
    aliases: dict[str, str]
    shorthands: dict[str, str]


@cache
def _keys_file() -> _KeysFile:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with KEYS_FILE.open(encoding="utf-8") as fh:
        return _KeysFile.model_validate(yaml.load(fh, Loader=loader))


def _text(text: str) -> str:
    """A help text or reason as a ``Message``: English as a ``str``, its catalogue entry where shown
    (keys.yaml's and the spec's field docstrings are extracted by ``hipbot.i18n_extract``)."""
    return Message(text) if text else text


def _table() -> dict[str, KeyInfo]:
    data = _keys_file()
    rows: dict[str, KeyInfo] = {}
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            rows[name] = KeyInfo(name, "honoured", group, _text(info.description or ""))
    for old, new in data.aliases.items():
        rows[old] = KeyInfo(old, "honoured", rows[new].group, N_("Older name of {key}.", key=new), sets=new)
    for name, text in data.shorthands.items():
        rows[name] = KeyInfo(name, "honoured", "shorthand", _text(text))
    for block in data.ignored:
        for name, text in block.keys.items():
            rows[name] = KeyInfo(name, "ignored", block.group, _text(text), _text(block.reason))
    for name, row in data.refused.items():
        rows[name] = KeyInfo(
            name, "refused", "refused", _text(row.help), _text(row.reason), unset_up_to=row.unset_up_to
        )
    clash = set(FIELDS) & {k for k, row in rows.items() if row.kind != "honoured"}
    if clash:  # a spec field listed in keys.yaml too: the file is wrong, not the user's config
        raise RuntimeError(f"{KEYS_FILE} lists fields of the job spec: {', '.join(sorted(clash))}")
    return rows


KEYS: dict[str, KeyInfo] = _table()
IGNORED_KEYS = frozenset(k for k, row in KEYS.items() if row.kind == "ignored")
# Keys that cannot work here when set (anything but null/false/empty): the reason, and what to use.
REFUSED_KEYS: dict[str, str] = {k: row.reason for k, row in KEYS.items() if row.kind == "refused"}
# Why a stage or fine-tuning type other than LoRA SFT cannot run here.
METHOD_REASONS: dict[str, str] = {name: _text(why) for name, why in _keys_file().methods.items()}
# Old names of the same settings.
ALIASES: dict[str, str] = dict(_keys_file().aliases)
KNOWN_KEYS = tuple(KEYS)


def did_you_mean(key: str) -> str | None:
    """The known key ``key`` is a near miss of (``lora_rank`` for ``lora_rnak``), if any."""
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.75) or difflib.get_close_matches(
        key, FIELDS, n=1, cutoff=0.6
    )
    return close[0] if close else None


def unknown_key(key: str) -> Message:
    """``unknown key 'lora_rnak'; did you mean 'lora_rank'?`` (without the question when nothing is close)."""
    close = did_you_mean(key)
    if close is None:
        return N_("unknown key {key!r}", key=key)
    return N_("unknown key {key!r}; did you mean {suggestion!r}?", key=key, suggestion=close)
