"""The SQLite job queue: states, leases, bounded retries, cancel, worker secrets."""

from __future__ import annotations

import pytest

from hipbot.db import open_db
from hipbot.errors import Forbidden, HipbotError, InvalidInput, JobNotFound, Unauthorized
from hipbot.jobs.finetune.models import GpuReport, Progress
from hipbot.jobs.finetune.queue import OPERATOR, Caller, JobQueue, hash_secret
from hipbot.jobs.finetune.spec import parse_spec

YAML = "model_name_or_path: org/base-model\ndataset: d\nlora_rank: 16\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def queue(tmp_path):
    clock = Clock()
    q = JobQueue(open_db(tmp_path / "q.db"), clock=clock)
    q.clock_ = clock
    return q


def worker(q: JobQueue, name: str = "w", memory: float = 80.0):
    token = q.create_registration_token()
    return q.register_worker(
        token,
        name,
        GpuReport.model_validate(
            {
                "backend": "rocm",
                "gpus": [
                    {"index": 0, "name": "MI300X", "arch": "gfx942", "memory_gib": memory, "bf16": True}
                ],
            }
        ),
    )


def test_submit_list_get_and_serving_fields(queue) -> None:
    spec = parse_spec(YAML)
    job = queue.submit(spec, YAML, owner="alice", guild="g1", memory={"total_gib": 12.5})
    assert job.state == "queued" and job.base_model == "org/base-model" and job.owner == "alice"
    assert job.memory_gib == 12.5 and job.name == "base-model-lora-r16"
    assert [j.id for j in queue.list(owner="alice")] == [job.id]
    assert queue.list(owner="bob") == [] and queue.list(guild="g1")[0].id == job.id
    assert "#1 base-model-lora-r16 [queued]" in job.line()
    assert queue.tail(job.id)[0].startswith("submitted by alice")
    assert queue.submit(spec, YAML, name="../../etc/my adapter").name == "etc-my-adapter"
    with pytest.raises(HipbotError, match="no job #99"):
        queue.get(99)


def test_claim_heartbeat_finish(queue) -> None:
    spec = parse_spec(YAML)
    job = queue.submit(spec, YAML, owner="alice")
    w, _ = worker(queue)
    claimed = queue.claim(w, lease_s=30)
    assert claimed.id == job.id and claimed.state == "assigned" and claimed.attempts == 1
    assert queue.claim(w) is None  # nothing else queued
    running = queue.heartbeat(job.id, w.id, progress=Progress(step=3, max_steps=10, loss=1.5))
    assert running.state == "running" and running.progress_step == 3 and running.progress_loss == 1.5
    done = queue.finish(job.id, "succeeded", metrics={"final_loss": 0.5}, adapter_dir="/adapters/x")
    assert done.final and done.adapter_dir == "/adapters/x" and done.metrics["final_loss"] == 0.5
    with pytest.raises(Forbidden):
        queue.heartbeat(job.id, w.id)  # a finished job is held by nobody


def test_only_the_holder_touches_a_job(queue) -> None:
    spec = parse_spec(YAML)
    job = queue.submit(spec, YAML)
    a, _ = worker(queue, "a")
    b, _ = worker(queue, "b")
    queue.claim(a)
    with pytest.raises(Forbidden, match=f"worker {b.id} does not hold job #{job.id}"):
        queue.heartbeat(job.id, b.id)


def test_fits_and_priority(queue) -> None:
    spec = parse_spec(YAML)
    big = queue.submit(spec, YAML, memory={"total_gib": 100})
    low = queue.submit(spec, YAML, priority=0)
    high = queue.submit(spec, YAML, priority=5)
    w, _ = worker(queue, memory=48)
    fits = lambda job: (job.memory_gib or 0) <= w.memory_gib  # noqa: E731
    assert queue.claim(w, fits=fits).id == high.id
    assert queue.claim(w, fits=fits).id == low.id
    assert queue.claim(w, fits=fits) is None and queue.get(big.id).state == "queued"


