"""`hipbot finetune list/status/logs/cancel/workers/submit` on the embedded default (the local
database as the queue): the same backend the bot uses when no coordinator is configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_config_only_model, write_datasets

from hipbot.cli import main
from hipbot.config import load_settings
from hipbot.jobs.finetune.backends import LocalJobs


def test_local_queue_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_config_only_model(tmp_path / "tiny")
    text = job_yaml(model, write_datasets(tmp_path / "data"), tmp_path / "out")
    jobs = LocalJobs(load_settings())
    submitted = jobs.submit(text, owner="ana", guild=None, dataset=None, dataset_name=None)
    job_id = submitted.job.id
    assert submitted.warning.startswith("needs ~")  # no worker registered yet

    assert main(["finetune", "list"]) == 0
    assert f"#{job_id}" in capsys.readouterr().out
    assert main(["finetune", "status", str(job_id)]) == 0
    status = capsys.readouterr().out
    assert "queued" in status and "ana" in status
    assert main(["finetune", "logs", str(job_id)]) == 0
    assert "no registered worker fits" in capsys.readouterr().out
    assert main(["finetune", "cancel", str(job_id)]) == 0
    assert f"job #{job_id}: cancelled" in capsys.readouterr().out
    assert jobs.get(job_id).state == "cancelled"
    assert main(["finetune", "list"]) == 0 and capsys.readouterr().out.strip() == "no jobs"
    assert main(["finetune", "workers"]) == 0 and capsys.readouterr().out.strip() == "no workers"

    assert main(["finetune", "submit", str(tmp_path / "job.yaml")]) == 1
    assert "no coordinator configured" in capsys.readouterr().err


def test_validate_reports_every_dataset_problem_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write_config_only_model(tmp_path / "tiny")
    data = write_datasets(tmp_path / "data")
    config = tmp_path / "job.yaml"
    config.write_text(job_yaml(model, data, tmp_path / "out", dataset="alpaca_demo,sharegpt_demo"))
    assert main(["finetune", "validate", str(config)]) == 0
    assert "ok: " in capsys.readouterr().out

    (data / "sharegpt_demo.jsonl").unlink()
    config.write_text(
        job_yaml(
            model, data, tmp_path / "out", dataset="alpaca_demo,sharegpt_demo", eval_dataset="alpaca_dmo"
        )
    )
    assert main(["finetune", "validate", str(config)]) == 1
    err = capsys.readouterr().err
    assert "has 2 problems" in err and "sharegpt_demo.jsonl does not exist" in err and "alpaca_dmo" in err


def test_overrides_parser_takes_both_llamafactory_styles() -> None:
    from hipbot.jobs.finetune.spec import apply_overrides, parse_overrides

    words = "--lora_target q_proj,v_proj --per-device-train-batch-size=4 learning_rate=1e-5 --bf16 logging_steps=1"
    parsed = parse_overrides(words.split())
    assert parsed.values == {
        "lora_target": "q_proj,v_proj",
        "per_device_train_batch_size": 4,
        "learning_rate": "1e-5",
        "bf16": True,
        "logging_steps": 1,
    }
    assert parse_overrides('default_system="You are: brief" --no_use_fast_tokenizer').values == {
        "default_system": "You are: brief",
        "use_fast_tokenizer": False,
    }
    wrong = parse_overrides(["stray", "cpu=true"], own_options={"cpu"})
    assert wrong.values == {} and len(wrong.problems) == 2
    assert "write --cpu" in wrong.problems[1]
    merged = apply_overrides(
        {"sft_packing": True, "compute_type": "bf16", "lora_rank": 8}, {"packing": False, "fp16": True}
    )
    assert merged == {"lora_rank": 8, "packing": False, "fp16": True}


def test_override_typos_and_collisions_are_reported_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write_config_only_model(tmp_path / "tiny")
    config = tmp_path / "job.yaml"
    config.write_text(job_yaml(model, write_datasets(tmp_path / "data"), tmp_path / "out"))
    assert main(["finetune", "validate", str(config), "lora_rnk=4", "--learning_rat", "1e-5", "stray"]) == 1
    err = capsys.readouterr().err
    assert (
        "has 3 problems" in err
        and "did you mean 'lora_rank'?" in err
        and "did you mean 'learning_rate'?" in err
    )
    assert main(["finetune", "validate", str(config), "--lora_rank", "4", "compute_type=fp16"]) == 0
    assert "LoRA r=4 alpha=8" in capsys.readouterr().out
    assert main(["finetune", "run", str(config), "--allow_remote_code"]) == 1
    assert "write --allow-remote-code" in capsys.readouterr().err
    assert (
        main(["finetune", "submit", str(config), "--dataset", "alpaca_demo", "--coordinator", "http://x"])
        == 1
    )
    assert "write dataset=alpaca_demo" in capsys.readouterr().err


def _job_id(out: str) -> int:
    return int(out.split("job #", 1)[1].split(" ", 1)[0].rstrip(":"))


def test_the_issue_command_lines_train_and_record_file_plus_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`llamafactory-cli train job.yaml learning_rate=1e-5 logging_steps=1` and
    `llamafactory-cli train --deepspeed zero3_offload.json --lora_target q_proj,v_proj
    --per_device_train_batch_size 4`, as hipbot finetune run with a tiny model on the CPU."""
    import yaml

    monkeypatch.chdir(tmp_path)
    data = write_datasets(tmp_path / "data")
    config = tmp_path / "job.yaml"
    config.write_text(job_yaml(tiny_model_dir(), data, tmp_path / "out", max_steps=2, logging_steps=5))
    overrides = ["learning_rate=1e-5", "logging_steps=1"]
    assert main(["finetune", "run", str(config), *overrides, "--cpu"]) == 0
    job = LocalJobs(load_settings()).get(_job_id(capsys.readouterr().out))
    assert job.state == "succeeded"
    recorded = yaml.safe_load(job.spec_yaml)
    assert recorded == {**yaml.safe_load(config.read_text()), "learning_rate": "1e-5", "logging_steps": 1}
    assert main(["finetune", "status", str(job.id)]) == 0
    assert "  learning_rate: 1e-5\n" in capsys.readouterr().out  # the override beat the file's 0.005

    line = "--deepspeed zero3_offload.json --lora_target q_proj,v_proj --per_device_train_batch_size 4"
    local = [
        "--model_name_or_path",
        str(tiny_model_dir()),
        "--dataset",
        "alpaca_demo",
        "--dataset_dir",
        "data",
    ]
    rest = ["--template", "chatml", "--cutoff_len", "64", "--max_steps", "1", "--output_dir", "out2"]
    assert main(["finetune", "run", *line.split(), *local, *rest, "--cpu"]) == 0
    job = LocalJobs(load_settings()).get(_job_id(capsys.readouterr().out))
    recorded = yaml.safe_load(job.spec_yaml)
    assert recorded["deepspeed"] == "zero3_offload.json" and recorded["per_device_train_batch_size"] == 4
    assert (tmp_path / "out2" / "adapter_model.safetensors").is_file()


def test_the_bot_reads_key_value_pairs_with_the_same_parser() -> None:
    import yaml

    from hipbot.bot.handlers.jobs import build_job_yaml

    text = build_job_yaml(
        "model_name_or_path: m\nsft_packing: true\nlora_rank: 8\n",
        extra={"packing": "false", "lora_rank": "4"},
    )
    assert yaml.safe_load(text) == {"model_name_or_path": "m", "lora_rank": 4, "packing": False}
