"""The checkpoint format that crosses machines: safetensors and JSON only, optimizer state included.

The Trainer saves its optimizer, scheduler, RNG and scaler states as pickles (``optimizer.pt``,
``rng_state.pth``...). A worker never sends those: ``export_checkpoint`` rewrites each one as
``NAME.state.json`` (the structure: dicts, lists, tuples, numbers, strings, tagged tensors) plus
``NAME.tensors.safetensors`` (the tensors), keeps the checkpoint's own ``.json``/``.safetensors``
files, and drops the rest (``training_args.bin``, READMEs, tokenizer copies: resuming needs none).
The coordinator checks every member on upload (``check_member``: only these two suffixes, JSON that
parses into the tagged structure, safetensors headers that add up) and refuses anything else. The
next worker rebuilds the Trainer's files from the checked data (``import_checkpoint``): the bytes it
received are never unpickled.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hipbot.jobs.finetune.archive import MalformedArtifact, Member

FORMAT = "hipbot-state/1"
STATE_SUFFIX = ".state.json"
TENSORS_SUFFIX = ".tensors.safetensors"
TEXT_SUFFIX = ".text.json"
PORTABLE_SUFFIXES = (".safetensors", ".json")
PICKLED_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")
# Not needed to resume: the Trainer rebuilds its arguments from the job spec.
DROPPED = ("training_args.bin",)
# Plain-text files DeepSpeed needs to find its own checkpoint.
TEXT_FILES = ("latest",)
MAX_JSON_BYTES = 64 * 2**20
MAX_HEADER_BYTES = 16 * 2**20
MAX_DEPTH = 64
TAGS = ("$tuple", "$dict", "$tensor", "$ndarray", "$float", "$size", "$dtype")
# safetensors dtypes and their sizes in bytes
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class NotPortable(MalformedArtifact):
    """A checkpoint file this format cannot carry (an object that is not plain data)."""


# ------------------------------------------------------------------ checks (no torch needed)
def _bad(name: str, why: str) -> MalformedArtifact:
    return MalformedArtifact(
        f"malformed artifact: checkpoint member {name!r} {why}",
        hint="checkpoints cross machines as safetensors and JSON only (optimizer state included)",
    )


def check_member(member: Member, data: IO[bytes]) -> None:
    """Refuse a checkpoint member that is not safetensors or JSON of the expected shape."""
    if member.name.endswith(".safetensors"):
        check_safetensors(member.name, data, member.size)
    elif member.name.endswith(".json"):
        if member.size > MAX_JSON_BYTES:
            raise _bad(member.name, f"is {member.size} bytes of JSON; the limit is {MAX_JSON_BYTES}")
        try:
            value = json.loads(data.read(member.size))
        except (ValueError, RecursionError) as exc:
            raise _bad(member.name, f"is not valid JSON: {exc}") from exc
        if member.name.endswith(STATE_SUFFIX):
            check_state(member.name, value)
        elif member.name.endswith(TEXT_SUFFIX) and not isinstance(value, str):
            raise _bad(member.name, "must hold one JSON string")
    else:
        raise _bad(member.name, "is neither safetensors nor JSON")


def check_safetensors(name: str, data: IO[bytes], size: int) -> dict[str, Any]:
    """The header of a safetensors file, checked against its size; ``MalformedArtifact`` if it lies."""
    head = data.read(8)
    if len(head) != 8:
        raise _bad(name, "is too short for a safetensors file")
    length = int.from_bytes(head, "little")
    if length > min(MAX_HEADER_BYTES, size - 8):
        raise _bad(name, "has a safetensors header larger than the file")
    try:
        header = json.loads(data.read(length))
    except (ValueError, RecursionError) as exc:
        raise _bad(name, f"has an unreadable safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise _bad(name, "has a safetensors header that is not a mapping")
    body = size - 8 - length
    for key, entry in header.items():
        if key == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise _bad(name, "has safetensors metadata that is not text")
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise _bad(name, f"has a malformed safetensors entry {key!r}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        ints = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
        span = isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
        if dtype not in DTYPE_BYTES or not ints or not span or not 0 <= offsets[0] <= offsets[1] <= body:
            raise _bad(name, f"has a malformed safetensors entry {key!r}")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise _bad(name, f"has a safetensors entry {key!r} whose size does not match its shape")
    return header


def check_state(name: str, value: object) -> None:
    """The tagged structure of ``NAME.state.json``: ``{"format", "value"}`` of plain data only."""
    if not isinstance(value, dict) or value.get("format") != FORMAT or set(value) != {"format", "value"}:
        raise _bad(name, f"is not a {FORMAT} document")
    for _ in _walk(name, value["value"], 0):
        pass


def _walk(name: str, node: object, depth: int) -> Iterator[str]:
    """Every tensor name the structure refers to; ``MalformedArtifact`` for anything unknown."""
    if depth > MAX_DEPTH:
        raise _bad(name, f"nests deeper than {MAX_DEPTH}")
    if node is None or isinstance(node, bool | int | str):
        return
    if isinstance(node, float):
        if not math.isfinite(node):
            raise _bad(name, "holds a bare non-finite number")
        return
    if isinstance(node, list):
        for item in node:
            yield from _walk(name, item, depth + 1)
        return
    if not isinstance(node, dict) or len(node) != 1 or next(iter(node)) not in TAGS:
        raise _bad(name, f"holds an untagged object {str(node)[:80]!r}")
    tag, body = next(iter(node.items()))
    if tag in ("$tensor", "$ndarray", "$dtype"):
        if not isinstance(body, str):
            raise _bad(name, f"has a {tag} that is not a name")
        if tag != "$dtype":
            yield body
    elif tag == "$float":
        if body not in FLOATS:
            raise _bad(name, f"has an unknown $float {body!r}")
    elif tag in ("$tuple", "$size"):
        if not isinstance(body, list) or (tag == "$size" and not all(isinstance(d, int) for d in body)):
            raise _bad(name, f"has a malformed {tag}")
        for item in body:
            yield from _walk(name, item, depth + 1)
    else:  # $dict: [[key, value], ...]
        if not isinstance(body, list) or not all(isinstance(p, list) and len(p) == 2 for p in body):
            raise _bad(name, "has a malformed $dict")
        for key, item in body:
            yield from _walk(name, key, depth + 1)
            yield from _walk(name, item, depth + 1)


# ------------------------------------------------------------------ worker side (torch)
def _encode(value: Any, tensors: dict[str, Any], name: str) -> Any:
    import numpy as np
    import torch

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": str(value)}
    if isinstance(value, torch.Size):
        return {"$size": list(value)}
    if isinstance(value, torch.dtype):
        return {"$dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Tensor | np.ndarray):
        key = f"t{len(tensors)}"
        is_array = isinstance(value, np.ndarray)
        tensor = torch.from_numpy(value) if is_array else value
        tensors[key] = tensor.detach().cpu().contiguous().clone()
        return {"$ndarray" if is_array else "$tensor": key}
    if isinstance(value, np.generic):
        return _encode(value.item(), tensors, name)
    if isinstance(value, list):
        return [_encode(v, tensors, name) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, tensors, name) for v in value]}
    if isinstance(value, dict):
        return {"$dict": [[_encode(k, tensors, name), _encode(v, tensors, name)] for k, v in value.items()]}
    raise NotPortable(f"checkpoint file {name} holds a {type(value).__name__}, which is not plain data")


def _decode(node: Any, tensors: dict[str, Any], name: str) -> Any:
    import torch

    if isinstance(node, list):
        return [_decode(v, tensors, name) for v in node]
    if not isinstance(node, dict):
        return node
    tag, body = next(iter(node.items()))
    if tag in ("$tensor", "$ndarray"):
        if body not in tensors:
            raise _bad(name, f"refers to a tensor {body!r} that its safetensors file lacks")
        return tensors[body].numpy() if tag == "$ndarray" else tensors[body]
    if tag == "$float":
        return FLOATS[body]
    if tag == "$size":
        return torch.Size(body)
    if tag == "$dtype":
        dtype = getattr(torch, body, None)
        if not isinstance(dtype, torch.dtype):
            raise _bad(name, f"names an unknown dtype {body!r}")
        return dtype
    if tag == "$tuple":
        return tuple(_decode(v, tensors, name) for v in body)
    pairs = [(_decode(k, tensors, name), _decode(v, tensors, name)) for k, v in body]
    try:
        return dict(pairs)
    except TypeError as exc:  # a list as a key
        raise _bad(name, f"has an unhashable key: {exc}") from exc


def export_checkpoint(src: Path, dest: Path) -> list[str]:
    """Write ``src`` (a Trainer checkpoint folder) into the new folder ``dest`` in the portable
    format; return the files written. ``NotPortable`` when a state holds more than plain data."""
    import torch
    from safetensors.torch import save_file
    from transformers.trainer_pt_utils import safe_globals

    written: list[str] = []
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(src).as_posix()
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(PORTABLE_SUFFIXES):
            shutil.copyfile(path, out)
            written.append(rel)
        elif path.name in TEXT_FILES:
            out.with_name(path.name + TEXT_SUFFIX).write_text(json.dumps(path.read_text(encoding="utf-8")))
            written.append(rel + TEXT_SUFFIX)
        elif path.name.endswith(PICKLED_SUFFIXES) and path.name not in DROPPED:
            with safe_globals():  # this worker's own file, written by its own Trainer
                state = torch.load(path, map_location="cpu", weights_only=True)
            tensors: dict[str, Any] = {}
            doc = {"format": FORMAT, "value": _encode(state, tensors, rel)}
            out.with_name(path.name + STATE_SUFFIX).write_text(json.dumps(doc), encoding="utf-8")
            save_file(tensors, str(out.with_name(path.name + TENSORS_SUFFIX)))
            written += [rel + STATE_SUFFIX, rel + TENSORS_SUFFIX]
    return written


def import_checkpoint(src: Path, dest: Path) -> None:
    """Rebuild a Trainer checkpoint folder ``dest`` from the portable files in ``src`` (checked
    again here: this worker trusts no one's bytes)."""
    import torch
    from safetensors.torch import load_file

    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src).as_posix()
        with path.open("rb") as fh:
            check_member(Member(rel, path.stat().st_size), fh)
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        original = path.name.removesuffix(STATE_SUFFIX).removesuffix(TEXT_SUFFIX)
        if rel.endswith(STATE_SUFFIX) and original.endswith(PICKLED_SUFFIXES):
            doc = json.loads(path.read_text(encoding="utf-8"))
            tensor_file = path.with_name(original + TENSORS_SUFFIX)
            if not tensor_file.is_file():
                raise _bad(rel, f"comes without {original + TENSORS_SUFFIX}")
            tensors = load_file(str(tensor_file))
            torch.save(_decode(doc["value"], tensors, rel), out.with_name(original))
        elif rel.endswith(TEXT_SUFFIX) and original in TEXT_FILES:
            out.with_name(original).write_text(json.loads(path.read_text(encoding="utf-8")), encoding="utf-8")
        elif not rel.endswith(TENSORS_SUFFIX):
            shutil.copyfile(path, out)
