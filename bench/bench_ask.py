"""Quality and latency of `hipbot ask` in extractive mode on bench/questions.jsonl.

Usage: .venv/bin/python bench/bench_ask.py [--db PATH] [--docs PATH] [--questions FILE] [--ingest]

Prints: ingest seconds (with --ingest, into a fresh database), lookup accuracy (HIP name or
"no HIP equivalent" right, and every expected fact present), conceptual key-fact rate with a
right source cited, top-1 source accuracy, recall@5, and p50/p95 latency after the model is loaded.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from hipbot.agents.docs.answers import Answerer
from hipbot.agents.docs.ingest import ingest
from hipbot.agents.docs.store import load_apis
from hipbot.config import find_docs_corpus, load_settings

HERE = Path(__file__).parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an ingested database (default: ingest into a temp one)")
    parser.add_argument("--docs", type=Path, default=find_docs_corpus())
    parser.add_argument("--questions", type=Path, default=HERE / "questions.jsonl")
    parser.add_argument("--verbose", action="store_true", help="print every miss")
    parser.add_argument("--sweep", type=int, default=500, help="random mapping rows to look up (0: none)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hipbot-bench-"))
    settings = load_settings(
        home=tmp, db_path=args.db or tmp / "hipbot.db", docs_path=args.docs, llm_url=None
    )
    if args.db is None:
        summary = ingest(settings, progress=False)
        print(
            f"ingest: {summary.seconds:.1f} s ({summary.documents} docs, {summary.chunks} chunks, "
            f"{summary.embedded} embedded, {summary.api_rows} API rows)"
        )
        again = ingest(settings, progress=False)
        print(f"re-ingest: {again.seconds:.2f} s, {again.embedded} embedded")

    t0 = time.perf_counter()
    engine = Answerer(settings)
    engine.warm_up()
    print(f"engine load (model included): {time.perf_counter() - t0:.1f} s")

    items = [
        json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    latencies, top1, recall5 = [], [], []
    lookups_ok, lookups, concept_ok, concepts = 0, 0, 0, 0
    for item in items:
        start = time.perf_counter()
        answer = engine.ask(item["question"], k=5)
        latencies.append((time.perf_counter() - start) * 1000)
        paths = [s["path"] for s in answer.sources]
        expected = set(item["sources"])
        top1.append(bool(paths) and paths[0] in expected)
        recall5.append(bool(expected & set(paths[:5])))
        text = answer.answer.lower()
        facts_ok = all(f.lower() in text for f in item["facts"])
        if item.get("type") == "lookup":
            lookups += 1
            apis = [a for a in answer.apis if a.get("found")]
            hip_ok = (
                any(a.get("hip") == item["hip"] for a in apis)
                or (item["hip"] is None and "no hip equivalent" in text)
                or any(a.get("cuda") == item.get("api") for a in apis)
            )
            hip_ok = hip_ok or any(item.get("api") in a.get("suggestions", []) for a in answer.apis)
            ok = hip_ok and facts_ok and recall5[-1]
            lookups_ok += ok
        else:
            concepts += 1
            ok = facts_ok and recall5[-1]
            concept_ok += ok
        if args.verbose and not ok:
            print(f"MISS [{answer.mode}] {item['question']}\n  sources: {paths}\n  facts: {item['facts']}")
    print(f"questions: {len(items)} ({lookups} lookups, {concepts} conceptual)")
    print(f"lookups correct: {lookups_ok}/{lookups} = {lookups_ok / max(lookups, 1):.0%}")
    print(
        f"conceptual with key facts + right source: {concept_ok}/{concepts} = {concept_ok / max(concepts, 1):.0%}"
    )
    print(f"top-1 source accuracy: {sum(top1) / len(items):.0%}")
    print(f"recall@5 (an expected source among the first 5): {sum(recall5) / len(items):.0%}")
    print(
        f"latency ms: p50 {statistics.median(latencies):.0f}, p95 {percentile(latencies, 0.95):.0f}, "
        f"max {max(latencies):.0f}"
    )
    if args.sweep:
        sweep(engine, args.sweep, args.verbose)


PHRASINGS = (
    "What is the HIP equivalent of {}?",
    "is {} supported in HIP",
    "{} 在 HIP 中对应什么？",
    "what replaces `{}`",
    "{}",
)


def sweep(engine: Answerer, count: int, verbose: bool) -> None:
    """Look up random rows of the ingested tables by CUDA name (5 phrasings), then back from
    their HIP and roc names."""
    rng = random.Random(7)
    rows = load_apis(engine.db)
    bad = 0
    sample = rng.sample(rows, min(count, len(rows)))
    start = time.perf_counter()
    for i, row in enumerate(sample):
        answer = engine.ask(PHRASINGS[i % len(PHRASINGS)].format(row.cuda))
        ok = any(a.get("cuda") == row.cuda for a in answer.apis) and (
            f"`{row.hip}`" in answer.answer if row.hip else "no HIP equivalent" in answer.answer
        )
        ok = ok and (row.roc is None or f"`{row.roc}`" in answer.answer)
        ok = (
            ok
            # the row's own table page is cited (a name in two tables cites both)
            and any(s["path"].startswith(row.table.removesuffix("HIP.md")) for s in answer.sources)
        )
        for name, side in ((row.hip, "hip"), (row.roc, "roc")):
            if name and name != row.cuda:
                back = engine.ask(f"What is the CUDA equivalent of {name}?")
                ok = ok and any(a.get(side) == name for a in back.apis) and f"`{row.cuda}`" in back.answer
        bad += not ok
        if verbose and not ok:
            print(f"SWEEP MISS {row.cuda} -> {row.hip} / {row.roc}")
    ms = (time.perf_counter() - start) * 1000 / max(len(sample), 1)
    print(
        f"lookup sweep: {len(sample) - bad}/{len(sample)} random table rows right both ways ({ms:.1f} ms per row)"
    )


if __name__ == "__main__":
    main()
