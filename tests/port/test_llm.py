"""The model stage's accept/reject logic with the real hipcc: a model edit is kept only when the
unit then compiles; otherwise the file is restored byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.port.compiler import CompileSettings
from hipbot.agents.port.llm import LineEdit, apply_edits, parse_edits, try_edits
from hipbot.agents.port.rules import UnitState

BROKEN = "#include <hip/hip_runtime.h>\n__global__ void k(float* x) {\n  x[0] = undefined_scale * 2.0f;\n}\n"


def test_parse_and_apply() -> None:
    reply = 'Sure: {"edits": [{"line": 3, "old": "  x[0] = undefined_scale * 2.0f;", "new": "  x[0] = 2.0f;"}]} done'
    edits = parse_edits(reply)
    assert edits == [LineEdit(3, "  x[0] = undefined_scale * 2.0f;", "  x[0] = 2.0f;")]
    assert apply_edits(BROKEN, edits) == BROKEN.replace("undefined_scale * ", "")
    assert apply_edits(BROKEN, [LineEdit(3, "something else", "x")]) is None
    assert apply_edits(BROKEN, [LineEdit(99, "", "x")]) is None
    assert parse_edits("no json here") == [] and parse_edits('{"edits": [{"line": "3"}]}') == []


def _state(root: Path, name: str = "k.hip") -> UnitState:
    return UnitState(root, Path(name), [], (5, 2), {name: [Path(name)]})


@pytest.mark.hipcc
def test_edit_kept_only_when_the_unit_compiles(tmp_path: Path) -> None:
    unit = tmp_path / "k.hip"
    unit.write_text(BROKEN)
    settings = CompileSettings("gfx90a", 60)
    wrong = [LineEdit(3, "  x[0] = undefined_scale * 2.0f;", "  x[0] = still_undefined;")]
    assert try_edits(_state(tmp_path), wrong, settings, "test") is None
    assert unit.read_text() == BROKEN  # restored
    right = [LineEdit(3, "  x[0] = undefined_scale * 2.0f;", "  x[0] = 2.0f;")]
    outcome = try_edits(_state(tmp_path), right, settings, "model repair")
    assert outcome is not None
    edits, result = outcome
    assert result.ok and edits[0].rule == "model" and "+  x[0] = 2.0f;" in edits[0].diff
    assert "undefined_scale" not in unit.read_text()


def test_edit_refused_when_another_file_includes_the_unit(tmp_path: Path) -> None:
    (tmp_path / "k.hip").write_text(BROKEN)
    (tmp_path / "main.hip").write_text('#include "k.hip"\n')
    state = UnitState(
        tmp_path, Path("k.hip"), [], (5, 2), {"k.hip": [Path("k.hip")], "main.hip": [Path("main.hip")]}
    )
    right = [LineEdit(3, "  x[0] = undefined_scale * 2.0f;", "  x[0] = 2.0f;")]
    assert try_edits(state, right, CompileSettings(), "model") is None
    assert (tmp_path / "k.hip").read_text() == BROKEN
