"""Gzipped tar archives that cross machines (checkpoints and adapters), read defensively.

Members are read one at a time from the stream: each header is checked (a relative path inside
the archive, a regular file or folder, no links or devices) and its declared size counted against
the per-member and total limits *before* its data is decompressed, so a small upload that would
unpack to gigabytes is refused after reading a few headers, never written out. Extraction writes
each member itself, at most its declared size, into a folder it creates.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.memory import GIB

CHUNK = 1 << 20


class MalformedArtifact(HipbotError):
    """An upload that is not a safe gzipped tar of what its kind needs."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may unpack to: each member, all of them, and how many. Besides the
    absolute total, the total may be at most ``ratio`` times the compressed size (plus
    ``ratio_floor``): safetensors weights barely compress, so an honest adapter or checkpoint
    unpacks to little more than it weighs, while a bomb unpacks to a thousand times its size."""

    member_bytes: int = 4 * GIB
    total_bytes: int = 8 * GIB
    members: int = 10_000
    ratio: float = 4.0
    ratio_floor: int = 64 * 2**20

    def budget(self, compressed: int) -> int:
        """The most an archive of ``compressed`` bytes may unpack to."""
        return min(self.total_bytes, max(self.ratio_floor, int(self.ratio * compressed)))


@dataclass(frozen=True)
class Member:
    """One regular file of an archive: its path inside it and its size."""

    name: str
    size: int


def _checked(info: tarfile.TarInfo) -> str:
    """The member's normalised relative path, or ``MalformedArtifact`` for anything unsafe."""
    name = info.name
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if name.startswith("/") or "\\" in name or ".." in parts or (not parts and not info.isdir()):
        raise MalformedArtifact(N_("malformed artifact: unsafe archive member {name!r}", name=name))
    if not (info.isfile() or info.isdir()):
        kind = "link" if info.issym() or info.islnk() else "special file"
        raise MalformedArtifact(
            N_("malformed artifact: unsafe archive member {name!r} ({kind})", name=name, kind=kind)
        )
    return "/".join(parts)


def iter_members(
    fileobj: IO[bytes], limits: ArchiveLimits, compressed: int
) -> Iterator[tuple[Member, IO[bytes] | None]]:
    """Each regular file (and its data stream) in order, checked against ``limits`` before its data
    is read; folders are checked and skipped. The stream is valid until the next member."""
    total = count = 0
    budget = limits.budget(compressed)
    try:
        with tarfile.open(fileobj=fileobj, mode="r|gz") as tar:
            for info in tar:
                count += 1
                if count > limits.members:
                    raise MalformedArtifact(
                        N_(
                            "malformed artifact: more than {limits_members} members in the archive",
                            limits_members=limits.members,
                        )
                    )
                name = _checked(info)
                if info.isdir():
                    continue
                if info.size > limits.member_bytes:
                    raise MalformedArtifact(
                        N_(
                            "malformed artifact: {name} unpacks to {info_size} bytes; the limit for one file "
                            "is {limits_member_bytes}",
                            name=name,
                            info_size=info.size,
                            limits_member_bytes=limits.member_bytes,
                        )
                    )
                total += info.size
                if total > budget:
                    raise MalformedArtifact(
                        N_(
                            "malformed artifact: the archive of {compressed} bytes unpacks to more than "
                            "{budget} bytes",
                            compressed=compressed,
                            budget=budget,
                        )
                    )
                yield Member(name, info.size), tar.extractfile(info)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise MalformedArtifact(N_("malformed artifact: {exc}", exc=exc)) from exc


def scan(
    path: Path, limits: ArchiveLimits, check: Callable[[Member, IO[bytes]], None] | None = None
) -> list[str]:
    """The archive's file names, every member checked (and passed to ``check`` with its data)."""
    names: list[str] = []
    with path.open("rb") as fh:
        for member, data in iter_members(fh, limits, path.stat().st_size):
            if check is not None and data is not None:
                check(member, data)
            names.append(member.name)
    return names


def extract(path: Path, dest: Path, limits: ArchiveLimits) -> list[str]:
    """Unpack ``path`` into the new folder ``dest`` (which must not exist); return the file names.
    On any refusal nothing is left behind."""
    dest.mkdir(parents=True)
    names: list[str] = []
    try:
        with path.open("rb") as fh:
            for member, data in iter_members(fh, limits, path.stat().st_size):
                target = dest / member.name
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    out = target.open("xb")
                except OSError as exc:  # the same name twice, or a file where a folder should be
                    raise MalformedArtifact(
                        N_(
                            "malformed artifact: member {member_name!r}: {exc}",
                            member_name=member.name,
                            exc=exc,
                        )
                    ) from exc
                with out:
                    if data is not None:
                        _copy(data, out, member.size)
                names.append(member.name)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return names


def _copy(src: IO[bytes], dst: IO[bytes], size: int) -> None:
    left = size
    while left > 0:
        chunk = src.read(min(CHUNK, left))
        if not chunk:
            raise MalformedArtifact(N_("malformed artifact: a member is shorter than its header says"))
        dst.write(chunk)
        left -= len(chunk)
