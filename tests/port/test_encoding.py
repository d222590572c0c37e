"""Issue 12, part 1: sources with bytes that are not UTF-8 (latin-1 licence comments) are translated
byte-transparently by hipify, its tree mode, --inplace and the port; the report notes the encoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hipbot.agents.hipify.translate import translate
from hipbot.agents.hipify.tree import check_text, encode_text
from hipbot.cli import main

LATIN1 = b"// (c) 2019 Fran\xe7ois M\xfcller \xa9, 5 \xb5s\n#include <cuda_runtime.h>\nvoid f(float* p) { cudaFree(p); }\n"
EXPECTED = b"// (c) 2019 Fran\xe7ois M\xfcller \xa9, 5 \xb5s\n#include <hip/hip_runtime.h>\nvoid f(float* p) { hipFree(p); }\n"


def test_library_round_trip_is_byte_identical_outside_rewritten_tokens() -> None:
    text = check_text(LATIN1, "x.cu")  # what the CLI, the tree writer and the bot's attachments use
    result = translate(text, filename="x.cu")
    assert encode_text(result.text) == EXPECTED
    assert result.report.to_dict()["encoding"] == "utf-8 with 4 non-UTF-8 byte(s) kept as they are (latin-1?)"
    assert translate("int x;\n").report.encoding == "utf-8"


def test_cli_file_tree_and_inplace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_bytes(LATIN1)
    assert main(["hipify", str(src / "k.cu"), "-o", str(tmp_path / "k.hip")]) == 0
    assert (tmp_path / "k.hip").read_bytes() == EXPECTED
    assert main(["hipify", str(src), "--o-dir", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "non-UTF-8" in report["files"][0]["report"]["encoding"]
    assert (tmp_path / "out" / "k.hip").read_bytes() == EXPECTED
    assert main(["hipify", "--inplace", str(src)]) == 0
    assert (src / "k.cu.prehip").read_bytes() == LATIN1
    assert (src / "k.cu").read_bytes() == EXPECTED
