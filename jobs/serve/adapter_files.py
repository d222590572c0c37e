"""An adapter folder from a volunteer's worker, inspected without being executed: only
``adapter_model.safetensors`` is accepted (its JSON header is read directly; nothing is ever
unpickled), and what vLLM would refuse is found here first."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipbot.errors import HipbotError
from hipbot.i18n import N_, Joined

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)
PICKLED_WEIGHTS = (
    "adapter_model.bin",
    "adapter_model.pt",
    "adapter_model.pth",
    "adapter_model.pkl",
    "adapter_model.ckpt",
)
# vLLM serves LoRA on linear layers only; these would need full-weight replacement.
NON_LORA_MODULES = ("lm_head", "embed_tokens", "wte", "word_embeddings", "embed_in", "embed_out")
MAX_HEADER = 64 * 1024 * 1024
SAFETENSORS_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
                      "F8_E4M3", "F8_E5M2"}  # fmt: skip


class AdapterRejected(HipbotError):
    """The adapter cannot be served (as it is, or on that server); ``problems`` lists every reason."""

    def __init__(self, subject: str, problems: list[str], hint: str | None = None) -> None:
        super().__init__(
            N_("{subject}: {problems}", subject=subject, problems=Joined("; ", problems)), hint=hint
        )
        self.problems = problems


@dataclass(frozen=True)
class AdapterInfo:
    """What the files say about an adapter, read without executing anything."""

    rank: int
    alpha: float | None
    target_modules: tuple[str, ...]
    base_model: str | None
    size_bytes: int
    sha256: str
    tensors: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """The tensor table of a safetensors file (8-byte length, JSON header), validated against the
    file size; raises ``ValueError`` for anything that is not a well-formed safetensors file."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
            raise ValueError("it is a pickle / torch archive renamed to .safetensors")
        if len(head) < 8:
            raise ValueError("file too short")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER, size - 8):
            raise ValueError("header length is out of range")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    header.pop("__metadata__", None)
    data_size = size - 8 - length
    for name, entry in header.items():
        if not isinstance(entry, dict) or entry.get("dtype") not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r} has no valid dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError(f"tensor {name!r} has an invalid shape")
        if not (
            isinstance(offsets, list) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1] <= data_size
        ):
            raise ValueError(f"tensor {name!r} points outside the file")
    return header


def _module_of(tensor: str) -> str:
    """``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` -> ``q_proj``."""
    parts = tensor.split(".")
    if len(parts) >= 3 and parts[-2] in ("lora_A", "lora_B") and parts[-1] == "weight":
        return parts[-3]
    return ""


def inspect_adapter(path: Path) -> AdapterInfo:
    """Check a PEFT LoRA adapter folder the way vLLM will, without loading any code or pickle."""
    subject = N_("adapter at {path}", path=path)
    if not path.is_dir():
        raise AdapterRejected(subject, [N_("not a directory")])
    weights = path / WEIGHTS_FILE
    pickled = [name for name in PICKLED_WEIGHTS if (path / name).exists()]
    if not weights.is_file():
        if pickled:
            raise AdapterRejected(
                subject,
                [
                    N_(
                        "{pickled} is a pickle: only safetensors weights are accepted (loading a pickle "
                        "runs code)",
                        pickled=pickled[0],
                    )
                ],
                hint=N_("save with safe_serialization=True (peft's default): adapter_model.safetensors"),
            )
        raise AdapterRejected(
            subject,
            [N_("no {WEIGHTS_FILE}", WEIGHTS_FILE=WEIGHTS_FILE)],
            hint=N_("point at the folder peft's save_pretrained wrote"),
        )
    if pickled:
        raise AdapterRejected(
            subject,
            [
                N_(
                    "{pickled} (a pickle) sits beside {WEIGHTS_FILE}: refusing an ambiguous adapter",
                    pickled=pickled[0],
                    WEIGHTS_FILE=WEIGHTS_FILE,
                )
            ],
            hint=N_("delete {pickled}", pickled=pickled[0]),
        )
    config_path = path / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterRejected(subject, [N_("no {CONFIG_FILE}", CONFIG_FILE=CONFIG_FILE)]) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterRejected(
            subject, [N_("{CONFIG_FILE} is not valid JSON ({exc})", CONFIG_FILE=CONFIG_FILE, exc=exc)]
        ) from exc
    if not isinstance(config, dict):
        raise AdapterRejected(subject, [N_("{CONFIG_FILE} is not a JSON object", CONFIG_FILE=CONFIG_FILE)])
    try:
        header = read_safetensors_header(weights)
    except (OSError, ValueError) as exc:
        raise AdapterRejected(
            subject,
            [N_("{WEIGHTS_FILE} is not a valid safetensors file: {exc}", WEIGHTS_FILE=WEIGHTS_FILE, exc=exc)],
        ) from exc

    problems: list[str] = []
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        problems.append(N_("peft_type is {peft_type}: vLLM serves LoRA adapters only", peft_type=peft_type))
    rank = config.get("r")
    if not isinstance(rank, int) or rank <= 0:
        problems.append(
            N_(
                "'r' in {CONFIG_FILE} must be a positive integer, got {rank!r}",
                CONFIG_FILE=CONFIG_FILE,
                rank=rank,
            )
        )
        rank = 0
    patterns = config.get("rank_pattern") or {}
    ranks = [rank, *(v for v in patterns.values() if isinstance(v, int))]
    targets = config.get("target_modules") or []
    target_list = [targets] if isinstance(targets, str) else [str(t) for t in targets]
    if not target_list:
        problems.append(N_("{CONFIG_FILE} lists no target_modules", CONFIG_FILE=CONFIG_FILE))
    if config.get("modules_to_save"):
        problems.append(
            N_(
                "modules_to_save={modules_to_save} trains full layers, which vLLM cannot serve as LoRA",
                modules_to_save=config["modules_to_save"],
            )
        )
    bad_targets = [t for t in target_list if t.split(".")[-1] in NON_LORA_MODULES]
    if bad_targets:
        problems.append(
            N_(
                "target_modules {bad_targets} are embedding/output layers, which vLLM cannot serve as LoRA",
                bad_targets=bad_targets,
            )
        )
    if config.get("use_dora"):
        problems.append(N_("DoRA adapters (use_dora) are not supported by vLLM"))
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        problems.append(N_("adapters with trained biases are not supported by vLLM"))
    outside = sorted(
        name
        for name in header
        if not _module_of(name) or any(part in NON_LORA_MODULES for part in name.split("."))
    )
    if outside:
        shown = ", ".join(outside[:3])
        if len(outside) > 3:
            shown = N_("{names} and {count} more", names=shown, count=len(outside) - 3)
        problems.append(N_("weights outside the LoRA layers: {shown}", shown=shown))
    if not header:
        problems.append(N_("{WEIGHTS_FILE} holds no tensors", WEIGHTS_FILE=WEIGHTS_FILE))
    for name, entry in header.items():
        if name.endswith("lora_A.weight") and len(entry["shape"]) == 2:
            ranks.append(entry["shape"][0])
    if problems:
        raise AdapterRejected(subject, problems)
    alpha = config.get("lora_alpha")
    modules = sorted({m for m in (_module_of(n) for n in header) if m} or set(target_list))
    base = config.get("base_model_name_or_path")
    return AdapterInfo(
        rank=max(ranks),
        alpha=float(alpha) if isinstance(alpha, int | float) else None,
        target_modules=tuple(modules),
        base_model=str(base) if base else None,
        size_bytes=sum((path / f).stat().st_size for f in ADAPTER_FILES),
        sha256=sha256_file(weights),
        tensors=len(header),
    )
