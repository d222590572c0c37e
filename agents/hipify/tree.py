"""Tree I/O for the translator: every byte read or written goes through here. Decoding input
(``check_text``), reading sources, walking input trees, naming outputs (``x.cu`` -> ``x.hip``),
writing translations (atomically, with a ``.prehip`` backup for ``--inplace``) and stdout."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hipbot.agents.hipify.names import kernel_names, own_names
from hipbot.agents.hipify.report import HipifyResult
from hipbot.errors import HipbotError
from hipbot.i18n import N_

MAX_INPUT_BYTES = 16 * 1024 * 1024
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cxx", ".cc", ".c", ".h", ".hpp", ".hxx", ".inl")


@dataclass
class FileOutcome:
    source: Path
    output: Path | None
    result: HipifyResult | None
    error: str | None = None


ENCODING_ERRORS = "surrogateescape"  # bytes that are not UTF-8 (latin-1 comments) pass through unchanged
_KEPT_BYTE = re.compile("[\udc80-\udcff]")


def check_text(data: bytes, filename: str = "<stdin>") -> str:
    """Decode input bytes, refusing what is not C/C++ text (binary, empty, huge). Bytes that are not
    UTF-8 (a latin-1 ``©`` in a licence comment) are kept as lone surrogates, as hipify-clang keeps
    them: ``encode_text`` writes them back byte for byte, and ``encoding_of`` names them."""
    if not data.strip():
        raise HipbotError(N_("{filename}: input is empty", filename=filename))
    if len(data) > MAX_INPUT_BYTES:
        raise HipbotError(
            N_(
                "{filename}: input is {size} MiB; the limit is {limit} MiB",
                filename=filename,
                size=len(data) // (1024 * 1024),
                limit=MAX_INPUT_BYTES // (1024 * 1024),
            )
        )
    if b"\0" in data[:65536]:
        raise HipbotError(
            N_("{filename}: looks like a binary file (NUL bytes), not CUDA source", filename=filename)
        )
    return data.decode("utf-8", ENCODING_ERRORS).removeprefix("\ufeff")


def encoding_of(text: str) -> str:
    """'utf-8', or what a text decoded by ``check_text`` held besides: 'utf-8 with N non-UTF-8
    byte(s) kept as they are (latin-1?)'."""
    kept = len(_KEPT_BYTE.findall(text))
    return f"utf-8 with {kept} non-UTF-8 byte(s) kept as they are (latin-1?)" if kept else "utf-8"


def encode_text(text: str) -> bytes:
    """The bytes a translation is written as (non-UTF-8 input bytes restored unchanged)."""
    return text.encode("utf-8", ENCODING_ERRORS)


def read_source(path: Path) -> str:
    """A source file's text (``check_text``); a HipbotError when it cannot be read or decoded."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HipbotError(N_("{path}: cannot read ({reason})", path=path, reason=exc.strerror)) from exc
    return check_text(data, str(path))


def read_stdin() -> str:
    return check_text(sys.stdin.buffer.read(), "<stdin>")


def write_stdout(text: str) -> None:
    """UTF-8 bytes whatever the locale says (sources carry non-ASCII comments), line endings kept."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
    else:
        buffer.write(encode_text(text))
        buffer.flush()


def write_file(path: Path, text: str) -> None:
    """Write one translation where ``-o`` says (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_text(text))


def write_output(source: Path, target: Path, text: str, inplace: bool) -> None:
    """Write the translation of ``source`` to ``target`` atomically; in place, the original bytes
    are kept first as ``source.prehip``."""
    if inplace:
        backup = source.with_name(source.name + ".prehip")
        backup.write_bytes(source.read_bytes())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".hipbot-tmp")
    tmp.write_bytes(encode_text(text))
    tmp.replace(target)


def output_path(source: Path, root: Path | None, out_dir: Path | None, inplace: bool) -> Path:
    """Where the translation of ``source`` goes: ``x.cu`` -> ``x.hip`` beside it or under ``out_dir``
    (keeping the tree below ``root``), or the file itself with ``inplace``."""
    if inplace:
        return source
    name = source.with_suffix(".hip").name if source.suffix in (".cu",) else source.name
    if out_dir is None:
        if source.suffix != ".cu":
            return source.with_name(source.stem + ".hip" + source.suffix)
        return source.with_name(name)
    rel = source.relative_to(root).parent if root is not None else Path()
    return out_dir / rel / name


def project_names(sources: list[Path]) -> tuple[frozenset[str], frozenset[str]]:
    """``own_names`` and ``kernel_names`` over a whole tree, so that ``cudaCheck`` defined in
    ``common.h`` is not reported as an unknown CUDA API in the ``.cu`` files that use it, and a
    kernel declared in a ``.cuh`` is known where it is passed by name. Unreadable files are skipped
    here (translating them reports why)."""
    names: set[str] = set()
    kernels: set[str] = set()
    for path in sources:
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        names |= own_names(text)
        kernels |= kernel_names(text)
    return frozenset(names), frozenset(kernels)


def collect_sources(paths: list[Path]) -> list[tuple[Path, Path | None]]:
    """Files to translate, each with the directory it was found under (None for a file argument)."""
    found: list[tuple[Path, Path | None]] = []
    for p in paths:
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for f in sorted(filenames):
                    if f.endswith(SOURCE_SUFFIXES):
                        found.append((Path(dirpath) / f, p))
        elif p.is_file():
            found.append((p, None))
        else:
            raise HipbotError(N_("no such file or directory: {path}", path=p))
    return found
