"""``hipbot ingest``, ``hipbot ask`` and ``hipbot answers feedback``: thin click adapters over
ingest.py, answers.py and feedback.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hipbot.agents.docs.labels import label, language_of
from hipbot.clihelp import Command, Group
from hipbot.config import load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _


@click.command("ingest", cls=Command)
@click.option(
    "--docs",
    type=click.Path(path_type=Path, file_okay=False),
    help=N_("Corpus folder holding HIPIFY/docs and HIP/docs (default: HIPBOT_DOCS or ../shared/hip-docs)."),
)
@click.option(
    "--download", is_flag=True, help=N_("Fetch the docs from the upstream ROCm repositories (cached).")
)
@click.option(
    "--ref", help=N_("With --download: a release tag such as rocm-6.3.0 (default: the pinned commits).")
)
@click.option("--json", "as_json", is_flag=True, help=N_("Print the summary as JSON."))
@click.option("--quiet", is_flag=True, help=N_("No progress bars."))
def ingest(docs: Path | None, download: bool, ref: str | None, as_json: bool, quiet: bool) -> None:
    """Read the HIP docs and HIPIFY mapping tables into the database (incremental)."""
    from hipbot.agents.docs.ingest import ingest as run_ingest

    summary = run_ingest(load_settings(), docs=docs, download=download, ref=ref, progress=not quiet)
    click.echo(json.dumps(summary.to_dict()) if as_json else str(summary))


@click.command("ask", cls=Command)
@click.argument("question", required=False)
@click.option("--json", "as_json", is_flag=True, help=N_("Print the answer as one JSON object."))
@click.option(
    "--k", default=5, show_default=True, type=click.IntRange(1, 20), help=N_("Passages to retrieve.")
)
@click.option(
    "--questions",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help=N_(
        'A JSONL file (or - for stdin), one {"question": ...} per line; prints one JSON answer per line.'
    ),
)
@click.option("--full", is_flag=True, help=N_("Also print the full passages the answer was composed from."))
def ask(question: str | None, as_json: bool, k: int, questions: Path | None, full: bool) -> None:
    """Answer a CUDA->HIP porting question from the docs, with sources."""
    from hipbot.agents.docs.answers import get_answerer

    if questions is not None:
        if question:
            raise HipbotError(_("give either a QUESTION or --questions FILE, not both"))
        _batch(questions, k)
        return
    if question is None:
        raise HipbotError(_("no question given"), hint='hipbot ask "what replaces cudaMemcpyToSymbolAsync?"')
    answer = get_answerer(load_settings()).ask(question, k=k)
    if as_json:
        click.echo(json.dumps(answer.to_dict(), ensure_ascii=False))
        return
    lang = language_of(question)
    click.echo(answer.answer)
    if answer.sources:
        click.echo("\n" + label("sources", lang))
        for n, s in enumerate(answer.sources, 1):
            click.echo(f"  [{n}] {s['path']} \u203a {s['section']}\n      {s['url']}")
    if full and answer.more:
        click.echo(f"\n{label('more', lang)}:\n{answer.more}")
    click.secho(f"({answer.mode})", dim=True)


def _batch(path: Path, k: int) -> None:
    """One JSON line out per question line in, in order (blank lines are not questions and are
    skipped); a bad line yields an error object, never an abort."""
    from hipbot.agents.docs.answers import get_answerer

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HipbotError(_("cannot read {path}: {error}").format(path=path, error=exc)) from exc
    answerer = get_answerer(load_settings())  # fails once, clearly, if nothing is ingested
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if isinstance(item, str):
                item = {"question": item}
            if not isinstance(item, dict) or "question" not in item:
                raise HipbotError(_('each line must be a JSON object with a "question" field'))
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


@click.group("answers", cls=Group)
def answers() -> None:
    """Look at the answers the bot gave: the votes people left on them."""


@answers.command("feedback")
@click.option(
    "--limit", type=click.IntRange(1), default=20, show_default=True, help=N_("How many answers to show.")
)
@click.option("--negative", is_flag=True, help=N_("Only answers voted down on balance."))
@click.option("--json", "as_json", is_flag=True, help=N_("One JSON object per answer."))
def feedback(limit: int, negative: bool, as_json: bool) -> None:
    """The voted answers, worst first (net score, then down votes), with question and answer."""
    from hipbot.agents.docs.feedback import voted

    rows = voted(load_settings().database, limit=limit, only_negative=negative)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row.to_dict(), ensure_ascii=False))
        return
    if not rows:
        click.echo(_("no votes yet"))
        return
    for row in rows:
        click.echo(
            f"#{row.answer_id}  "
            + _("score {score:+d} ({votes} votes, {down} down)").format(
                score=row.score, votes=row.votes, down=row.down
            )
            + f"  [{row.mode}]"
        )
        click.echo("  " + _("Q: {question}").format(question=row.question))
        shown = row.answer if len(row.answer) <= 400 else row.answer[:399] + "\u2026"
        click.echo("  " + _("A: {answer}").format(answer=shown.replace("\n", "\n     ")))
        if row.sources:
            click.echo("  " + _("sources: {sources}").format(sources=", ".join(row.sources[:3])))
        click.echo("")
