"""The operator page's actions and guards over HTTP (no browser): CSRF, roles, revocation of page
tokens and workers, minted registration tokens, the audit log, masked YAML, /metrics."""

from __future__ import annotations

import hashlib
import html
import io
import re
import tarfile
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
from hipbot.jobs.finetune.models import GpuReport, Progress
from hipbot.jobs.finetune.spec import parse_spec
from hipbot.jobs.finetune.web import store
from hipbot.jobs.finetune.web.views import masked_yaml
from hipbot.jobs.serve.registry import Adapter, Registry, Server

ADMIN = "admin-secret"
SPEC = """model_name_or_path: HuggingFaceTB/SmolLM2-135M-Instruct
stage: sft
finetuning_type: lora
lora_rank: 8
lora_target: all
dataset: alpaca_demo
dataset_dir: data
template: chatml
output_dir: out
max_steps: 100
"""


@pytest.fixture()
def app(tmp_path: Path):
    cfg = CoordinatorConfig(
        database=tmp_path / "c.db", data_dir=tmp_path / "c", adapters_dir=tmp_path / "a", client_token=ADMIN
    )
    return create_app(cfg)


def signed_in(app, token: str) -> tuple[TestClient, str]:
    http = TestClient(app, follow_redirects=False)
    form = http.get("/ui/login")
    nonce = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    reply = http.post("/ui/login", data={"csrf": nonce, "token": token})
    assert reply.status_code == 303, reply.text
    page = http.get("/ui")
    assert page.status_code == 200
    return http, re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)


def test_actions_need_admin_and_csrf_and_are_audited(app) -> None:
    queue = app.state.queue
    job = queue.submit(parse_spec(SPEC), SPEC, owner="alice")
    admin, csrf = signed_in(app, ADMIN)
    viewer, viewer_csrf = signed_in(app, store.create_page_token(queue.db, "vera"))

    assert admin.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": "forged"}).status_code == 403
    assert admin.post(f"/ui/jobs/{job.id}/cancel").status_code == 422  # no CSRF field at all
    refused = viewer.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": viewer_csrf})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert queue.get(job.id).state == "queued"

    done = admin.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf})
    assert done.status_code == 303 and queue.get(job.id).state == "cancelled"
    again = admin.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf})
    assert again.status_code == 400 and "already cancelled" in again.text

    # mint: a registration token shown once that a worker can use
    minted = admin.post("/ui/tokens", data={"csrf": csrf})
    token = re.search(r"--token (reg-[\w-]+)", minted.text).group(1)
    worker, secret = queue.register_worker(token, "w1", GpuReport(backend="cpu", memory_gib=8))
    assert queue.authenticate(worker.id, secret).id == worker.id
    page = admin.get("/ui").text
    assert worker.id in page and secret not in page and token not in page

    # revoke: the worker's secret is refused from then on
    assert admin.post(f"/ui/workers/{worker.id}/revoke", data={"csrf": csrf}).status_code == 303
    with pytest.raises(Exception, match="unknown worker or wrong secret"):
        queue.authenticate(worker.id, secret)
    assert admin.post(f"/ui/workers/{worker.id}/revoke", data={"csrf": csrf}).status_code == 400

    # publish of an adapter the registry does not know: refused, and the refusal is audited too
    missing = admin.post("/ui/adapters/nope/publish", data={"csrf": csrf})
    assert missing.status_code == 400 and "no adapter named 'nope'" in html.unescape(missing.text)

    log = store.audit_log(queue.db)
    assert [(e["actor"], e["action"], e["target"]) for e in reversed(log)] == [
        ("operator", "cancel job", f"job #{job.id}"),
        ("operator", "cancel job", f"job #{job.id}"),
        ("operator", "mint registration token", "worker registration"),
        ("operator", "revoke worker", worker.id),
        ("operator", "revoke worker", worker.id),
        ("operator", "publish adapter", "nope"),
    ]
    assert "refused" in log[0]["detail"] and "refused" not in log[3]["detail"]
    assert [e["action"] for e in log if "refused" in e["detail"]] == [
        "publish adapter",
        "revoke worker",
        "cancel job",
    ]


def test_sessions_end_with_their_token(app) -> None:
    queue = app.state.queue
    token = store.create_page_token(queue.db, "ops", role="admin")
    http, csrf = signed_in(app, token)
    assert "ops (admin)" in http.get("/ui").text
    queue.db.execute("UPDATE page_tokens SET revoked = 1")
    assert http.get("/ui").headers["location"] == "/ui/login"
    # sign-out forgets the session even while the token stays valid
    http2, csrf2 = signed_in(app, ADMIN)
    assert http2.post("/ui/logout", data={"csrf": csrf2}).status_code == 303
    assert http2.get("/ui").status_code == 303
    cookies = http2.cookies
    assert "hipbot_session" not in cookies


