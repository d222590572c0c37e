"""Coordinator on loopback + two real worker processes: claim, heartbeat, cancel, a worker killed
mid-job whose job the other finishes from the uploaded checkpoint, refusals; every job ends final."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from fixtures_finetune import ALPACA, job_yaml, tiny_model_dir, write_datasets

from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
from hipbot.jobs.finetune.coordinator_client import CoordinatorClient, CoordinatorError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def coordinator(tmp_path: Path):
    cfg = CoordinatorConfig(
        database=tmp_path / "coord.db",
        data_dir=tmp_path / "coord",
        adapters_dir=tmp_path / "adapters",
        client_token="client-secret",
        # short, so a killed worker's job is requeued soon; not so short that a busy machine's
        # heartbeat (1 s, between checkpoint uploads) misses it
        lease_s=20,
    )
    app = create_app(cfg)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(timeout=10)


def start_worker(url: str, token: str, workdir: Path, name: str) -> subprocess.Popen:
    log = (workdir.parent / f"{name}.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "hipbot.cli",
        "worker",
        "--coordinator",
        url,
        "--token",
        token,
        "--cpu",
        "--name",
        name,
        "--workdir",
        str(workdir),
        "--heartbeat",
        "1",
        "--poll",
        "2",
    ]
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_workers_cancel_kill_and_resume(tmp_path: Path, coordinator) -> None:
    url, app = coordinator
    client = CoordinatorClient(url, token="client-secret")
    model = tiny_model_dir()
    data = write_datasets(tmp_path / "data")
    queue = app.state.queue
    workers: list[subprocess.Popen] = []
    try:
        # job A trains on an attached dataset; worker 1 takes it
        a_yaml = job_yaml(model, tmp_path / "nowhere", tmp_path / "a-out", max_steps=60, save_steps=4)
        job_a = client.submit(
            a_yaml, owner="alice", dataset=json.dumps(ALPACA).encode(), dataset_name="alpaca_demo.json"
        ).job
        workers.append(start_worker(url, queue.create_registration_token(), tmp_path / "w1", "w1"))
        wait_for(lambda: client.get(job_a.id).state == "running", 120, "worker 1 to run job A")
        w1_id = client.get(job_a.id).worker_id

        # worker 1 dies after uploading its first checkpoint of job A (killed at once, long before
        # step 60, whatever the machine's speed); worker 2 resumes the job from there
        wait_for(lambda: client.get(job_a.id).checkpoint_step, 120, "a checkpoint of job A")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        assert client.get(job_a.id).state == "running"
        uploaded = client.get(job_a.id).checkpoint_step
        workers.append(start_worker(url, queue.create_registration_token(), tmp_path / "w2", "w2"))
        wait_for(lambda: client.get(job_a.id).worker_id not in (None, w1_id), 60, "worker 2 to take job A")
        w2_id = client.get(job_a.id).worker_id
        saved = json.loads((tmp_path / "w1" / "credentials.json").read_text())
        stale = CoordinatorClient(url, worker_id=saved["worker_id"], secret=saved["secret"])
        with pytest.raises(CoordinatorError, match="403"):
            stale.heartbeat(job_a.id)  # the dead worker's credentials no longer reach the job

        # job B waits for worker 2, which takes it after job A, and is cancelled while it trains
        job_b = client.submit(
            job_yaml(model, data, tmp_path / "b-out", max_steps=5000, save_steps=1000), owner="bob"
        ).job
        done = wait_for(lambda: (j := client.get(job_a.id)).final and j, 180, "job A to finish")
        assert done.state == "succeeded", [row.line for row in client.logs(job_a.id)][-25:]
        assert done.attempts == 2 and done.metrics["global_step"] == 60
        assert done.metrics["resumed_from"] == f"checkpoint-{uploaded}"
        adapter = Path(done.adapter_dir)
        assert (adapter / "adapter_model.safetensors").is_file() and (adapter / "loss.png").is_file()
        assert not any(p.name.startswith("checkpoint-") for p in adapter.iterdir())
        wait_for(lambda: (client.get(job_b.id).progress_step or 0) >= 1, 120, "worker 2 to train job B")
        assert client.get(job_b.id).worker_id == w2_id
        with pytest.raises(CoordinatorError, match="only its owner can cancel"):
            client.cancel(job_b.id, by="alice")
        client.cancel(job_b.id, by="bob")
        wait_for(lambda: client.get(job_b.id).state == "cancelled", 30, "job B to stop")

        # a bad registration token is refused and the worker exits with the reason
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "hipbot.cli",
                "worker",
                "--coordinator",
                url,
                "--token",
                "reg-wrong",
                "--cpu",
                "--workdir",
                str(tmp_path / "w3"),
                "--max-jobs",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode == 1 and "registration token is unknown or already used" in bad.stderr

        # nothing lost: every job is final and has its logs
        for job in client.list():
            assert job.final, job
            lines = [row.line for row in client.logs(job.id)]
            assert lines[0].startswith("submitted by") and lines[-1].split(":")[0] in (
                "succeeded",
                "cancelled",
            )
        lines_a = [row.line for row in client.logs(job_a.id)]
        assert any("requeued to resume from checkpoint step" in line for line in lines_a)
        # the training's own output reached the job's log: a logged loss and its number
        assert any(re.search(r"\bloss\W+\d", line) for line in lines_a), lines_a[-20:]
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
