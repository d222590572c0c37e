"""Session fixtures for tests that need the SmolLM2 base model or a real vLLM CPU server.

Registered from conftest.py (``pytest_plugins = ["fixtures_vllm"]``). The server starts at most once
per test run (about 70 s and 4.5 GB on this machine) and is always stopped at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hipbot.jobs.base_models import SMOLLM2_NAME, prepare_smollm2
from hipbot.jobs.local_vllm import DEFAULT_VENV, LocalVllm, vllm_installed

from hipbot.config import REPO_ROOT

SMOLLM2_DIR = REPO_ROOT / "models" / SMOLLM2_NAME
SERVED_NAME = "smollm2"


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct as a safetensors checkpoint at ``<repo>/models/`` (converted if missing)."""
    return prepare_smollm2(SMOLLM2_DIR).path


@pytest.fixture(scope="session")
def vllm_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalVllm]:
    """One real vLLM CPU server for the whole run: ``.url``, ``.served_model_name`` ("smollm2"),
    LoRA enabled with ``--max-lora-rank 16``, runtime adapter loading allowed."""
    if not vllm_installed(DEFAULT_VENV):
        pytest.fail(f"vLLM CPU is not installed in {DEFAULT_VENV}: run `hipbot serve local install`")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = LocalVllm(model=smollm2_path, served_model_name=SERVED_NAME, log_path=log)
    with server:
        yield server
