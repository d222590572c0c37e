"""Which worker a job fits: measured with the DeepSpeed stage that worker's runner will pick."""

from __future__ import annotations

import pytest

from hipbot.db import open_db
from hipbot.jobs.finetune.intake import job_fits
from hipbot.jobs.finetune.memory import estimate
from hipbot.jobs.finetune.models import GpuReport
from hipbot.jobs.finetune.queue import JobQueue
from hipbot.jobs.finetune.spec import parse_spec

# Llama-3-8B's shape: 16.8 GiB on one GPU without DeepSpeed, 10.1 GiB with ZeRO-3 + CPU offload.
LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
YAML = "model_name_or_path: org/llama-8b\ndataset: d\nper_device_train_batch_size: 1\ncutoff_len: 2048\n"


@pytest.fixture()
def queue(tmp_path) -> JobQueue:
    return JobQueue(open_db(tmp_path / "q.db"))


def _worker(queue: JobQueue, name: str, memory: float):
    report = GpuReport.model_validate(
        {"backend": "rocm", "gpus": [{"index": 0, "name": "R9700", "arch": "gfx1201", "memory_gib": memory}]}
    )
    return queue.register_worker(queue.create_registration_token(), name, report)[0]


def _job(queue: JobQueue, text: str):
    spec = parse_spec(text)
    memory = estimate(spec, LLAMA_8B, 1)
    return queue.submit(spec, text, model_config=LLAMA_8B, memory=memory.as_dict())


def test_a_job_naming_no_deepspeed_fits_where_the_runner_would_offload(queue: JobQueue) -> None:
    plain = _job(queue, YAML)
    assert plain.memory_gib > 12  # as if it ran without DeepSpeed
    assert job_fits(plain, _worker(queue, "small", 12.0))  # the runner picks z3_offload there
    assert not job_fits(plain, _worker(queue, "tiny", 6.0))  # nothing makes it fit 6 GiB


def test_a_named_deepspeed_stage_is_measured_as_named(queue: JobQueue) -> None:
    no_offload = _job(queue, YAML + "deepspeed: z2\n")
    assert not job_fits(no_offload, _worker(queue, "small", 12.0))
    assert job_fits(no_offload, _worker(queue, "big", 24.0))
