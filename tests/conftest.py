"""Shared fixtures. Each feature's own fixtures live in its test modules or in tests/fixtures_*.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hipbot.config import find_docs_corpus

pytest_plugins = ["fixtures_vllm", "fixtures_docs"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HIPBOT_HOME, so no test touches a user's database."""
    home = tmp_path / "hipbot-home"
    monkeypatch.setenv("HIPBOT_HOME", str(home))
    for var in (
        "HIPBOT_DB",
        "HIPBOT_CONFIG",
        "HIPBOT_LLM_URL",
        "HIPBOT_LLM_MODEL",
        "DISCORD_TOKEN",
        "HIPBOT_DISCORD_TOKEN",
        "HIPBOT_COORDINATOR_URL",
        "HIPBOT_COORDINATOR_TOKEN",
    ):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture(scope="session")
def docs_root() -> Path:
    """The HIP docs corpus (../shared/hip-docs); the tests that read it need it present."""
    root = find_docs_corpus()
    if root is None:
        pytest.fail("the docs corpus ../shared/hip-docs is missing; CI lays it beside the checkout")
    return root


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.hipcc`` tests run the real compiler. Without hipcc they are skipped on a
    developer's machine, but fail under CI, where ``deploy/install.sh --test`` must have installed it."""
    if item.get_closest_marker("hipcc") and shutil.which("hipcc") is None:
        if os.environ.get("CI"):
            pytest.fail(
                "hipcc is not installed, but CI must run the compile checks (deploy/install.sh --test)"
            )
        pytest.skip("hipcc is not installed (sudo apt-get install hipcc libamdhip64-dev)")
