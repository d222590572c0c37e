"""``hipbot port``: translate the tree, find the translation units, compile each for the AMD
target, repair with the rules while a round fixes something, optionally ask the model, and report
every unit's stage, command and (when it still fails) its cause."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.hipify.report import HipifyOptions
from hipbot.agents.port import rocm as rocm_lib
from hipbot.agents.port.compiler import CompileResult, CompileSettings, compile_unit, escaping_includes
from hipbot.agents.port.report import Cause, Edit, PortReport, UnitReport, text_diff
from hipbot.agents.port.rules import Fix, UnitState, classify, find_fixes
from hipbot.agents.port.tree import check_dirs, read_text, write_text, write_tree
from hipbot.agents.port.units import Unit, discover

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PortOptions:
    arch: str = "gfx90a"
    rocm: str = "auto"
    build: bool = False
    max_rounds: int = 4
    timeout: float = 120.0
    jobs: int = 0  # 0: one per CPU
    rules: bool = True
    hipify: HipifyOptions = field(default_factory=HipifyOptions)


ModelRepair = Callable[[UnitState, CompileResult], "tuple[list[Edit], CompileResult] | None"]


class _Tree:
    """The ported tree's files as the units edit them (one lock: headers are shared)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.port_seconds = 0.0

    def apply(self, fix: Fix, state: UnitState) -> Edit | None:
        """Apply one fix; the edit (diff, reason, doc) or None when it changed nothing."""
        start = time.monotonic()
        try:
            if fix.add_args:
                new = [a for a in fix.add_args if a not in state.args]
                if not new:
                    return None
                state.args += new
                return Edit("", fix.reason, fix.doc, "+ " + " ".join(new), fix.rule)
            assert fix.file is not None and fix.edit is not None
            path = self.root / fix.file
            with self.lock:
                for extra, content in fix.new_files:
                    if not (self.root / extra).exists():
                        write_text(self.root / extra, content)
                before = read_text(path)
                after = fix.edit(before)
                if after == before:
                    return None
                write_text(path, after)
            return Edit(str(fix.file), fix.reason, fix.doc, text_diff(str(fix.file), before, after), fix.rule)
        finally:
            self.port_seconds += time.monotonic() - start


def _unit_args(unit: Unit, out: Path, output: Path) -> list[str]:
    here = output.parent
    args = [f"-I{os.path.relpath(out / d, here)}" for d in unit.include_dirs if (out / d).is_dir()]
    args += [f"-D{d}" for d in unit.defines]
    args += unit.options
    return args


def _port_unit(
    unit: Unit,
    output: Path,
    out: Path,
    src: Path,
    tree: _Tree,
    options: PortOptions,
    target: tuple[int, int],
    model: ModelRepair | None,
    files_by_name: dict[str, list[Path]],
) -> tuple[UnitReport, float]:
    settings = CompileSettings(options.arch, options.timeout, options.build)
    rel_out = output.relative_to(out)
    state = UnitState(out, rel_out, _unit_args(unit, out, output), target, files_by_name)
    rep = UnitReport(str(unit.source), str(rel_out))
    hipcc = 0.0
    result = compile_unit(rel_out, out, state.args, settings)
    hipcc += result.seconds
    stage = "translation"
    rounds = 0
    while not result.ok and result.error is None and options.rules and rounds < options.max_rounds:
        start = time.monotonic()
        edits = [e for fix in find_fixes(result.errors, state) if (e := tree.apply(fix, state))]
        tree.port_seconds += time.monotonic() - start
        if not edits:
            break
        rounds += 1
        rep.edits += edits
        stage = "rules"
        result = compile_unit(rel_out, out, state.args, settings)
        hipcc += result.seconds
    if not result.ok and result.error is None and model is not None:
        outcome = model(state, result)
        if outcome is not None:
            edits, result = outcome
            rep.edits += edits
            stage = "model"
            hipcc += result.seconds
    rep.rounds = rounds
    rep.stage = stage
    rep.command = result.command
    rep.cwd = result.cwd
    if result.ok:
        rep.status = "compiled"
    else:
        rep.cause = classify(result, state)
        rep.errors = [f"{d.file}:{d.line}:{d.col}: {d.message}" for d in result.errors[:5]]
    return rep, hipcc


def port(src: Path, out: Path, options: PortOptions, model: ModelRepair | None = None) -> PortReport:
    """Port the project in ``src`` into ``out`` (a new or empty folder) and compile it."""
    check_dirs(src, out)
    t0 = time.monotonic()
    target = rocm_lib.resolve(options.rocm)
    report = PortReport(str(src), str(out), options.arch, "{}.{}".format(*target))
    report.model = "on" if model is not None else None
    out.mkdir(parents=True, exist_ok=True)
    src_root, out_root = src.resolve(), out.resolve()
    tree_result = write_tree(src_root, out_root, options.hipify, options.arch)
    report.files = tree_result.files
    report.build_files = tree_result.build_files
    units = discover(src_root)
    all_files = [p for p in out_root.rglob("*") if p.is_file()]
    files_by_name: dict[str, list[Path]] = {}
    for p in all_files:
        files_by_name.setdefault(p.name, []).append(p.relative_to(out_root))
    escaping = escaping_includes(out_root, [p for p in all_files if p.suffix not in (".txt", ".md")])
    tree = _Tree(out_root)
    prep = time.monotonic() - t0
    jobs = options.jobs or os.cpu_count() or 1
    work = []
    for unit in units:
        output = tree_result.outputs.get((src_root / unit.source).resolve())
        if output is None:
            continue
        work.append((unit, output))
    hipcc_total = 0.0
    if escaping:
        for unit, output in work:
            rep = UnitReport(str(unit.source), str(output.relative_to(out_root)))
            rep.cause = Cause("refused", "refused before compiling: " + "; ".join(escaping[:3]))
            report.units.append(rep)
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(_port_unit, u, o, out_root, src_root, tree, options, target, model, files_by_name)
                for u, o in work
            ]
            for fut in futures:
                rep, seconds = fut.result()
                hipcc_total += seconds
                report.units.append(rep)
    report.seconds_port = prep + tree.port_seconds
    report.seconds_hipcc = hipcc_total
    log.info("port of %s: %s", src, report.summary())
    return report
