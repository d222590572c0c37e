"""The template record (what a job prompted its examples with) and how the registry keeps it.

Real SmolLM2 tokenizer, real SQLite, a real PEFT adapter folder; no server needed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hipbot.cli import main
from hipbot.config import load_settings
from hipbot.db import migrate, open_db
from hipbot.jobs.finetune.spec import JobSpec
from hipbot.jobs.finetune.template_record import (
    RECORD_FILE,
    ChatMessage,
    TemplateError,
    TemplateRecord,
    from_training,
    read,
    write,
)
from hipbot.jobs.serve import registry as registry_module
from hipbot.jobs.serve.chat import answer_target
from hipbot.jobs.serve.publish import register_adapter
from hipbot.jobs.serve.registry import Registry


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


def _spec(**keys: object) -> JobSpec:
    return JobSpec.model_validate({"model_name_or_path": "m", "dataset": ["d"], **keys})


def _record(tokenizer, **keys: object) -> TemplateRecord:
    return from_training(_spec(**keys), tokenizer)


CONVERSATION = [
    ChatMessage(role="user", content="Which header replaces cuda_runtime.h?"),
    ChatMessage(role="assistant", content="hip/hip_runtime.h"),
]


@pytest.mark.parametrize("template", [None, "default", "alpaca", "chatml", "llama3", "phi4", "qwen3_nothink"])
@pytest.mark.parametrize("system", [None, "Answer in one sentence."])
def test_the_record_renders_what_the_tokenizer_rendered(
    tokenizer, template: str | None, system: str | None
) -> None:
    record = _record(tokenizer, template=template, default_system=system)
    back = TemplateRecord.from_json(record.to_json()).check()
    assert back == record
    messages = back.conversation("And the compiler?", CONVERSATION)
    assert [m.role for m in messages] == ["system"] * bool(system) + ["user", "assistant", "user"]
    options = {} if record.enable_thinking is None else {"enable_thinking": record.enable_thinking}
    expected = tokenizer.apply_chat_template(
        [m.model_dump() for m in messages], chat_template=record.chat_template, tokenize=False,
        add_generation_prompt=True, **options,
    )  # fmt: skip
    assert back.render(messages) == expected
    # An explicit system prompt replaces the trained default.
    assert back.conversation("q", system="Other.")[0] == ChatMessage(role="system", content="Other.")


def test_what_each_kind_of_template_records(tokenizer) -> None:
    default = _record(tokenizer, template="default")
    assert (default.source, default.label, default.stop, default.stop_token_ids) == (
        "named", "default", ("<|im_end|>",), (tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    )  # fmt: skip
    assert default.probe_prompt == "Human: What does hipify do to cudaMalloc?\nAssistant: "
    own = _record(tokenizer)
    assert (own.template, own.source, own.label) == (None, "tokenizer", "(tokenizer's)")
    assert own.chat_template == tokenizer.chat_template
    family = _record(tokenizer, template="qwen3_nothink")
    assert (family.label, family.enable_thinking) == ("qwen3_nothink (tokenizer's)", False)
    assert _record(tokenizer, template="alpaca", enable_thinking=None).enable_thinking is None


def test_a_tokenizer_without_a_template_falls_back_to_default(tokenizer) -> None:
    bare = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    bare.chat_template = None
    record = from_training(_spec(), bare)
    assert (record.source, record.label) == ("fallback", "(default)")
    assert record.probe_prompt.startswith("Human: ")


def test_bad_records_are_refused_with_the_reason(tokenizer, tmp_path: Path) -> None:
    assert read(tmp_path) is None  # an adapter from before records existed
    record = _record(tokenizer, template="alpaca")
    write(tmp_path, record)
    assert read(tmp_path) == record
    # A template edited after training no longer reproduces the training probe.
    data = json.loads(record.to_json()) | {"chat_template": record.chat_template.replace("###", "##")}
    (tmp_path / RECORD_FILE).write_text(json.dumps(data))
    with pytest.raises(TemplateError, match="renders differently here than in training"):
        read(tmp_path)
    (tmp_path / RECORD_FILE).write_text(json.dumps(data | {"format": 2}))
    with pytest.raises(TemplateError, match="record format 2") as info:
        read(tmp_path)
    assert info.value.hint == "upgrade hipbot on this machine"
    (tmp_path / RECORD_FILE).write_text('{"template": "x"}')
    with pytest.raises(TemplateError, match="not a valid template record: source: Field required"):
        read(tmp_path)
    broken = record.model_copy(update={"chat_template": "{% if %}"})
    with pytest.raises(TemplateError, match="not valid Jinja"):
        broken.render(broken.conversation("q"))
    failing = record.model_copy(update={"chat_template": "{{ raise_exception('no system role') }}"})
    with pytest.raises(TemplateError, match="failed to render: no system role"):
        failing.render(failing.conversation("q"))


def test_registry_migration_keeps_old_adapters_and_stores_records(
    tokenizer, lora_rank8: Path, tmp_path: Path, capsys
) -> None:
    settings = load_settings()
    # A database from before the template column: the v1 schema with one adapter in it.
    db = open_db(settings.database)
    migrate(db, "adapters", registry_module.STEPS[:1])
    db["adapters"].insert(
        {"name": "old", "base_model": "b", "rank": 8, "target_modules": '["q_proj"]', "size_bytes": 1,
         "sha256": "0" * 64, "path": str(tmp_path), "created_at": "2026-01-01T00:00:00+00:00"}
    )  # fmt: skip
    registry = Registry.open(settings)
    old = registry.get("old")
    assert (old.template, old.template_label) == (None, "-")

    folder = tmp_path / "adapter"
    shutil.copytree(lora_rank8, folder)
    record = _record(tokenizer, template="default", default_system="Be brief.")
    write(folder, record)
    adapter = register_adapter(registry, settings, "with-template", folder)
    assert adapter.template == record == Registry.open(settings).get("with-template").template
    assert read(adapter.path) == record  # the registry's copy of the folder keeps the record
    assert main(["serve", "list"]) == 0
    out = capsys.readouterr().out
    assert "TEMPLATE" in out and "default" in out
    assert main(["serve", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["with-template"]["template"]["default_system"] == "Be brief."
    assert rows["old"]["template"] is None

    # A record that cannot reproduce its probe is refused at registration, and nothing is kept.
    (folder / RECORD_FILE).write_text(record.model_copy(update={"probe_prompt": "x"}).to_json())
    with pytest.raises(TemplateError, match="renders differently"):
        register_adapter(registry, settings, "bad-template", folder)
    assert registry.find("bad-template") is None


def test_answers_use_the_adapter_only_when_it_has_a_record(
    tokenizer, lora_rank8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIPBOT_LLM_URL", "http://127.0.0.1:9/v1")
    settings = load_settings()
    registry = Registry.open(settings)
    assert answer_target(settings, registry) is None  # no HIPBOT_LLM_MODEL
    register_adapter(registry, settings, "plain", lora_rank8)
    folder = tmp_path / "a"
    shutil.copytree(lora_rank8, folder)
    write(folder, _record(tokenizer, template="alpaca"))
    register_adapter(registry, settings, "trained", folder)
    for name, expected in (("plain", None), ("smollm2", None), ("trained", "alpaca")):
        monkeypatch.setenv("HIPBOT_LLM_MODEL", name)
        target = answer_target(load_settings(), registry)
        assert (target.template.template if target else None) == expected
    assert (target.url, target.model) == ("http://127.0.0.1:9", "trained")
