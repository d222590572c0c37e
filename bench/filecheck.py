"""A small FileCheck for hipify-clang's unit tests: run ``hipbot hipify`` the way HIPIFY's
``run_test.sh`` runs hipify-clang (options from the RUN line, ``//`` comments blanked in the output)
and score every check line. Used by ``bench_hipify.py --unit-tests DIR``.

It follows LLVM FileCheck's matching rules so the figures mean what FileCheck would say:

* a directive is ``PREFIX:``, ``PREFIX-NEXT:``, ``-SAME:``, ``-NOT:``, ``-DAG:``, ``-EMPTY:``,
  ``-LABEL:`` or ``-COUNT-n:`` with the prefix (``CHECK`` unless the RUN line names
  ``--check-prefix``/``--check-prefixes``) not preceded by a word character; the first directive
  on a line wins, ``CHECK-NEXT :`` (a space before the colon) is no directive;
* matching is by position, not by line: a CHECK may match later on the line of the previous match,
  CHECK-NEXT must match on the next line, CHECK-SAME on the same line after the previous match,
  CHECK-EMPTY needs the next line empty, CHECK-NOT patterns must not occur between the previous
  match and the next one, a run of CHECK-DAG lines matches in any order without overlapping;
* horizontal whitespace runs in input and pattern count as one space; leading and trailing blanks
  of a pattern are dropped; ``{{regex}}`` pieces are regular expressions, ``[[NAME:regex]]``
  defines a variable and ``[[NAME]]`` uses it.

Unlike FileCheck, which stops at the first failure, scoring goes on after a failed check (from the
last matched position) so every check gets a verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_RUN = re.compile(r"%hipify_args\s+(?:(\d+)\s+)?(.*?)\s*%clang_args")
_PREFIX_OPT = re.compile(r"--check-prefix(?:es)?[= ]([\w,-]+)")
_SPACES = re.compile(r"[ \t]+")
_SUFFIX = r"(?:-(NEXT|SAME|NOT|DAG|EMPTY|LABEL|COUNT-\d+))?"


@dataclass
class FileScore:
    path: Path
    options: list[str]
    passed: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (line, kind, pattern)

    @property
    def total(self) -> int:
        return self.passed + len(self.failed)


@dataclass
class _Check:
    line: int
    kind: str  # CHECK, NEXT, SAME, NOT, DAG, EMPTY, LABEL, COUNT-n
    text: str


def run_options(test_text: str) -> list[str]:
    """The hipify options of a test's RUN line (``%hipify_args N opt...``)."""
    for line in test_text.splitlines():
        if "RUN:" in line:
            m = _RUN.search(line)
            if m:
                opts = m.group(2).split()
                return opts[: int(m.group(1))] if m.group(1) else opts
    return []


def check_prefixes(test_text: str) -> list[str]:
    """The FileCheck prefixes the RUN line asks for (``CHECK`` by default)."""
    for line in test_text.splitlines():
        if "RUN:" in line:
            m = _PREFIX_OPT.search(line)
            if m:
                return [p for p in m.group(1).split(",") if p]
    return ["CHECK"]


def parse_checks(test_text: str, prefixes: list[str]) -> list[_Check]:
    alternatives = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    directive = re.compile(rf"(?<![\w-])({alternatives}){_SUFFIX}:")
    checks = []
    for n, raw in enumerate(test_text.splitlines(), 1):
        m = directive.search(raw)
        if m:
            checks.append(_Check(n, m.group(2) or "CHECK", raw[m.end() :]))
    return checks


class _Pattern:
    """One check's pattern, compiled against the variables defined so far."""

    def __init__(self, text: str, variables: dict[str, str]):
        self.defines: list[str] = []
        out: list[str] = []
        text = _SPACES.sub(" ", text.strip())
        i = 0
        while i < len(text):
            if text.startswith("{{", i):
                end = text.find("}}", i + 2)
                if end < 0:
                    out.append(re.escape(text[i:]))
                    break
                out.append(f"(?:{text[i + 2 : end]})")
                i = end + 2
            elif text.startswith("[[", i) and (end := text.find("]]", i + 2)) > 0:
                body = text[i + 2 : end]
                name, colon, rx = body.partition(":")
                if colon:
                    self.defines.append(name)
                    out.append(f"(?P<{name}>{rx})")
                else:
                    out.append(re.escape(variables.get(name, "\0undefined\0")))
                i = end + 2
            else:
                nxt = min((j for j in (text.find("{{", i), text.find("[[", i)) if j >= 0), default=len(text))
                if nxt == i:
                    nxt = i + 2
                out.append(re.escape(text[i:nxt]))
                i = nxt
        try:
            self.rx: re.Pattern[str] | None = re.compile("".join(out))
        except re.error:
            self.rx = None

    def search(self, buf: str, start: int, end: int) -> re.Match[str] | None:
        return self.rx.search(buf, start, end) if self.rx else None


