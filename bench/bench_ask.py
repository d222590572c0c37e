"""Quality, length and latency of `hipbot ask` in extractive (composed) mode.

Usage: .venv/bin/python bench/bench_ask.py [--db PATH] [--docs PATH] [--questions FILE ...] [--sweep N]

Three kinds of question files:
- the earlier sets (questions.jsonl, questions_holdout.jsonl, questions_blind.jsonl):
  {"question", "type": "lookup"|..., "sources", "facts", "api", "hip"}; correct = every fact in the
  answer (the `answer` field, not "More") and an expected source among the first 5;
- the real sets (questions_real.jsonl to questions_real10.jsonl, real questions from ROCm/HIP,
  HIPIFY, ROCm and LLM-on-ROCm issues; real3 was never tuned on, real4 to real10 were measured at
  the start and the end of the session each came in, real5 also once for attribution; real6's
  misses were read in the session after its own, real7's and real8's two sessions after; real9's
  and real10's were never read):
  {"id", "question", "lang", "kind", "reference", "expect", "source_url"}; correct = every expected term in the answer, cited = the answer has sources.
  A question asked in a thread that a porting note was written from is also counted apart
  ("thread:note source" against "thread:unseen").
- questions_offtopic.jsonl: chat messages off the field (greetings, other topics, injection
  attempts, spam) and short questions of the field, {"id", "question", "lang", "kind":
  "off-topic"|"on-topic", "origin": "tuned"|"unseen"}; right = an off-topic message declined (the
  "nothing" answer, no sources), an on-topic one answered with sources. "tuned" messages are the
  ones ``answers.OFF_TOPIC`` was read from; "unseen" ones were written apart and never tuned on.

Prints per set: correct(+cited) overall, by kind and by language, answer length median/p90
(characters of the `answer` field), latency p50/p95 after the model is loaded, and with --ingest
(no --db) the ingest time into a fresh database. --sweep N also looks up N random mapping rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from hipbot.agents.docs.answers import Answer, Answerer
from hipbot.agents.docs.ingest import ingest
from hipbot.agents.docs.labels import label
from hipbot.agents.docs.notes import note_files, read_note
from hipbot.agents.docs.store import load_apis
from hipbot.config import find_docs_corpus, load_settings

HERE = Path(__file__).parent
SETS = (
    "questions.jsonl",
    "questions_holdout.jsonl",
    "questions_blind.jsonl",
    "questions_real.jsonl",
    "questions_real2.jsonl",
    "questions_real3.jsonl",
    "questions_real4.jsonl",
    "questions_real5.jsonl",
    "questions_real6.jsonl",
    "questions_real7.jsonl",
    "questions_real8.jsonl",
    "questions_real9.jsonl",
    "questions_real10.jsonl",
    "questions_offtopic.jsonl",
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def judge_earlier(item: dict, answer: Answer) -> tuple[str, bool]:
    """(kind, correct) for an item of the earlier sets."""
    paths = [s["path"] for s in answer.sources]
    cited = bool(set(item["sources"]) & set(paths[:5]))
    text = answer.answer.lower()
    facts_ok = all(f.lower() in text for f in item["facts"])
    if item.get("type") == "lookup":
        apis = [a for a in answer.apis if a.get("found")]
        hip_ok = (
            any(a.get("hip") == item["hip"] for a in apis)
            or (item["hip"] is None and "no hip equivalent" in text)
            or any(a.get("cuda") == item.get("api") for a in apis)
            or any(item.get("api") in a.get("suggestions", []) for a in answer.apis)
        )
        return "lookup", hip_ok and facts_ok and cited
    return "conceptual", facts_ok and cited


def _thread(url: str) -> str:
    """A GitHub thread's URL in one spelling (ROCm/ROCm moved to ROCm/legacy-rocm-build, a pull
    request is an issue, ggerganov/llama.cpp is ggml-org/llama.cpp)."""
    url = url.lower().rstrip("/").split("#")[0].replace("/pull/", "/issues/")
    return url.replace("/rocm/rocm/", "/rocm/legacy-rocm-build/").replace("/ggerganov/", "/ggml-org/")


@functools.cache
def note_threads() -> set[str]:
    """The threads the packaged porting notes were written from: a question asked in one of them
    is reported apart ("thread:note source"), its answer was in the thread the note quotes."""
    return {_thread(url) for rel, path in note_files() for url in read_note(path, rel).sources}


def judge_real(item: dict, answer: Answer) -> tuple[str, bool]:
    text = answer.answer.lower()
    correct = all(term.lower() in text for term in item["expect"])
    return item["kind"], correct and bool(answer.sources)


def judge_field(item: dict, answer: Answer) -> tuple[str, bool]:
    """An off-topic message is right when declined (the "nothing" answer, no sources); a short
    question of the field when answered with sources."""
    declined = answer.answer == label("nothing", item["lang"]) and not answer.sources
    return item["kind"], declined if item["kind"] == "off-topic" else not declined and bool(answer.sources)


def run_set(engine: Answerer, path: Path, verbose: bool) -> dict:
    items = load(path)
    real = "expect" in items[0]
    field = "origin" in items[0]
    noted = note_threads()
    latencies: list[float] = []
    lengths: list[int] = []
    tally: dict[str, list[int]] = {}
    more_hits = 0
    for item in items:
        start = time.perf_counter()
        answer = engine.ask(item["question"], k=5)
        latencies.append((time.perf_counter() - start) * 1000)
        lengths.append(len(answer.answer))
        if field:
            kind, ok = judge_field(item, answer)
        else:
            kind, ok = judge_real(item, answer) if real else judge_earlier(item, answer)
        groups = [kind, "all"]
        if field:
            groups += [f"{kind} {item['origin']}", f"lang:{item['lang']}"]
        if real:
            seen = _thread(item["source_url"]) in noted
            groups += [f"lang:{item['lang']}", "thread:note source" if seen else "thread:unseen"]
        for group in groups:
            tally.setdefault(group, [0, 0])
            tally[group][0] += ok
            tally[group][1] += 1
        if real and not ok:
            full = f"{answer.answer}\n{answer.more}".lower()
            more_hits += all(t.lower() in full for t in item["expect"])
        if verbose and not ok:
            print(f"MISS [{answer.mode}] {item.get('id', '')} {item['question'][:100]}")
            print(
                f"  expected: {item.get('expect', item.get('facts', item.get('kind')))}\n"
                f"  answer: {answer.answer[:300]!r}"
            )
    return {
        "set": path.name,
        "questions": len(items),
        "correct": {k: f"{v[0]}/{v[1]} = {v[0] / v[1]:.0%}" for k, v in sorted(tally.items())},
        "misses_found_in_more": more_hits if real else None,
        "answer_chars_median": statistics.median(lengths),
        "answer_chars_p90": percentile(lengths, 0.9),
        "latency_ms_p50": round(statistics.median(latencies), 1),
        "latency_ms_p95": round(percentile(latencies, 0.95), 1),
    }


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
        phrasing = PHRASINGS[i % len(PHRASINGS)]
        answer = engine.ask(phrasing.format(row.cuda))
        lang = "zh" if "对应" in phrasing else "en"
        none = {"en": f"`{row.cuda}` has no HIP equivalent", "zh": f"`{row.cuda}` 没有 HIP 对应项"}[lang]
        ok = any(a.get("cuda") == row.cuda for a in answer.apis) and (
            f"`{row.hip}`" in answer.answer if row.hip else none in answer.answer
        )
        ok = ok and (row.roc is None or f"`{row.roc}`" in answer.answer)
        # the row's own table page is cited (a name in two tables cites both)
        ok = ok and any(s["path"].startswith(row.table.removesuffix("HIP.md")) for s in answer.sources)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an ingested database (default: ingest into a temp one)")
    parser.add_argument("--docs", type=Path, default=find_docs_corpus())
    parser.add_argument("--questions", type=Path, nargs="*", default=[HERE / name for name in SETS])
    parser.add_argument("--verbose", action="store_true", help="print every miss")
    parser.add_argument("--sweep", type=int, default=500, help="random mapping rows to look up (0: none)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hipbot-bench-"))
    settings = load_settings(
        home=tmp, db_path=args.db or tmp / "hipbot.db", docs_path=args.docs, llm_url=None
    )
    if args.db is None:
        wall, cpu = time.perf_counter(), time.process_time()
        summary = ingest(settings, progress=False)
        print(
            f"ingest: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU "
            f"({summary.documents} docs, {summary.chunks} chunks, {summary.embedded} embedded, "
            f"{summary.api_rows} API rows)"
        )
        again = ingest(settings, progress=False)
        print(f"re-ingest: {again.seconds:.2f} s, {again.embedded} embedded")

    t0 = time.perf_counter()
    engine = Answerer(settings)
    engine.warm_up()
    print(f"engine load (model included): {time.perf_counter() - t0:.1f} s")
    for path in args.questions:
        print(json.dumps(run_set(engine, path, args.verbose), ensure_ascii=False))
    if args.sweep:
        sweep(engine, args.sweep, args.verbose)


if __name__ == "__main__":
    main()
