"""``hipbot port`` on real CUDA projects: translation units compiling for the AMD target after
hipify alone, after the port's rules and with the model (when HIPBOT_LLM_URL is set), the causes
of what still fails, and the port's own time (everything but hipcc) against the project's size.

    .venv/bin/python bench/bench_port.py --projects /work/realprojects [--only NAME ...] [--jobs 2]

Each folder under --projects is one project (kept outside the repo; bench/README.md lists them
with their commits). Prints one markdown row per project and the totals; --json FILE keeps every
unit's record.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hipbot.agents.hipify.tree import SOURCE_SUFFIXES
from hipbot.agents.port.compiler import CompileSettings
from hipbot.agents.port.pipeline import PortOptions, port
from hipbot.config import load_settings


def source_lines(root: Path) -> int:
    return sum(
        p.read_bytes().count(b"\n")
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(SOURCE_SUFFIXES)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--projects", type=Path, default=Path("/work/realprojects"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--arch", default="gfx90a")
    ap.add_argument("--rocm", default="auto")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    settings = load_settings()
    model = None
    if settings.llm_url:
        from hipbot.agents.port.llm import model_for

        model = model_for(settings, CompileSettings(args.arch))
    names = sorted(p.name for p in args.projects.iterdir() if p.is_dir())
    if args.only:
        names = [n for n in names if n in args.only]
    totals = dict.fromkeys(("units", "hipify", "rules", "model", "nolib", "nolib_rules", "lines"), 0)
    causes: dict[str, int] = {}
    records = {}
    print(
        "| project | lines | units | hipify alone | port rules | with model | libraries installed: rules | port s (no hipcc) | hipcc s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        src = args.projects / name
        out = Path(tempfile.mkdtemp(prefix="bench-port-")) / "out"
        start = time.monotonic()
        report = port(src, out, PortOptions(arch=args.arch, rocm=args.rocm, jobs=args.jobs), model)
        wall = time.monotonic() - start
        s = report.summary()
        lib_missing = sum(
            u.status == "failed" and u.cause and u.cause.kind == "library" for u in report.units
        )
        installed = s["units"] - lib_missing
        lines = source_lines(src)
        for u in report.units:
            if u.status == "failed" and u.cause:
                causes[u.cause.kind] = causes.get(u.cause.kind, 0) + 1
        model_cell = str(s["compiled_after_model"]) if model else "-"
        print(
            f"| {name} | {lines:,} | {s['units']} | {s['compiled_after_translation']} | {s['compiled_after_rules']} "
            f"| {model_cell} | {s['compiled_after_rules']}/{installed} | {s['seconds_port']:.2f} | {s['seconds_hipcc']:.0f} |",
            flush=True,
        )
        for key, value in (
            ("units", s["units"]),
            ("hipify", s["compiled_after_translation"]),
            ("rules", s["compiled_after_rules"]),
            ("model", s["compiled_after_model"]),
            ("nolib", installed),
            ("nolib_rules", s["compiled_after_rules"]),
            ("lines", lines),
        ):
            totals[key] += value
        records[name] = {**report.to_dict(), "wall_seconds": wall}
        if args.json:  # after each project: a long run's records survive an interruption
            args.json.write_text(json.dumps(records, indent=1))
        shutil.rmtree(out.parent, ignore_errors=True)
    t = totals
    n = max(t["units"], 1)
    print(
        f"| **total** | {t['lines']:,} | {t['units']} | {t['hipify']} ({100 * t['hipify'] / n:.0f} %) "
        f"| {t['rules']} ({100 * t['rules'] / n:.0f} %) | {t['model'] if model else '-'} "
        f"| {t['nolib_rules']}/{t['nolib']} ({100 * t['nolib_rules'] / max(t['nolib'], 1):.0f} %) | | |"
    )
    print("still failing, by cause:", dict(sorted(causes.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
