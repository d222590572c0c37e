"""The key table (keys.yaml + the spec's fields): every key is documented, and each kind does what
the table says when a config sets it."""

from __future__ import annotations

import pytest

from hipbot.jobs.finetune.spec import KEYS, JobSpec, SpecError, parse_spec

BASE = {"model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "alpaca_en_demo"}


def test_every_key_has_help_and_every_ignored_or_refused_key_a_reason() -> None:
    assert set(JobSpec.model_fields) <= set(KEYS)
    for key, row in KEYS.items():
        assert row.help.strip(), key
        assert row.kind == "honoured" or row.reason.strip(), key
        assert JobSpec.model_fields.get(key) is None or row.help == JobSpec.model_fields[key].description


@pytest.mark.parametrize("key", sorted(k for k, row in KEYS.items() if row.kind == "ignored"))
def test_an_ignored_key_loads_and_changes_nothing(key: str) -> None:
    assert parse_spec({**BASE, key: "x"}) == parse_spec(BASE)


@pytest.mark.parametrize("key", sorted(k for k, row in KEYS.items() if row.kind == "refused"))
def test_a_refused_key_says_why(key: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, key: 4})
    assert info.value.problems == [f"{key}: 4 is not supported: {KEYS[key].reason}"]
    assert parse_spec({**BASE, key: None}) == parse_spec(BASE)


VALUES = {
    "packing": True,
    "gradient_checkpointing": False,
    "gradient_checkpointing_kwargs": {"use_reentrant": False},
    "eval_strategy": "steps",
    "per_device_train_batch_size": 3,
    "per_device_eval_batch_size": 3,
}


def test_an_older_name_sets_the_field_it_names() -> None:
    older = {key: row.sets for key, row in KEYS.items() if row.sets is not None}
    assert set(older.values()) == set(VALUES)
    for key, field in older.items():
        base = {**BASE, "val_size": 0.1}
        spec = parse_spec({**base, key: VALUES[field]})
        assert spec == parse_spec({**base, field: VALUES[field]}) != parse_spec(base), key


def test_keys_command(capsys: pytest.CaptureFixture[str]) -> None:
    from hipbot.cli import main

    assert main(["finetune", "keys", "tp_size", "sft_packing"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["tp_size", "refused"] and KEYS["tp_size"].reason in out[0]
    assert out[1].split()[:2] == ["sft_packing", "honoured"]
    assert main(["finetune", "keys", "lora_rnk"]) == 1
    assert "did you mean 'lora_rank'?" in capsys.readouterr().err
