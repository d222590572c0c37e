"""Shared fixtures. Each feature's own fixtures live in its test modules or in tests/fixtures_*.py."""

from __future__ import annotations

import functools
import os
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
    # English unless a test asks for another language, whatever the machine's locale is
    monkeypatch.setenv("HIPBOT_LANG", "en")
    return home


@pytest.fixture(scope="session")
def docs_root() -> Path:
    """The HIP docs corpus (../shared/hip-docs); the tests that read it need it present."""
    root = find_docs_corpus()
    if root is None:
        pytest.fail("the docs corpus ../shared/hip-docs is missing; CI lays it beside the checkout")
    return root


@functools.cache
def _compile_check_missing() -> str | None:
    """Why the real compile check cannot run here (hipcc or its bubblewrap sandbox missing), or None."""
    from hipbot.agents.hipify.sandbox import SandboxUnavailable, find_hipcc, require_sandbox

    hipcc = find_hipcc()
    if hipcc is None or not os.access(hipcc, os.X_OK):
        return "hipcc is not installed (sudo apt-get install hipcc libamdhip64-dev)"
    try:
        require_sandbox()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


_HIPCC_NOT_RUN: list[str] = []


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.hipcc`` tests run the real compiler in its sandbox, wherever hipcc and bwrap
    are installed (root or not). Without them they fail under CI, where ``deploy/install.sh
    --test`` must have installed both; elsewhere they are skipped, and the run says so loudly: a
    warning per test and a red section at the end of the summary."""
    if not item.get_closest_marker("hipcc"):
        return
    missing = _compile_check_missing()
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the compile checks (deploy/install.sh --test): {missing}")
    _HIPCC_NOT_RUN.append(item.nodeid)
    item.warn(pytest.PytestWarning(f"hipcc test NOT RUN: {missing}"))
    pytest.skip(f"NOT RUN: {missing}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _HIPCC_NOT_RUN:
        terminalreporter.write_sep("!", f"{len(_HIPCC_NOT_RUN)} hipcc tests NOT RUN", red=True, bold=True)
        terminalreporter.write_line(f"reason: {_compile_check_missing()}", red=True)
        for nodeid in _HIPCC_NOT_RUN:
            terminalreporter.write_line(f"  {nodeid}", red=True)
