"""progress.jsonl gets every step's own loss, read a step late instead of by a device sync, while
HF's log runs every ``logging_steps`` (and on the last step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.trainer import read_progress, train, write_job


def _run(tmp_path: Path, name: str, logging_steps: int) -> tuple[list[dict], dict]:
    spec = parse_spec(
        job_yaml(
            tiny_model_dir(),
            write_datasets(tmp_path / "data"),
            tmp_path / f"out-{name}",
            max_steps=5,
            save_steps=100,
            logging_steps=logging_steps,
        )
    )
    job_dir = write_job(tmp_path / f"job-{name}", spec, device="cpu")
    metrics = train(job_dir)
    return read_progress(job_dir), metrics


def test_every_step_has_its_loss_while_hf_logs_every_logging_steps(tmp_path: Path) -> None:
    every, _ = _run(tmp_path, "every", 1)
    sparse, metrics = _run(tmp_path, "sparse", 3)
    assert [line["step"] for line in sparse] == [1, 2, 3, 4, 5]
    # each step's own loss, as HF logs it when it logs every step
    assert [line["loss"] for line in sparse] == pytest.approx([line["loss"] for line in every], rel=1e-6)
    assert all(line["lr"] == pytest.approx(other["lr"]) for line, other in zip(sparse, every, strict=True))
    # HF's grad_norm comes with the steps HF logs: every third, and the last
    assert [line["grad_norm"] is not None for line in sparse] == [False, False, True, False, True]
    assert all(line["tokens"] > 0 and line["tokens_per_second"] > 0 for line in sparse)
    # the results' loss curve is HF's log: the mean over each window (steps 1-3, 4-5), ending on
    # the last step
    losses = [line["loss"] for line in every]
    assert metrics["first_loss"] == pytest.approx(sum(losses[:3]) / 3, rel=1e-4)
    assert metrics["final_loss"] == pytest.approx(sum(losses[3:]) / 2, rel=1e-4)
    assert (tmp_path / "out-sparse" / "loss.png").is_file()
