"""The multi-process launch path on CPU: the worker's launcher (torchrun) starts two ranks on gloo,
with plain DDP (what ``deepspeed: auto`` picks for CPU ranks) and with DeepSpeed ZeRO-2 and ZeRO-3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets

from hipbot.jobs.finetune.runner import run_child
from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.trainer import launch_argv, write_job


def test_two_ranks_on_gloo_agree_on_the_loss(tmp_path: Path) -> None:
    data = write_datasets(tmp_path / "data")
    spec = parse_spec(
        job_yaml(
            tiny_model_dir(),
            data,
            tmp_path / "out",
            max_steps=3,
            save_steps=100,
            per_device_train_batch_size=2,
        )
    )
    job_dir = write_job(tmp_path / "job", spec, device="cpu")
    argv = launch_argv(job_dir, spec, 2)
    assert argv[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=2" in argv
    output: list[str] = []
    result = run_child(job_dir, spec, 2, on_output=output.extend, env={"OMP_NUM_THREADS": "1"})
    assert result.state == "succeeded", "\n".join(output[-150:])
    assert result.metrics["world_size"] == 2
    rank0 = [json.loads(x) for x in (job_dir / "progress.jsonl").read_text().splitlines()]
    rank1 = [json.loads(x) for x in (job_dir / "progress.rank1.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rank0] == [1, 2, 3]
    assert [r["loss"] for r in rank0] == [r["loss"] for r in rank1]
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("stage", ["z2", "z3"])
def test_deepspeed_zero_on_two_cpu_ranks(tmp_path: Path, stage: str) -> None:
    """DeepSpeed's CPU accelerator (gloo) runs the job as a worker would: loss falls, the adapter saves whole."""
    from safetensors.torch import load_file

    data = write_datasets(tmp_path / "data")
    spec = parse_spec(
        job_yaml(
            tiny_model_dir(),
            data,
            tmp_path / "out",
            max_steps=4,
            save_steps=100,
            per_device_train_batch_size=2,
            deepspeed=stage,
        )
    )
    job_dir = write_job(tmp_path / "job", spec, device="cpu")
    output: list[str] = []
    result = run_child(job_dir, spec, 2, on_output=output.extend, env={"OMP_NUM_THREADS": "1"})
    assert result.state == "succeeded", "\n".join(output[-150:])
    assert result.metrics["deepspeed"] == stage and result.metrics["world_size"] == 2
    losses = [json.loads(x)["loss"] for x in (job_dir / "progress.jsonl").read_text().splitlines()]
    assert len(losses) == 4 and losses[-1] < losses[0]
    adapter = load_file(str(tmp_path / "out" / "adapter_model.safetensors"))
    shapes = {tuple(t.shape) for t in adapter.values()}
    assert len(adapter) == 8 and shapes == {(8, 64), (64, 8), (32, 8)}  # q: 64 out, v: 2 kv heads x 16
