"""The operator page in a real browser: Debian's Chromium, headless, driven by Playwright, over a
coordinator on loopback and a real CPU worker training a tiny model."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fixtures_finetune import job_yaml, tiny_model_dir, write_datasets
from playwright.sync_api import sync_playwright

from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
from hipbot.jobs.finetune.coordinator_client import CoordinatorClient
from hipbot.jobs.finetune.web.store import create_page_token

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ADMIN = "admin-secret"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("Chromium is missing: apt-get install chromium (deploy/install.sh --test installs it)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    root = tmp_path_factory.mktemp("ui")
    cfg = CoordinatorConfig(
        database=root / "coord.db",
        data_dir=root / "coord",
        adapters_dir=root / "adapters",
        client_token=ADMIN,
        lease_s=10,
    )
    app = create_app(cfg)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    # A real CPU worker, started now so that its start-up overlaps the first test.
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hipbot.cli",
            "worker",
            "--coordinator",
            url,
            "--token",
            app.state.queue.create_registration_token(),
            "--cpu",
            "--name",
            "ui-w",
            "--workdir",
            str(root / "w"),
            "--heartbeat",
            "0.5",
            "--poll",
            "2",
        ],  # fmt: skip
        stdout=(root / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HIPBOT_HOME": str(root / "home")},
    )
    yield url, app
    worker.terminate()
    worker.wait(timeout=30)
    server.should_exit = True
    thread.join(timeout=10)


def sign_in(browser: object, url: str, token: str) -> object:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{url}/ui")
    assert page.url.endswith("/ui/login")
    page.fill("input[name=token]", token)
    page.click("#signin button")
    page.wait_for_url(f"{url}/ui")
    return page


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_nothing_readable_without_a_token(browser, served) -> None:
    url, app = served
    page = browser.new_page()
    for path in ("/ui", "/ui/jobs/1"):
        page.goto(f"{url}{path}")
        assert page.url == f"{url}/ui/login", path  # redirected to the sign-in form
        assert page.locator("table").count() == 0
    page.fill("input[name=token]", "view-not-a-token")
    page.click("#signin button")
    assert page.inner_text("#signin-error") == "unknown or revoked token"
    assert page.context.cookies() and all(c["name"] != "hipbot_session" for c in page.context.cookies())
    # the live stream, the metrics and the actions refuse callers without a session
    assert httpx.get(f"{url}/ui/jobs/1/events").status_code == 401
    assert httpx.get(f"{url}/metrics").status_code == 401
    assert httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    posted = httpx.post(f"{url}/ui/tokens", data={"csrf": "x"})
    assert posted.status_code == 303 and posted.headers["location"] == "/ui/login"
    # a sign-in post without the form's own CSRF cookie is refused even with the right token
    forged = httpx.post(f"{url}/ui/login", data={"csrf": "x", "token": ADMIN})
    assert forged.status_code == 403 and "hipbot_session" not in forged.headers.get("set-cookie", "")
    page.context.close()


def test_queue_live_loss_curve_viewer_and_cancel(browser, served, tmp_path: Path) -> None:
    url, app = served
    queue = app.state.queue
    viewer_token = create_page_token(queue.db, "vera")
    client = CoordinatorClient(url, token=ADMIN)
    spec = job_yaml(tiny_model_dir(), write_datasets(tmp_path / "data"), tmp_path / "out")
    spec = spec.replace("max_steps: 8", "max_steps: 5000").replace("save_steps: 4", "save_steps: 1000")
    job = client.submit(spec + "hf_hub_token: hf_secret_value\n", owner="alice").job

    admin = sign_in(browser, url, ADMIN)
    row = admin.locator(f"#queue-table tr[data-job='{job.id}']")  # queued, or already claimed
    assert row.get_attribute("data-state") in ("queued", "assigned", "running")
    assert "alice" in row.inner_text() and tiny_model_dir().name in row.inner_text()
    # left open, the overview follows the job as the worker takes it up
    admin.evaluate("window.stillTheSamePage = true")
    wait_for(lambda: row.get_attribute("data-state") == "running", 90, "the overview to show the job running")
    assert admin.evaluate("window.stillTheSamePage") is True

    try:
        admin.goto(f"{url}/ui/jobs/{job.id}")
        assert "hf_secret_value" not in admin.content() and "<hidden>" in admin.inner_text("#job-yaml")
        admin.evaluate("window.stillTheSamePage = true")
        chart = admin.locator("#loss-chart")
        points = lambda: int(chart.get_attribute("data-points"))  # noqa: E731
        first = wait_for(lambda: points() >= 2 and points(), 60, "the first points of the loss curve")
        wait_for(lambda: points() > first, 30, "the loss curve to grow")
        assert admin.evaluate("window.stillTheSamePage") is True  # grown without a reload
        assert admin.inner_text("#job-state") == "running"
        assert admin.locator("#loss-chart canvas").count() == 1  # uPlot drew it
        assert re.search(r"\d+\.\d{4}", admin.inner_text("#job-loss"))

        # the overview shows the worker and its current job
        overview = admin.context.new_page()
        overview.goto(f"{url}/ui")
        worker_row = overview.locator("#workers-table tr", has_text="ui-w")
        assert f"#{job.id}" in worker_row.inner_text()
        overview.close()

        # a viewer sees the job but no cancel button, and a forged cancel is refused
        viewer = sign_in(browser, url, viewer_token)
        assert viewer.inner_text("#signed-in-as") == "vera (viewer)"
        viewer.goto(f"{url}/ui/jobs/{job.id}")
        assert viewer.locator("#cancel-job").count() == 0
        csrf = viewer.locator("input[name=csrf]").first.get_attribute("value")
        refused = viewer.request.post(f"{url}/ui/jobs/{job.id}/cancel", form={"csrf": csrf}, max_redirects=0)
        assert refused.status == 403 and "read-only" in refused.text()
        assert client.get(job.id).state == "running" and not client.get(job.id).cancel_requested
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {viewer_token}"}).text
        assert 'hipbot_jobs{state="running"} 1.0' in metrics and "hipbot_workers_online 1.0" in metrics
        assert re.search(r"hipbot_step_seconds_count [1-9]", metrics)
        viewer.context.close()

        # the admin cancels from the page; the worker stops and the page says so without a reload
        admin.once("dialog", lambda dialog: dialog.accept())
        admin.click("#cancel-job button")
        wait_for(lambda: admin.inner_text("#job-state") == "cancelled", 30, "the page to show the cancel")
        assert client.get(job.id).state == "cancelled"
        admin.goto(f"{url}/ui")
        audit = admin.inner_text("#audit-table")
        assert "operator" in audit and "cancel job" in audit and f"job #{job.id}" in audit
        assert any("cancelled from the operator page by operator" in r.line for r in client.logs(job.id))
    finally:
        admin.context.close()
