"""`hipbot start` serves the coordinator and its operator page beside the bot, on the app's database."""

from __future__ import annotations

import socket

import httpx
import pytest

from hipbot.config import load_settings
from hipbot.errors import HipbotError
from hipbot.jobs.finetune.backends import LocalJobs
from hipbot.jobs.finetune.coordinator import serve_in_background


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_serves_the_page_over_the_apps_own_queue() -> None:
    settings = load_settings()
    port = _free_port()
    url = serve_in_background(settings, port=port)
    assert url == f"http://127.0.0.1:{port}/ui"
    page = httpx.get(url, follow_redirects=False)
    assert (page.status_code, page.headers["location"]) == (303, "/ui/login")  # nothing without a token
    # the coordinator's queue is the one the bot and CLI submit to locally
    submitted = LocalJobs(settings).submit("model_name_or_path: org/m\ndataset: d\n", owner="alice")
    listed = httpx.get(f"http://127.0.0.1:{port}/jobs")  # loopback, no coordinator token set
    assert listed.status_code == 200, listed.text
    assert [j["id"] for j in listed.json()] == [submitted.job.id]
    with pytest.raises(HipbotError, match=f"could not listen on 127.0.0.1:{port}"):
        serve_in_background(settings, port=port)
