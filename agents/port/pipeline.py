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
from hipbot.agents.port.causes import classify, inline_ptx, live_ptx
from hipbot.agents.port.compiler import (
    CompileResult,
    CompileSettings,
    compile_unit,
    escaping_includes,
    preprocess_unit,
)
from hipbot.agents.port.ptx import ptx_fixes
from hipbot.agents.port.report import Cause, Edit, PortReport, UnitReport, text_diff
from hipbot.agents.port.rules import Fix, UnitState, find_fixes
from hipbot.agents.port.source_fixes import included_files
from hipbot.agents.port.tree import check_dirs, read_text, write_text, write_tree
from hipbot.agents.port.units import Unit, discover
from hipbot.i18n import N_

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
        self.writes = 0  # edits of the tree so far
        self.stamp: dict[str, int] = {}  # file (relative) -> ``writes`` after its last edit

    def apply(self, fix: Fix, state: UnitState) -> Edit | None:
        """Apply one fix; the edit (diff, reason, doc) or None when it changed nothing."""
        with self.lock:
            for extra, content in fix.new_files:
                if not (self.root / extra).exists():
                    write_text(self.root / extra, content)
        if fix.add_args:
            new = [a for a in fix.add_args if a not in state.args]
            if not new:
                return None
            state.args += new
            return Edit("", fix.reason, fix.doc, "+ " + " ".join(new), fix.rule)
        assert fix.file is not None and fix.edit is not None
        path = self.root / fix.file
        with self.lock:
            before = read_text(path)
            after = fix.edit(before)
            if after == before:
                return None
            write_text(path, after)
            self.writes += 1
            self.stamp[str(fix.file)] = self.writes
        return Edit(str(fix.file), fix.reason, fix.doc, text_diff(str(fix.file), before, after), fix.rule)


def _unit_args(unit: Unit, out: Path, output: Path) -> list[str]:
    here = output.parent
    args = [f"-I{os.path.relpath(out / d, here)}" for d in unit.include_dirs if (out / d).is_dir()]
    args += [f"-D{d}" for d in unit.defines]
    args += unit.options
    return args


@dataclass
class _Job:
    """One unit on its way through the stages."""

    state: UnitState
    rep: UnitReport
    settings: CompileSettings
    result: CompileResult | None = None
    hipcc: float = 0.0
    writes_seen: int = 0  # the tree's edit count when the unit was last compiled

    def edited_since(self, tree: _Tree) -> bool:
        """Another unit edited a file this unit includes (or an error is in) since it was last compiled."""
        assert self.result is not None
        if not any(n > self.writes_seen for n in tree.stamp.values()):
            return False
        files = {d.file for d in self.result.errors} | {str(p) for p in included_files(self.state)}
        return any(tree.stamp.get(f, 0) > self.writes_seen for f in files)

    def ptx_cause(self, result: CompileResult, build: bool) -> Cause | None:
        """Inline PTX the build would meet once ``-fsyntax-only`` passed: found in the unit's files,
        then confirmed in what hipcc preprocesses (a PTX statement behind ``#ifdef __CUDA_ARCH__``
        never reaches the compiler). None for --build, which assembles it itself."""
        if build or not result.ok:
            return None
        cause = inline_ptx(self.state)
        if cause is None:
            return None
        preprocessed = preprocess_unit(self.state.source, self.state.root, self.state.args, self.settings)
        return cause if preprocessed is None else live_ptx(preprocessed, self.state)

    def compile(self) -> CompileResult:
        self.result = compile_unit(self.state.source, self.state.root, self.state.args, self.settings)
        self.hipcc += self.result.seconds
        return self.result


def _rewrite_ptx(job: _Job, tree: _Tree) -> CompileResult:
    """One-instruction inline PTX with an exact HIP counterpart is rewritten, the unit recompiled."""
    assert job.result is not None
    edits = [e for fix in ptx_fixes(job.state) if (e := tree.apply(fix, job.state))]
    if not edits:
        return job.result
    job.rep.rounds += 1
    job.rep.edits += edits
    job.rep.stage = "rules"
    return job.compile()


def _repair(job: _Job, tree: _Tree, options: PortOptions, model: ModelRepair | None) -> None:
    """Rounds of rules while one fixes something, then the model; the unit's final status and cause."""
    result, rep, state = job.result, job.rep, job.state
    assert result is not None
    while not result.ok and result.error is None and options.rules and rep.rounds < options.max_rounds:
        start = time.monotonic()
        edits = [e for fix in find_fixes(result.errors, state) if (e := tree.apply(fix, state))]
        tree.port_seconds += time.monotonic() - start
        if not edits and not job.edited_since(tree):
            break
        # no edit of its own: another unit's fix of a shared header may be this unit's too
        rep.rounds += 1
        rep.edits += edits
        rep.stage = "rules"
        job.writes_seen = tree.writes
        result = job.compile()
    if not result.ok and result.error is None and model is not None:
        outcome = model(state, result)
        if outcome is not None:
            edits, result = outcome
            job.hipcc += result.seconds
            rep.edits += edits
            rep.stage = "model"
    ptx = job.ptx_cause(result, options.build)
    if options.rules and result.error is None and (not result.ok or ptx is not None):
        result = _rewrite_ptx(job, tree)
        ptx = job.ptx_cause(result, options.build)
    rep.command = result.command
    rep.cwd = result.cwd
    if result.ok and ptx is None:
        rep.status = "compiled"
    elif result.ok:
        rep.cause = ptx  # -fsyntax-only passed, the build would not: PTX is not assembled for AMD
    else:
        rep.cause = classify(result, state)
        rep.errors = [f"{d.file}:{d.line}:{d.col}: {d.message}" for d in result.errors[:5]]


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
    workers = options.jobs or os.cpu_count() or 1
    work = []
    for unit in units:
        output = tree_result.outputs.get((src_root / unit.source).resolve())
        if output is None:
            continue
        work.append((unit, output))
    if escaping:
        for unit, output in work:
            rep = UnitReport(str(unit.source), str(output.relative_to(out_root)))
            rep.cause = Cause(
                "refused", N_("refused before compiling: {paths}", paths="; ".join(escaping[:3]))
            )
            report.units.append(rep)
        work = []
    settings = CompileSettings(options.arch, options.timeout, options.build)
    jobs = [
        _Job(
            UnitState(out_root, o.relative_to(out_root), _unit_args(u, out_root, o), target, files_by_name),
            UnitReport(str(u.source), str(o.relative_to(out_root))),
            settings,
        )
        for u, o in work
    ]
    # every unit is compiled as translated before any rule edits a shared header, so the
    # "after translation" figure is what hipify alone gives
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_Job.compile, jobs))
        list(pool.map(lambda j: _repair(j, tree, options, model), jobs))
    report.units += [j.rep for j in jobs]
    report.seconds_port = prep + tree.port_seconds
    report.seconds_hipcc = sum(j.hipcc for j in jobs)
    log.info("port of %s: %s", src, report.summary())
    return report
