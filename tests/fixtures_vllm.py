"""Session fixtures for tests that need the SmolLM2 base model or a real vLLM CPU server.

Registered from conftest.py (``pytest_plugins = ["fixtures_vllm"]``). The server starts at most once
per test run (about 70 s and 4.5 GB on this machine) and is always stopped at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hipbot.config import REPO_ROOT
from hipbot.jobs.serve.base_models import SMOLLM2_NAME, prepare_smollm2
from hipbot.jobs.serve.local_vllm import DEFAULT_VENV, LocalVllm, vllm_installed

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


def build_lora(
    base: Path,
    dest: Path,
    *,
    rank: int = 8,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    modules_to_save: list[str] | None = None,
    safe: bool = True,
) -> Path:
    """A real (untrained) PEFT LoRA adapter on ``base``, the way a worker saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(targets),
        modules_to_save=modules_to_save,
        task_type="CAUSAL_LM",
    )
    get_peft_model(model, config).save_pretrained(dest, safe_serialization=safe)
    return dest


@pytest.fixture(scope="session")
def lora_rank8(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rank-8 q_proj/v_proj adapter on SmolLM2, built once per run."""
    return build_lora(smollm2_path, tmp_path_factory.mktemp("lora") / "r8")


@pytest.fixture(scope="session")
def lora_rank32(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rank-32 adapter: above vLLM's default --max-lora-rank 16."""
    return build_lora(smollm2_path, tmp_path_factory.mktemp("lora") / "r32", rank=32)
