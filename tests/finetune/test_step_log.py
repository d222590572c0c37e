"""progress.jsonl gets every step's own loss, read a step late instead of by a device sync, while
HF's log runs every ``logging_steps`` (and on the last step)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.step_log import StepLosses, _Step, progress_callback
from hipbot.jobs.finetune.trainer import read_progress, train, write_job


def _run(tmp_path: Path, name: str, logging_steps: int) -> tuple[list[dict], dict, float]:
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
    started = time.perf_counter()
    metrics = train(job_dir)
    return read_progress(job_dir), metrics, time.perf_counter() - started


def test_every_step_has_its_loss_while_hf_logs_every_logging_steps(tmp_path: Path) -> None:
    every, _, _ = _run(tmp_path, "every", 1)
    sparse, metrics, wall = _run(tmp_path, "sparse", 3)
    assert [line["step"] for line in sparse] == [1, 2, 3, 4, 5]
    # each step's own loss, as HF logs it when it logs every step
    assert [line["loss"] for line in sparse] == pytest.approx([line["loss"] for line in every], rel=1e-6)
    assert all(line["lr"] == pytest.approx(other["lr"]) for line, other in zip(sparse, every, strict=True))
    # HF's grad_norm comes with the steps HF logs: every third, and the last
    assert [line["grad_norm"] is not None for line in sparse] == [False, False, True, False, True]
    assert all(line["tokens"] > 0 and line["tokens_per_second"] > 0 for line in sparse)
    # tokens/s is each step's own (not the time between lines, which are written late, some together)
    step_seconds = [line["tokens"] / line["tokens_per_second"] for line in sparse]
    assert 0 < sum(step_seconds) < wall
    assert sparse[-1]["eta_seconds"] == 0 and sparse[0]["eta_seconds"] > 0
    # the results' loss curve is HF's log: the mean over each window (steps 1-3, 4-5), ending on
    # the last step
    losses = [line["loss"] for line in every]
    assert metrics["first_loss"] == pytest.approx(sum(losses[:3]) / 3, rel=1e-4)
    assert metrics["final_loss"] == pytest.approx(sum(losses[3:]) / 2, rel=1e-4)
    assert (tmp_path / "out-sparse" / "loss.png").is_file()


def test_a_gpu_step_is_timed_by_its_events(tmp_path: Path) -> None:
    """On a GPU each step's time is the time between its event and the step before's (lines are
    written late, some together, so the wall clock between them says nothing)."""

    class Event:  # torch.cuda.Event's timing, on a clock of our own
        def __init__(self, at: float) -> None:
            self.at = at

        def elapsed_time(self, end: Event) -> float:
            return (end.at - self.at) * 1000

    progress = progress_callback(StepLosses(), tmp_path / "progress.jsonl", 1)
    steps = [_Step(n, 0.0, None, 100, 1.0, Event(at)) for n, at in ((1, 7.0), (2, 7.25), (3, 7.75))]
    progress._seconds(steps[0])  # the first step: the wall clock since training began
    assert [progress._seconds(s) for s in steps[1:]] == [0.25, 0.5]
