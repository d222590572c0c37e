"""What the hipcc port tests share: a project ported twice (rules off, rules on) and the check that
a unit a rule is for fails without it and compiles with it."""

from __future__ import annotations

from pathlib import Path

from hipbot.agents.port.pipeline import PortOptions, port
from hipbot.agents.port.report import PortReport, UnitReport


def port_both(files: dict[str, str], base: Path) -> tuple[PortReport, PortReport]:
    """``files`` written under ``base/src``, ported for ROCm 5.2 with the rules off and on."""
    src = base / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    plain = port(src, base / "plain", PortOptions(rocm="5.2", rules=False, jobs=2))
    fixed = port(src, base / "out", PortOptions(rocm="5.2", jobs=2))
    return plain, fixed


def unit(report: PortReport, source: str) -> UnitReport:
    return next(u for u in report.units if u.source == source)


def assert_fixed_by(ports: tuple[PortReport, PortReport], source: str, rule: str) -> None:
    plain, fixed = ports
    assert unit(plain, source).status == "failed"
    done = unit(fixed, source)
    assert done.status == "compiled", done.errors
    assert done.stage == "rules"
    assert rule in {e.rule for e in done.edits}
    assert all(e.reason and e.doc and e.diff for e in done.edits)
