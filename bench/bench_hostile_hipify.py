"""Translation time of sources written to be slow (issue 15.8), before and after the fix.

    .venv/bin/python bench/bench_hostile_hipify.py                       # this checkout
    .venv/bin/python bench/bench_hostile_hipify.py --before-ref e2b8e77~1  # also an older translator
    .venv/bin/python bench/bench_hostile_hipify.py --sizes 1000 2000 20000 200000

The issue's case is ``k<<<g,b>>>(`` repeated (``hipify --hip-kernel-execution-syntax``): each
launch's argument list never closes. Before, each launch re-read the rest of the file (18 s for
1,000 launches, 66 s for 2,000, unfinished after 5 min for 20,000). The other cases repeat what
made other parts quadratic: a call whose arguments are rewritten, a lint's look at its line, a
launch in each of many macros, template arguments looked for back over earlier launches, unknown
names. Each figure is one ``translate()`` call (lints included), in a fresh process per case so
that an older translator can be stopped at ``--timeout``. Linear: 10x the size, about 10x the time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = {
    "unclosed launches k<<<g,b>>>(": ("k<<<g,b>>>(", True),
    "launches on one line k<<<g,b>>>(x);": ("k<<<g,b>>>(x);", True),
    "unclosed calls cudaMemcpyToSymbol(": ("cudaMemcpyToSymbol(", False),
    "lint on one line __shfl_down_sync(": ("__shfl_down_sync(", False),
    "a launch per macro #define L(k) k<<<1,1>>>()": ("#define L(k) k<<<1,1>>>()\n", True),
    "template look-back > <<<1,1>>>()": ("> <<<1,1>>>()", True),
    "distinct unknown names cudaNotAnApiN();": ("", False),
}
# From the issue (the CLI on this machine, before the fix): launches -> seconds (None: > 5 min).
ISSUE_BEFORE = {1000: 18.0, 2000: 66.0, 20000: None}

_RUN = """
import json, time
if {path!r}:
    import hipbot.agents as agents
    agents.__path__.insert(0, {path!r})
from hipbot.agents.hipify.translate import HipifyOptions, translate
piece, hip, n = {piece!r}, {hip!r}, {n}
text = "".join(f"cudaNotAnApi{{i}}(); " for i in range(n)) if not piece else piece * n
start = time.process_time()
translate(text, HipifyOptions(hip_kernel_execution_syntax=hip), "m.cu")
print(json.dumps(time.process_time() - start))
"""


def measure(agents_dir: str, piece: str, hip: bool, n: int, timeout: float) -> float | None:
    """CPU seconds of one translation in a fresh process (None when it ran past ``timeout``)."""
    code = _RUN.format(path=agents_dir, piece=piece, hip=hip, n=n)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    return float(json.loads(out.stdout))


def export_agents(ref: str, into: Path) -> str:
    """``agents/hipify`` as it was at ``ref``, as a folder that shadows this checkout's."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "agents/hipify"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return str(into / "agents")


def _fmt(seconds: float | None, timeout: float) -> str:
    return f"> {timeout:g} s" if seconds is None else f"{seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 20000])
    parser.add_argument("--before-ref", help="also time the translator of this git commit")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per run")
    parser.add_argument("--cases", nargs="*", help="only the cases whose name holds one of these words")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = export_agents(args.before_ref, Path(tmp)) if args.before_ref else None
        print("issue 15 figures (before the fix, CLI): " + ", ".join(
            f"{n:,} launches {_fmt(s, 300)}" for n, s in ISSUE_BEFORE.items()
        ))  # fmt: skip
        for name, (piece, hip) in CASES.items():
            if args.cases and not any(word in name for word in args.cases):
                continue
            for n in args.sizes:
                after = measure("", piece, hip, n, args.timeout)
                line = f"{name:48s} n={n:>7,}  after {_fmt(after, args.timeout):>9s}"
                if before is not None:
                    line += f"  before ({args.before_ref}) {_fmt(measure(before, piece, hip, n, args.timeout), args.timeout):>9s}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
