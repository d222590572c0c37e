"""`hipbot finetune list/status/logs/cancel/workers/submit` on the embedded default (the local
database as the queue): the same backend the bot uses when no coordinator is configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, write_config_only_model, write_datasets

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
