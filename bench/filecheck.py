"""A small FileCheck for hipify-clang's unit tests: run ``hipbot hipify`` the way HIPIFY's
``run_test.sh`` runs hipify-clang (options from the RUN line, ``//`` comments blanked in the output)
and score every CHECK / CHECK-NOT line. Used by ``bench_hipify.py --unit-tests DIR``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_RUN = re.compile(r"%hipify_args\s+(?:(\d+)\s+)?(.*?)\s*%clang_args")
_CHECK = re.compile(r"//\s*(CHECK(?:-NOT|-NEXT|-SAME)?):(.*)$")
_SPACES = re.compile(r"[ \t]+")


@dataclass
class FileScore:
    path: Path
    options: list[str]
    passed: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (line, kind, pattern)

    @property
    def total(self) -> int:
        return self.passed + len(self.failed)


def run_options(test_text: str) -> list[str]:
    """The hipify options of a test's RUN line (``%hipify_args N opt...``)."""
    for line in test_text.splitlines():
        if "RUN:" in line:
            m = _RUN.search(line)
            if m:
                opts = m.group(2).split()
                return opts[: int(m.group(1))] if m.group(1) else opts
    return []


def _pattern(text: str) -> re.Pattern[str]:
    """FileCheck pattern: literal text with {{regex}} pieces; horizontal whitespace canonicalised."""
    parts = re.split(r"\{\{(.*?)\}\}", _SPACES.sub(" ", text.strip()))
    rx = "".join(re.escape(p) if i % 2 == 0 else f"(?:{p})" for i, p in enumerate(parts))
    return re.compile(rx.replace(r"\ ", " "))


def score(test_path: Path, output: str) -> FileScore:
    text = test_path.read_text(encoding="utf-8", errors="replace")
    result = FileScore(test_path, run_options(text))
    # run_test.sh: sed -Ee 's|//.+|// |g'
    lines = [_SPACES.sub(" ", re.sub(r"//.+", "// ", line)) for line in output.splitlines()]
    pos = 0  # next output line to search from
    pending_not: list[tuple[int, re.Pattern[str], str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        m = _CHECK.search(raw)
        if not m:
            continue
        kind, pat_text = m.group(1), m.group(2)
        pat = _pattern(pat_text)
        if kind == "CHECK-NOT":
            pending_not.append((n, pat, pat_text.strip()))
            continue
        found = next((i for i in range(pos, len(lines)) if pat.search(lines[i])), None)
        if kind == "CHECK-NEXT" and found is not None and found != pos:
            found = None
        end = found if found is not None else len(lines)
        for nn, npat, ntext in pending_not:
            if any(npat.search(lines[i]) for i in range(pos, end)):
                result.failed.append((nn, "CHECK-NOT", ntext))
            else:
                result.passed += 1
        pending_not = []
        if found is None:
            result.failed.append((n, kind, pat_text.strip()))
        else:
            result.passed += 1
            pos = found + 1
    for nn, npat, ntext in pending_not:
        if any(npat.search(lines[i]) for i in range(pos, len(lines))):
            result.failed.append((nn, "CHECK-NOT", ntext))
        else:
            result.passed += 1
    return result
