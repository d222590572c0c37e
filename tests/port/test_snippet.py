"""The bot button's loop on one snippet (real hipcc): kept by key, ported, diff and result."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.agents.port.snippet import port_snippet, recall, remember
from hipbot.errors import HipbotError, NotFound

SNIPPET = (
    "#include <cuda_runtime.h>\n__global__ void sum(float* x) {\n  float v = x[threadIdx.x];\n"
    "  v += __shfl_down_sync(0xffffffff, v, 1);\n  x[0] = v;\n}\n"
)


def test_keys(tmp_path: Path) -> None:
    key = remember(SNIPPET, tmp_path)
    assert recall(key, tmp_path) == SNIPPET and remember(SNIPPET, tmp_path) == key
    with pytest.raises(NotFound):
        recall("0" * 16, tmp_path)
    with pytest.raises(HipbotError, match="not a snippet key"):
        recall("../../etc/passwd", tmp_path)


@pytest.mark.hipcc
def test_snippet_repaired_with_diff() -> None:
    result = port_snippet(SNIPPET, rocm="5.2")
    assert result.compiled and result.stage == "rules" and result.cause is None
    assert '+#include "hip_compat.h"' in result.diff and "__shfl_down_sync" in result.text
    bad = port_snippet('#include "../../secret.h"\n__global__ void k() {}\n', rocm="5.2")
    assert not bad.compiled and "outside the project" in bad.cause