class _Input:
    """The hipified output as one buffer, with line starts for line arithmetic."""

    def __init__(self, output: str):
        # run_test.sh: sed -Ee 's|//.+|// |g', then FileCheck canonicalises blanks.
        lines = [_SPACES.sub(" ", re.sub(r"//.+", "// ", line)) for line in output.splitlines()]
        self.buf = "\n".join(lines) + "\n"
        self.starts = [0]
        for line in lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def line_of(self, pos: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def line_end(self, line: int) -> int:
        return self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.buf)


def score(test_path: Path, output: str) -> FileScore:
    text = test_path.read_text(encoding="utf-8", errors="replace")
    result = FileScore(test_path, run_options(text))
    inp = _Input(output)
    variables: dict[str, str] = {}
    pos = 0  # where the next positive check starts searching
    last_line = -1  # line of the last positive match (-1: before the input)
    pending_not: list[_Check] = []
    checks = parse_checks(text, check_prefixes(text))
    i = 0
    while i < len(checks):
        chk = checks[i]
        if chk.kind == "NOT":
            pending_not.append(chk)
            i += 1
            continue
        if chk.kind == "DAG":
            group = []
            while i < len(checks) and checks[i].kind == "DAG":
                group.append(checks[i])
                i += 1
            taken: list[tuple[int, int]] = []
            region_end = pos
            for dag in group:
                pat = _Pattern(dag.text, variables)
                start, m = pos, None
                while (m := pat.search(inp.buf, start, len(inp.buf))) is not None:
                    if not any(m.start() < e and s < m.end() for s, e in taken):
                        break
                    start = m.start() + 1
                if m is None:
                    result.failed.append((dag.line, "CHECK-DAG", dag.text.strip()))
                    continue
                result.passed += 1
                taken.append((m.start(), m.end()))
                variables.update({k: m.group(k) for k in pat.defines})
                region_end = max(region_end, m.end())
            _settle_not(result, pending_not, inp, variables, pos, min((s for s, _ in taken), default=pos))
            pending_not = []
            if taken:
                pos = region_end
                last_line = inp.line_of(region_end - 1 if region_end > 0 else 0)
            continue
        i += 1
        kind = chk.kind
        match: tuple[int, int] | None = None
        if kind == "EMPTY":
            nxt = last_line + 1
            if nxt < len(inp.starts) - 1 and inp.line_end(nxt) == inp.starts[nxt]:
                match = (inp.starts[nxt], inp.starts[nxt])
        else:
            pat = _Pattern(chk.text, variables)
            count = int(kind.split("-")[1]) if kind.startswith("COUNT") else 1
            start, end = pos, len(inp.buf)
            first = None
            for _ in range(count):
                m = pat.search(inp.buf, start, end)
                if m is None:
                    first = None
                    break
                first = first or m
                variables.update({k: m.group(k) for k in pat.defines})
                start = m.end() if m.end() > m.start() else m.end() + 1
                match = (first.start(), m.end())
            # FileCheck takes the first match, then checks its line.
            wanted = {"NEXT": last_line + 1, "SAME": last_line}.get(kind)
            if first is not None and wanted is not None and inp.line_of(first.start()) != wanted:
                first = None
            if first is None:
                match = None
        label = "CHECK" if kind == "CHECK" else f"CHECK-{kind}"
        _settle_not(result, pending_not, inp, variables, pos, match[0] if match else len(inp.buf))
        pending_not = []
        if match is None:
            result.failed.append((chk.line, label, chk.text.strip()))
            continue
        result.passed += 1
        pos = match[1]
        last_line = inp.line_of(max(match[1] - 1, match[0]))
    _settle_not(result, pending_not, inp, variables, pos, len(inp.buf))
    return result


def _settle_not(
    result: FileScore, nots: list[_Check], inp: _Input, variables: dict[str, str], start: int, end: int
) -> None:
    for chk in nots:
        if _Pattern(chk.text, variables).search(inp.buf, start, end):
            result.failed.append((chk.line, "CHECK-NOT", chk.text.strip()))
        else:
            result.passed += 1
