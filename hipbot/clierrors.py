"""click's usage errors in the terminal's language.

click words its errors ("No such option '--x'.", "Missing argument 'SRC'.", "Invalid value for
'--arch': ...") through gettext's process-wide domain, which hipbot leaves alone (see
``hipbot.clihelp``). The English text click built is matched against its own templates, kept
here in hipbot's catalogue, and written again in the current language with the same values
(option names, arguments and user values are never translated). A message that matches no
template (a new click version's wording, hipbot's own already-localized errors) is shown as it is.
"""

from __future__ import annotations

import functools
import re

import click

from hipbot.i18n import N_, _

# click's templates, as click words them (its ``{name!r}`` values arrive quoted, so the quotes are
# part of the value here). ``message``, ``detail`` and ``kind`` hold text that is itself localized.
TEMPLATES = (  # the longer of two that could both match comes first
    N_("{message} Did you mean {possibility}?"),
    N_("{message} (Did you mean one of: {possibilities}?)"),
    N_("No such option {name}."),
    N_("No such command {name}."),
    N_("Missing argument {param}. {detail}"),
    N_("Missing option {param}. {detail}"),
    N_("Missing argument {param}."),
    N_("Missing option {param}."),
    N_("Missing parameter {param}."),
    N_("Missing command."),
    N_("Invalid value for {param}: {message}"),
    N_("Invalid value: {message}"),
    N_("Got unexpected extra argument ({args})"),
    N_("Got unexpected extra arguments ({args})"),
    N_("Option {name} requires an argument."),
    N_("Option {name} requires {nargs} arguments."),
    N_("Option {name} does not take a value."),
    N_("Argument {name} takes {nargs} values."),
    N_("{value} is not a valid {kind}."),
    N_("{value} is not one of {choices}."),
    N_("{value} is not in the range {range}."),
    N_("{value} is not {choice}."),
    N_("{kind} {filename} does not exist."),
    N_("{kind} {filename} is a file."),
    N_("{kind} {filename} is a directory."),
    N_("{kind} {filename} is not readable."),
    N_("{kind} {filename} is not writable."),
    N_("Choose from:\n\t{choices}"),
)
# the words click puts in a ``kind`` value
KINDS = frozenset(
    (N_("integer"), N_("float"), N_("boolean"), N_("integer range"), N_("float range"))
    + (N_("File"), N_("Directory"), N_("Path"))
)
LOCALIZED_FIELDS = frozenset(("message", "detail", "kind"))
_FIELD = re.compile(r"\{(\w+)\}")


@functools.cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    compiled = []
    for template in TEMPLATES:
        parts = _FIELD.split(template)  # text, field, text, field, ..., text
        regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        compiled.append((template, re.compile(regex, re.DOTALL)))
    return tuple(compiled)


def localize(text: str) -> str:
    """click's English ``text`` in the current language (as it is when no template matches)."""
    if text in KINDS:
        return _(text)
    for template, pattern in _patterns():
        match = pattern.fullmatch(text)
        if match:
            values = {k: localize(v) if k in LOCALIZED_FIELDS else v for k, v in match.groupdict().items()}
            return _(template).format(**values)
    return text


def show(exc: click.ClickException) -> None:
    """What ``exc.show()`` writes, in the current language: for a usage error the command's usage
    line and where its help is, then the error."""
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is not None:
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            hint = _("Try '{command} {option}' for help.").format(
                command=ctx.command_path, option=max(ctx.command.get_help_option_names(ctx), key=len)
            )
            hint += "\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", err=True, color=ctx.color)
    click.echo(_("Error: {message}").format(message=localize(exc.format_message())), err=True)
