"""The bundled mapping data and ``hipbot mappings``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.hipify import mappings
from hipbot.cli import main
from hipbot.errors import HipbotError


def test_shipped_data_equals_generator_output(docs_root: Path) -> None:
    assert mappings.read_data_file() == mappings.generate(docs_root)


def test_update_from_docs_writes_an_identical_file(
    docs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.json.gz"
    assert main(["mappings", "update", "--docs", str(docs_root), "--output", str(out)]) == 0
    assert out.read_bytes() == mappings.DATA_FILE.read_bytes()
    assert "rows" in capsys.readouterr().out


def test_download_error_path_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HipbotError, match="cannot download the HIPIFY tables"):
        mappings.download(
            "rocm-6.3.0", raw_base="http://127.0.0.1:9", api_base="http://127.0.0.1:9", timeout=2
        )
    with pytest.raises(HipbotError, match="not a git ref"):
        mappings.download("../etc")
    assert main(["mappings", "update", "--download"]) == 1
    assert "needs --ref" in capsys.readouterr().err


def test_show_and_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mappings", "show", "cudaMemcpyToSymbol", "cublasSgemm_v2"]) == 0
    out = capsys.readouterr().out
    assert "cudaMemcpyToSymbol -> hipMemcpyToSymbol" in out
    assert "rocblas_sgemm" in out
    assert main(["mappings", "info"]) == 0
    assert "014177bc2e434ce3e834aa4f3d0e2abb1efa9796" in capsys.readouterr().out