def test_lease_expiry_requeues_then_fails(queue) -> None:
    spec = parse_spec(YAML)
    job = queue.submit(spec, YAML, max_attempts=2)
    w, _ = worker(queue)
    queue.claim(w, lease_s=10)
    queue.update(job.id, checkpoint_step=4, checkpoint_path="/c/4.tar.gz")
    queue.clock_.now += 11
    assert queue.expire_leases() == [job.id]
    again = queue.get(job.id)
    assert again.state == "queued" and again.worker_id is None and again.checkpoint_step == 4
    assert "requeued to resume from checkpoint step 4" in queue.tail(job.id)[-1]
    queue.claim(w, lease_s=10)
    queue.clock_.now += 11
    queue.expire_leases()
    failed = queue.get(job.id)
    assert failed.state == "failed" and "worker lost 2 times" in failed.error


def test_cancel(queue) -> None:
    spec = parse_spec(YAML)
    queued = queue.submit(spec, YAML, owner="alice")
    with pytest.raises(Forbidden, match="only its owner can cancel"):
        queue.cancel(queued.id, by="mallory")
    assert queue.cancel(queued.id, by="alice").state == "cancelled"
    with pytest.raises(HipbotError, match="already cancelled"):
        queue.cancel(queued.id)
    running = queue.submit(spec, YAML)
    with pytest.raises(Forbidden, match="belongs to the operator"):
        queue.cancel(running.id, by="alice")  # a job nobody owns is the operator's to cancel
    w, _ = worker(queue)
    queue.claim(w)
    flagged = queue.cancel(running.id, by=OPERATOR)
    assert flagged.state == "assigned" and flagged.cancel_requested
    assert queue.heartbeat(running.id, w.id).cancel_requested
    queue.clock_.now += 1000  # the worker died before reporting: the lease ends it
    queue.expire_leases()
    assert queue.get(running.id).state == "cancelled"


def test_registration_tokens_are_one_time_and_secrets_hashed(queue) -> None:
    token = queue.create_registration_token()
    w, secret = queue.register_worker(token, "box", GpuReport(backend="cpu", memory_gib=16))
    with pytest.raises(Unauthorized, match="already used"):
        queue.register_worker(token, "again", GpuReport())
    with pytest.raises(Unauthorized):
        queue.register_worker("reg-guess", "x", GpuReport())
    assert queue.authenticate(w.id, secret).id == w.id
    with pytest.raises(Unauthorized):
        queue.authenticate(w.id, secret + "x")
    stored = [r[0] for r in queue.db.execute("SELECT secret_hash FROM workers").fetchall()]
    assert stored == [hash_secret(secret)] and secret not in stored
    assert token not in str(queue.db.execute("SELECT * FROM registration_tokens").fetchall())
    assert w.memory_gib == 16 and w.gpu_count == 1


def test_logs_paging(queue) -> None:
    job = queue.submit(parse_spec(YAML), YAML)
    queue.log(job.id, "w-1", "one", "two", "   ")
    rows = queue.logs(job.id)
    assert [r.line for r in rows][-2:] == ["one", "two"]
    assert queue.logs(job.id, after=rows[-2].id)[0].line == "two"


def test_client_tokens_name_their_user(queue) -> None:
    alice = queue.create_client_token("alice")
    bot = queue.create_client_token("discord-bot", trusted=True)
    assert queue.client_caller(alice) == Caller("alice", trusted=False)
    assert queue.client_caller(bot) == Caller("discord-bot", trusted=True)
    assert queue.client_caller("cli-guess") is None
    stored = str(queue.db.execute("SELECT * FROM client_tokens").fetchall())
    assert alice not in stored and hash_secret(alice) in stored
    for bad in (OPERATOR, "", "a b", "x" * 101):
        with pytest.raises(InvalidInput, match="client name"):
            queue.create_client_token(bad)


def test_out_of_range_ids_are_not_found(queue) -> None:
    for job_id in (0, -1, 2**63, 10**23):
        with pytest.raises(JobNotFound):
            queue.get(job_id)
