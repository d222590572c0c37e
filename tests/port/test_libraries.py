"""The cause named for a library's API used with no header of it included: the library when it is
not installed, the missing include when it is."""

from __future__ import annotations

from pathlib import Path

from hipbot.agents.port.libraries import identifier_cause


def test_library_api_without_its_header(tmp_path: Path) -> None:
    missing = identifier_cause("hipblasHandle_t", include_dirs=(str(tmp_path),))
    assert missing is not None and missing.kind == "library"
    assert missing.text.startswith("needs hipBLAS, which is not installed (apt install hipblas-dev)")
    (tmp_path / "hiprand").mkdir()
    installed = identifier_cause("hiprandState_t", include_dirs=(str(tmp_path),))
    assert installed is not None and installed.kind == "not-valid-cuda"
    assert "the unit includes no hipRAND header" in installed.text
    assert identifier_cause("hipMalloc", include_dirs=(str(tmp_path),)) is None
