"""The coordinator's HTTP API in process (FastAPI's TestClient over the real app and SQLite)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app

YAML = "model_name_or_path: org/m\ndataset: mine\nlora_rank: 8\nmax_steps: 5\n"
DATA = b'[{"instruction": "say hi", "output": "hi"}]'
GPUS = {
    "backend": "rocm",
    "runtime": "6.2",
    "torch": "2.5",
    "gpus": [{"index": 0, "name": "MI300X", "arch": "gfx942", "memory_gib": 192.0, "bf16": True}],
}


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def env(tmp_path: Path):
    clock = Clock()
    cfg = CoordinatorConfig(
        database=tmp_path / "db.sqlite",
        data_dir=tmp_path / "coord",
        adapters_dir=tmp_path / "adapters",
        client_token="client-secret",
        registration_token="reg-first",
        lease_s=30,
        max_artifact_bytes=200_000,
        max_attachment_bytes=10_000,
    )
    app = create_app(cfg, clock=clock)
    http = TestClient(app)
    http.headers["Authorization"] = "Bearer client-secret"
    return http, app, clock


def register(http: TestClient, app, name: str = "w") -> dict[str, str]:
    token = app.state.queue.create_registration_token()
    reply = http.post("/workers/register", json={"token": token, "name": name, "gpus": GPUS})
    assert reply.status_code == 200
    creds = reply.json()
    return {"Authorization": f"Bearer {creds['worker_id']}:{creds['secret']}"}


def submit(http: TestClient, **form) -> dict:
    reply = http.post(
        "/jobs", data={"config": YAML, "owner": "alice", **form}, files={"dataset": ("mine.json", DATA)}
    )
    assert reply.status_code == 201, reply.text
    return reply.json()


def tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put(http, headers, job_id, kind, body: bytes, step=None, digest=None):
    h = {**headers, "X-Content-SHA256": digest or hashlib.sha256(body).hexdigest()}
    return http.put(
        f"/jobs/{job_id}/artifacts/{kind}",
        params={"step": step} if step is not None else None,
        content=body,
        headers=h,
    )


def test_client_token_required(env) -> None:
    http, _, _ = env
    assert http.get("/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert http.get("/jobs").status_code == 200


def test_submit_validates_and_warns(env) -> None:
    http, _, _ = env
    bad = http.post("/jobs", data={"config": YAML + "lora_rank: 1024\nbf16: true\nfp16: true\n"})
    assert bad.status_code == 422 and "lora_rank 1024 cannot be served by vLLM" in bad.json()["detail"]
    big = http.post("/jobs", data={"config": YAML}, files={"dataset": ("mine.json", b"x" * 20_000)})
    assert big.status_code == 413 and "larger than" in big.json()["detail"]
    reply = submit(http)
    assert reply["job"]["state"] == "queued" and reply["job"]["attachment_name"] == "mine.json"
    assert "attachment_path" not in reply["job"]
    check = http.post("/validate", data={"config": "model_name_or_path: m\nlora_rnak: 8\ndataset: d\n"})
    assert check.json() == {
        "ok": False,
        "error": "job config has 1 problem:\n  - unknown key 'lora_rnak'; did you mean 'lora_rank'?\n"
        "  hint: keys follow LLaMA-Factory's train YAML; see `hipbot finetune validate --help`",
    }


def test_memory_precheck_message(env, tmp_path) -> None:
    http, app, _ = env
    model = tmp_path / "big-model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 8192,
                "num_hidden_layers": 80,
                "intermediate_size": 28672,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
            }
        )
    )
    register(http, app)
    reply = http.post(
        "/jobs",
        data={
            "config": f"model_name_or_path: {model}\ndataset: d\nper_device_train_batch_size: 8\ncutoff_len: 4096\ngradient_checkpointing: false\n"
        },
    )
    warning = reply.json()["warning"]
    assert warning.startswith("needs ~") and "the largest worker has 192 GiB" in warning
    assert "try deepspeed: z3_offload / gradient_checkpointing: true / a smaller batch" in warning
    job = reply.json()["job"]
    assert job["memory_gib"] > 192 and job["memory"]["params"] > 60e9
    headers = register(http, app, "second")
    assert (
        http.post("/workers/claim", json={"wait_s": 0}, headers=headers).status_code == 204
    )  # it fits no one


def test_worker_flow_and_refusals(env) -> None:
    http, app, clock = env
    job = submit(http)["job"]
    assert (
        http.post("/workers/register", json={"token": "reg-first", "name": "a", "gpus": GPUS}).status_code
        == 200
    )
    assert (
        http.post("/workers/register", json={"token": "reg-first", "name": "b", "gpus": GPUS}).status_code
        == 401
    )
    a = register(http, app, "a")
    b = register(http, app, "b")
    assert (
        http.post("/workers/claim", json={}, headers={"Authorization": "Bearer w-x:nope"}).status_code == 401
    )
    assert http.post("/workers/claim", json={}).status_code == 401  # client token is not a worker credential
    claimed = http.post("/workers/claim", json={"wait_s": 1}, headers=a).json()["job"]
    assert claimed["id"] == job["id"] and claimed["spec_yaml"] == YAML
    assert http.get(f"/jobs/{job['id']}/dataset", headers=a).content == DATA
    for path in ("dataset", "checkpoint"):
        assert http.get(f"/jobs/{job['id']}/{path}", headers=b).status_code == 403
    assert http.post(f"/jobs/{job['id']}/heartbeat", json={}, headers=b).status_code == 403
    assert put(http, b, job["id"], "checkpoint", tar_bytes({"x": b"1"}), step=1).status_code == 403
    beat = http.post(
        f"/jobs/{job['id']}/heartbeat",
        json={"progress": {"step": 2, "max_steps": 5, "loss": 2.0}, "logs": ["step 2"]},
        headers=a,
    )
    assert beat.json()["cancel"] is False
    assert http.get(f"/jobs/{job['id']}").json()["state"] == "running"

    # uploads: size limit, checksum, malformed archives, unsafe paths, missing adapter files
    assert put(http, a, job["id"], "checkpoint", b"x" * 300_000, step=2).status_code == 413
    assert (
        put(http, a, job["id"], "checkpoint", tar_bytes({"a": b"1"}), step=2, digest="0" * 64).status_code
        == 400
    )
    bad = put(http, a, job["id"], "checkpoint", b"not a tarball", step=2)
    assert bad.status_code == 400 and "malformed artifact" in bad.json()["detail"]
    evil = put(http, a, job["id"], "checkpoint", tar_bytes({"../../etc/x": b"1"}), step=2)
    assert evil.status_code == 400 and "unsafe archive member" in evil.json()["detail"]
    assert (
        put(http, a, job["id"], "checkpoint", tar_bytes({"trainer_state.json": b"{}"}), step=2).json()["step"]
        == 2
    )
    assert http.get(f"/jobs/{job['id']}/checkpoint", headers=a).headers["x-checkpoint-step"] == "2"
    nope = put(http, a, job["id"], "adapter", tar_bytes({"README.md": b"hi"}))
    assert (
        nope.status_code == 400
        and "lacks adapter_model.safetensors, adapter_config.json" in nope.json()["detail"]
    )
    assert http.post(f"/jobs/{job['id']}/result", json={"state": "succeeded"}, headers=a).status_code == 409
    good = put(
        http,
        a,
        job["id"],
        "adapter",
        tar_bytes({"adapter_model.safetensors": b"w", "adapter_config.json": b"{}"}),
    )
    adapter_dir = Path(good.json()["adapter_dir"])
    assert (adapter_dir / "adapter_config.json").read_bytes() == b"{}"
    done = http.post(
        f"/jobs/{job['id']}/result", json={"state": "succeeded", "metrics": {"final_loss": 0.1}}, headers=a
    ).json()
    assert (
        done["state"] == "succeeded"
        and done["adapter_dir"] == str(adapter_dir)
        and done["base_model"] == "org/m"
    )
    lines = [r["line"] for r in http.get(f"/jobs/{job['id']}/logs").json()]
    assert "step 2" in lines and lines[-1] == "succeeded"


def test_cancel_reaches_worker_and_lease_expiry(env) -> None:
    http, app, clock = env
    first = submit(http)["job"]
    second = submit(http)["job"]
    a = register(http, app, "a")
    assert http.post("/workers/claim", json={}, headers=a).json()["job"]["id"] == first["id"]
    assert http.post(f"/jobs/{first['id']}/cancel", json={"by": "mallory"}).status_code == 403
    assert http.post(f"/jobs/{first['id']}/cancel", json={"by": "alice"}).json()["cancel_requested"]
    assert http.post(f"/jobs/{first['id']}/heartbeat", json={}, headers=a).json()["cancel"] is True
    assert (
        http.post(f"/jobs/{first['id']}/result", json={"state": "cancelled"}, headers=a).json()["state"]
        == "cancelled"
    )
    claimed = http.post("/workers/claim", json={}, headers=a).json()["job"]
    assert claimed["id"] == second["id"]
    clock.now += 31  # the worker vanished: its lease runs out and the job goes back in the queue
    b = register(http, app, "b")
    again = http.post("/workers/claim", json={}, headers=b).json()["job"]
    assert again["id"] == second["id"] and again["attempts"] == 2
    assert http.post(f"/jobs/{second['id']}/heartbeat", json={}, headers=a).status_code == 403


def test_failed_attempt_can_be_given_back(env) -> None:
    http, app, _ = env
    job = submit(http)["job"]
    a = register(http, app, "a")
    http.post("/workers/claim", json={}, headers=a)
    back = http.post(
        f"/jobs/{job['id']}/result",
        json={"state": "failed", "error": "no bf16 here", "retry": True},
        headers=a,
    ).json()
    assert back["state"] == "queued" and back["error"] == "no bf16 here"
    http.post("/workers/claim", json={}, headers=a)
    final = http.post(
        f"/jobs/{job['id']}/result", json={"state": "failed", "error": "boom"}, headers=a
    ).json()
    assert final["state"] == "failed" and final["error"] == "boom"


def test_openapi_schema(env) -> None:
    http, _, _ = env
    schema = http.get("/openapi.json").json()
    for path in (
        "/jobs",
        "/workers/register",
        "/workers/claim",
        "/jobs/{job_id}/heartbeat",
        "/jobs/{job_id}/artifacts/{kind}",
        "/jobs/{job_id}/result",
    ):
        assert path in schema["paths"]