def test_job_page_masks_secrets_and_metrics_count(app) -> None:
    queue = app.state.queue
    text = SPEC + "hf_hub_token: hf_abcdef\nmodel_api_key: 'sk-1'\n"
    job = queue.submit(parse_spec(SPEC), text, owner="alice")
    worker, secret = queue.register_worker(
        queue.create_registration_token(), "w", GpuReport(backend="cpu", memory_gib=8)
    )
    queue.claim(worker)
    for step, at in ((1, 100.0), (2, 102.0), (4, 103.0)):
        queue.heartbeat(
            job.id, worker.id, progress=Progress(step=step, max_steps=100, loss=2.0 / step, time=at)
        )
    assert store.progress_points(queue.db, job.id) == [[1, 2.0, 100.0], [2, 1.0, 102.0], [4, 0.5, 103.0]]

    http, _ = signed_in(app, ADMIN)
    assert http.get("/ui/jobs/999").status_code == 404 and http.get("/ui/jobs/999/events").status_code == 404
    page = http.get(f"/ui/jobs/{job.id}").text
    assert "hf_abcdef" not in page and "sk-1" not in page and page.count("&lt;hidden&gt;") == 2
    assert masked_yaml("lora_rank: 8\nhub_token: x") == "lora_rank: 8\nhub_token: <hidden>"

    # an adapter upload's bytes are counted as they stream in
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
    body = buf.getvalue()
    upload = TestClient(app).put(
        f"/jobs/{job.id}/artifacts/adapter",
        content=body,
        headers={
            "Authorization": f"Bearer {worker.id}:{secret}",
            "X-Content-SHA256": hashlib.sha256(body).hexdigest(),
        },
    )
    assert upload.status_code == 200, upload.text

    viewer = store.create_page_token(queue.db, "prom")
    metrics = TestClient(app).get("/metrics", headers={"Authorization": f"Bearer {viewer}"}).text
    assert 'hipbot_jobs{state="running"} 1.0' in metrics and 'hipbot_jobs{state="queued"} 0.0' in metrics
    assert "hipbot_workers_online 1.0" in metrics
    # steps 1->2 took 2 s, 2->4 took 1 s over two steps: 0.5 s each
    assert "hipbot_step_seconds_count 2.0" in metrics and "hipbot_step_seconds_sum 2.5" in metrics
    assert f'hipbot_upload_bytes_total{{kind="adapter"}} {float(len(body))}' in metrics


def test_adapters_show_their_servers_and_unpublish(app, tmp_path: Path) -> None:
    registry = Registry(app.state.queue.db)
    server = Server(
        "gpu1", "http://127.0.0.1:9", tmp_path / "vol", "/adapters", 64, "base", "base", api_key="k-9"
    )
    registry.add_server(server)
    adapter = Adapter(
        "hip-smol", "base", "7", 8, 16.0, ("q_proj",), 10, "0" * 64, tmp_path / "hip-smol", "alice", "", None
    )
    registry.add(adapter)
    registry.mark_loaded("hip-smol", "gpu1", "/adapters/hip-smol", copied=False)
    http, csrf = signed_in(app, ADMIN)
    row = re.search(r'<tr data-adapter="hip-smol">.*?</tr>', http.get("/ui").text, re.S).group(0)
    assert "gpu1" in row and "/ui/jobs/7" in row and "k-9" not in http.get("/ui").text

    # the server is down: unpublishing forgets the deployment and says why
    done = http.post("/ui/adapters/hip-smol/unpublish", data={"csrf": csrf})
    assert done.status_code == 200 and "gpu1: forgotten (server not reachable" in html.unescape(done.text)
    assert registry.get("hip-smol").servers == ()
    assert store.audit_log(app.state.queue.db)[0]["action"] == "unpublish adapter"


@pytest.mark.slow
@pytest.mark.vllm
def test_publish_and_unpublish_from_the_page_on_real_vllm(
    vllm_server, lora_rank8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin's buttons load the adapter into a real vLLM server and take it out again, each
    audited; the page shows where the adapter is live."""
    from hipbot.cli import main
    from hipbot.config import load_settings

    monkeypatch.setenv("HIPBOT_COORDINATOR_TOKEN", ADMIN)
    settings = load_settings()
    app = create_app(CoordinatorConfig.from_settings(settings))  # what `hipbot start` serves
    volume = tmp_path / "vllm-volume"
    assert main(["serve", "servers", "add", "cpu", vllm_server.url, "--adapter-dir", str(volume)]) == 0
    assert main(["serve", "register", "page-r8", "--path", str(lora_rank8)]) == 0
    http, csrf = signed_in(app, settings.coordinator_token)

    done = http.post("/ui/adapters/page-r8/publish", data={"csrf": csrf})
    assert done.status_code == 200 and "cpu: loaded" in html.unescape(done.text)
    models = httpx.get(f"{vllm_server.url}/v1/models", timeout=10).json()["data"]
    assert {m["id"]: m["root"] for m in models}.get("page-r8") == str(volume.resolve() / "page-r8")
    row = re.search(r'<tr data-adapter="page-r8">.*?</tr>', http.get("/ui").text, re.S).group(0)
    assert "cpu" in row

    done = http.post("/ui/adapters/page-r8/unpublish", data={"csrf": csrf})
    assert done.status_code == 200 and "cpu: unloaded" in html.unescape(done.text)
    models = httpx.get(f"{vllm_server.url}/v1/models", timeout=10).json()["data"]
    assert "page-r8" not in {m["id"] for m in models}
    actions = [(e["action"], e["target"]) for e in store.audit_log(app.state.queue.db)]
    assert actions[:2] == [("unpublish adapter", "page-r8"), ("publish adapter", "page-r8")]
