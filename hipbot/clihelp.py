"""``--help`` pages in the terminal's language.

click words its own parts of a page ("Usage:", "Options", "[default: ...]", "Show this message and
exit.") through gettext's process-wide domain, which hipbot leaves alone: one process speaks several
languages (the bot serves members of both). So the commands are of the classes below instead: when
a page is written they look up the command's help, each option's help and click's own words in
hipbot's catalogue, in the current language. The English texts stay where they are written: option
help marked with ``N_()``, command help in the docstring (``hipbot.i18n_extract`` puts docstrings
in the catalogue, as click shows them).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable

import click

from hipbot.i18n import N_, _, columns

# click's own words on a help page, looked up by their English text
CLICK_WORDS = frozenset(
    (
        N_("Options"),
        N_("Commands"),
        N_("Positional arguments"),
        N_("Show this message and exit."),
        N_("Show the version and exit."),
    )
)


# a wide (CJK) character, or a run of other non-space characters: where a line may break
_TOKEN = re.compile(
    r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]|[^\s\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]+|\s+"
)
_NO_LINE_START = frozenset("，。；：、）」』！？")


def wrap_columns(paragraph: str, width: int) -> list[str]:
    """``paragraph`` in lines of at most ``width`` terminal columns, broken at spaces or between
    wide characters (never before closing punctuation), as click's wrapping (which breaks at
    spaces and counts characters) cannot do for Chinese."""
    lines: list[str] = []
    tokens: list[str] = []  # the line being filled
    for token in _TOKEN.findall(paragraph):
        if token.isspace():
            tokens += [token] if tokens else []
            continue
        line = "".join(tokens)
        if columns(line + token) > width and line.strip():
            cut = len(tokens)
            if token in _NO_LINE_START:  # closing punctuation takes the word before it along
                cut -= 1
                while cut > 0 and (tokens[cut] in _NO_LINE_START or tokens[cut].isspace()):
                    cut -= 1
            if cut > 0:
                lines.append("".join(tokens[:cut]).rstrip())
                tokens = tokens[cut:]
        tokens.append(token)
    last = "".join(tokens).rstrip()
    return [*lines, last] if last else lines


def _prewrapped(text: str, width: int) -> str:
    """Text with wide characters as click's raw (``\\b``) paragraphs, already wrapped to ``width``
    columns; other text as it is, for click to wrap."""
    if columns(text) == len(text):
        return text
    paragraphs = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith("\b\n") or columns(paragraph) == len(paragraph):
            paragraphs.append(paragraph)
        else:
            paragraphs.append("\n".join(["\b", *wrap_columns(paragraph.replace("\n", " "), width)]))
    return "\n\n".join(paragraphs)


class HelpFormatter(click.HelpFormatter):
    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, prefix if prefix is not None else _("Usage:") + " ")

    def write_heading(self, heading: str) -> None:
        super().write_heading(_(heading) if heading in CLICK_WORDS else heading)

    def write_text(self, text: str) -> None:
        super().write_text(_prewrapped(text, self.width - self.current_indent))

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((columns(first) for first, _second in rows), default=0), col_max) + col_spacing
        text_width = max(self.width - first_col - 2, 10)  # as click's write_dl wraps the second column
        super().write_dl(
            [(first, _prewrapped(second, text_width)) for first, second in rows], col_max, col_spacing
        )


class Context(click.Context):
    formatter_class = HelpFormatter


def command_help(text: str | None) -> str:
    """A command's help as click shows it (up to a form feed), in the current language."""
    return _(inspect.cleandoc(text).partition("\f")[0]) if text else ""


def short_help(command: click.Command, limit: int) -> str:
    """The line a group's page gives a sub-command: its first sentence, in the current language."""
    if command.short_help:
        return _(inspect.cleandoc(command.short_help))
    english = inspect.cleandoc(command.help or "").partition("\f")[0]
    text = command_help(english)
    if text == english:  # untranslated: click's own cut
        return click.Command.get_short_help_str(command, limit)
    # a translation: its first sentence (CJK text has no spaces for click to cut at)
    first = text.split("\n\n")[0].replace("\n", "")
    return first.split("。")[0] + "。" if "。" in first else first


def option_record(param: click.Parameter, ctx: click.Context) -> tuple[str, str] | None:
    """An option's line on the page (as ``Option.get_help_record``), in the current language."""
    record = param.get_help_record(ctx)
    if record is None or not isinstance(param, click.Option):
        return record
    text = _(param.help) if param.help else ""
    extra = param.get_help_extra(ctx)
    items = []
    if "envvars" in extra:
        items.append(_("env var: {var}").format(var=", ".join(extra["envvars"])))
    if "default" in extra:
        items.append(_("default: {default}").format(default=extra["default"]))
    if "range" in extra:
        items.append(extra["range"])
    if "required" in extra:
        items.append(_("required"))
    if items:
        joined = "; ".join(items)
        text = f"{text}  [{joined}]" if text else f"[{joined}]"
    return record[0], text


class Command(click.Command):
    """A click command whose help page is in the current language."""

    context_class = Context

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        text = command_help(self.help)
        if text:
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(text)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        params = [p for p in self.get_params(ctx) if not isinstance(p, click.Argument)]
        records = [r for r in (option_record(p, ctx) for p in params) if r is not None]
        if records:
            with formatter.section(_("Options")):
                formatter.write_dl(records)

    def get_short_help_str(self, limit: int = 45) -> str:
        return short_help(self, limit)


class Group(Command, click.Group):
    """A click group of such commands (its ``command()`` and ``group()`` make them too)."""

    command_class = Command
    group_class = type

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        Command.format_options(self, ctx, formatter)
        self.format_commands(ctx, formatter)
