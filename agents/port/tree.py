"""Writing the ported tree: sources through the hipify translator (the layout ``--o-dir`` uses:
``x.cu`` -> ``x.hip``, headers keep their names), build files through ``buildfiles``, every other
file copied, so the output is the whole project."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.hipify.report import HipifyOptions
from hipbot.agents.hipify.translate import translate_path
from hipbot.agents.hipify.tree import collect_sources, output_path, project_names
from hipbot.agents.port.buildfiles import build_kind, translate_build_file
from hipbot.agents.port.report import BuildFileReport
from hipbot.errors import HipbotError
from hipbot.i18n import N_

log = logging.getLogger(__name__)

MAX_COPY_BYTES = 8 * 1024 * 1024


def read_text(path: Path) -> str:
    """A file's text, bytes that are not UTF-8 kept (written back unchanged by ``write_text``)."""
    return path.read_bytes().decode("utf-8", "surrogateescape")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


@dataclass
class TreeResult:
    outputs: dict[Path, Path] = field(default_factory=dict)  # source (absolute) -> output (absolute)
    files: list[dict] = field(default_factory=list)
    build_files: list[BuildFileReport] = field(default_factory=list)


def check_dirs(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise HipbotError(N_("{src} is not a folder", src=src), hint="hipbot port SRC_DIR -o OUT_DIR")
    s, o = src.resolve(), out.resolve()
    if o == s or s in o.parents or o in s.parents:
        raise HipbotError(
            N_("the output folder {out} overlaps the sources {src}", out=out, src=src),
            hint=N_("choose an -o folder outside SRC"),
        )
    if out.exists() and any(out.iterdir()):
        raise HipbotError(
            N_("{out} is not empty", out=out),
            hint=N_("give a new or empty folder, the port writes a whole tree"),
        )


def write_tree(src: Path, out: Path, options: HipifyOptions, arch: str) -> TreeResult:
    """Translate ``src`` into ``out``."""
    result = TreeResult()
    sources = [s for s, _ in collect_sources([src])]
    names, kernels = project_names(sources)
    renamed = tuple(
        (str(s.resolve()), o.name) for s in sources if (o := output_path(s, src, out, False)).name != s.name
    )
    options = dataclasses.replace(
        options, project_names=names, project_kernels=kernels, renamed_sources=renamed, lint=False
    )
    done: set[Path] = set()
    for source in sources:
        outcome = translate_path(source, options, root=src, out_dir=out)
        rel = str(source.relative_to(src))
        done.add(source)
        if outcome.output is None:
            # a file the translator refuses is copied as it is, so the tree stays whole
            target = output_path(source, src, out, False)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            result.outputs[source.resolve()] = target.resolve()
            result.files.append({"path": rel, "error": outcome.error})
            continue
        result.outputs[source.resolve()] = outcome.output.resolve()
        rep = outcome.result.report if outcome.result else None
        unconverted = len(rep.unconverted) if rep is not None else 0
        result.files.append(
            {"path": rel, "output": str(outcome.output.relative_to(out)), "unconverted": unconverted}
        )
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path in done or path.is_symlink():
                continue
            target = out / path.relative_to(src)
            _copy_or_translate(path, target, out, arch, result)
    return result


def _copy_or_translate(path: Path, target: Path, out: Path, arch: str, result: TreeResult) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size > MAX_COPY_BYTES:
        log.info("not copied (over %d bytes): %s", MAX_COPY_BYTES, path)
        return
    if build_kind(path):
        text = read_text(path)
        translated = translate_build_file(path, text, arch)
        if translated is not None:
            write_text(target, translated.text)
            if translated.edits:
                result.build_files.append(
                    BuildFileReport(
                        str(target.relative_to(out)),
                        translated.kind,
                        [dataclasses.asdict(e) for e in translated.edits],
                    )
                )
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
