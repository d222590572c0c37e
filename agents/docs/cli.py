"""``hipbot ingest`` and ``hipbot ask``: thin click adapters over ingest.py and answers.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hipbot.config import load_settings
from hipbot.errors import HipbotError


@click.command("ingest")
@click.option(
    "--docs",
    type=click.Path(path_type=Path, file_okay=False),
    help="Corpus folder holding HIPIFY/docs and HIP/docs (default: HIPBOT_DOCS or ../shared/hip-docs).",
)
@click.option("--download", is_flag=True, help="Fetch the docs from the upstream ROCm repositories (cached).")
@click.option(
    "--ref", help="With --download: a release tag such as rocm-6.3.0 (default: the pinned commits)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def ingest(docs: Path | None, download: bool, ref: str | None, as_json: bool, quiet: bool) -> None:
    """Read the HIP docs and HIPIFY mapping tables into the database (incremental)."""
    from hipbot.agents.docs.ingest import ingest as run_ingest

    summary = run_ingest(load_settings(), docs=docs, download=download, ref=ref, progress=not quiet)
    click.echo(json.dumps(summary.to_dict()) if as_json else str(summary))


@click.command("ask")
@click.argument("question", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as one JSON object.")
@click.option("--k", default=5, show_default=True, type=click.IntRange(1, 20), help="Passages to retrieve.")
@click.option(
    "--questions",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help='A JSONL file (or - for stdin), one {"question": ...} per line; prints one JSON answer per line.',
)
def ask(question: str | None, as_json: bool, k: int, questions: Path | None) -> None:
    """Answer a CUDA->HIP porting question from the docs, with sources."""
    from hipbot.agents.docs.answers import get_answerer

    if questions is not None:
        if question:
            raise HipbotError("give either a QUESTION or --questions FILE, not both")
        _batch(questions, k)
        return
    if question is None:
        raise HipbotError("no question given", hint='hipbot ask "what replaces cudaMemcpyToSymbolAsync?"')
    answer = get_answerer(load_settings()).ask(question, k=k)
    if as_json:
        click.echo(json.dumps(answer.to_dict(), ensure_ascii=False))
        return
    click.echo(answer.answer)
    if answer.sources:
        click.echo("\nSources:")
        for s in answer.sources:
            click.echo(f"  - {s['path']} \u203a {s['section']}\n    {s['url']}")
    click.secho(f"({answer.mode})", dim=True)


def _batch(path: Path, k: int) -> None:
    """One JSON line out per question line in, in order (blank lines are not questions and are
    skipped); a bad line yields an error object, never an abort."""
    from hipbot.agents.docs.answers import get_answerer

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HipbotError(f"cannot read {path}: {exc}") from exc
    answerer = get_answerer(load_settings())  # fails once, clearly, if nothing is ingested
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if isinstance(item, str):
                item = {"question": item}
            if not isinstance(item, dict) or "question" not in item:
                raise HipbotError('each line must be a JSON object with a "question" field')
            line_k = item.get("k", k)
            out = answerer.ask(item["question"], k=line_k).to_dict()
        except json.JSONDecodeError as exc:
            out = {"error": f"line {number} is not valid JSON: {exc.msg}", "line": number}
        except HipbotError as exc:
            out = {"error": exc.message, "line": number}
            if exc.hint:
                out["hint"] = exc.hint
        except Exception as exc:  # a bug on one line must not lose the answers to the others
            out = {"error": f"internal error: {type(exc).__name__}: {exc}", "line": number}
        click.echo(json.dumps(out, ensure_ascii=False))
        sys.stdout.flush()
