"""``hipbot console``: the bot's commands in a terminal, through the same handlers as Discord.

Type ``/ask what replaces cudaMemcpyToSymbol?``, ``/hipify kernel.cu --arch gfx90a`` or paste a
```cuda block; buttons are numbered and ``/press N`` clicks one. Attachments (long HIP output, loss
curves) are written to ``$HIPBOT_HOME/console/`` and their paths printed.
"""

from __future__ import annotations

import logging
import math
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hipbot.bot import handlers
from hipbot.bot.commands import Args, Command, Kind, Option, command, console_help
from hipbot.bot.handlers import Context
from hipbot.bot.permissions import CONSOLE_ACTOR
from hipbot.bot.replies import Button, Reply
from hipbot.bot.state import BotState
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, env_locale, localized, using

log = logging.getLogger(__name__)
PROMPT = "hipbot> "
END_OF_PASTE = "."

CONSOLE_COMMANDS = (("/press N", N_("click button N of the last reply")), ("/help   /quit", ""))
CONSOLE_NOTE = N_(
    "/hipify and /convert without code read pasted lines up to a line '.';\n"
    "anything else is read like a mention: a question, or a ```cuda block to convert"
)


@dataclass
class Console:
    """One terminal session: reads lines, dispatches to handlers, prints replies as text."""

    settings: Settings
    state: BotState
    read: Callable[[str], str] = input
    write: Callable[[str], None] = print
    write_part: Callable[[str], None] | None = None  # writes without a newline, for streaming
    out_dir: Path | None = None
    buttons: list[Button] = field(default_factory=list)
    locale: str = field(default_factory=env_locale)  # HIPBOT_LANG, LC_ALL, LANG

    def __post_init__(self) -> None:
        self.ctx = Context(settings=self.settings, state=self.state, actor=CONSOLE_ACTOR, locale=self.locale)
        self.out_dir = self.out_dir or self.settings.home / "console"
        # Commands whose line the console reads itself (local files, --flags): Args.OWN in the table.
        self._own: dict[str, Callable[[str], Reply]] = {"hipify": self._hipify, "finetune": self._finetune}

    # -- input ---------------------------------------------------------------------------------
    def _read_paste(self, first: str = "") -> str:
        """Lines until a line with a single '.', or until the closing fence of an opened ``` block."""
        lines = [first] if first else []
        fenced = first.lstrip().startswith("```") and first.count("```") == 1
        while True:
            try:
                line = self.read("")
            except EOFError:
                break
            if not fenced and line.strip() == END_OF_PASTE:
                break
            lines.append(line)
            if fenced and line.strip().startswith("```"):
                break
        return "\n".join(lines)

    # -- output --------------------------------------------------------------------------------
    def show(self, reply: Reply) -> None:
        self.write(replace(reply, buttons=[], attachments=[]).to_text() or _("(no output)"))
        assert self.out_dir is not None
        for att in reply.attachments:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            path = self.out_dir / Path(att.name).name
            path.write_bytes(att.data)
            self.write(_("[attachment {name} saved to {path}]").format(name=att.name, path=path))
        self.buttons = [b for b in reply.buttons if not b.disabled]
        if self.buttons:
            self.write(
                "  ".join(
                    f"[{i}] {(b.emoji + ' ') if b.emoji else ''}{b.label}"
                    for i, b in enumerate(self.buttons, 1)
                )
                + "   (/press N)"
            )

    def stream(self, chunks: Iterator[str]) -> None:
        """Print a streamed answer as it arrives, on one line when the writer can (``write_part``)."""
        if self.write_part is None:
            self.write("".join(chunks))
            return
        for piece in chunks:
            self.write_part(piece)
        self.write_part("\n")

    # -- dispatch ------------------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """Run one input line, in the console's language; False when the user asked to quit."""
        with using(self.locale):
            return self._handle(line)

    def _handle(self, line: str) -> bool:
        line = line.strip()
        if not line:
            return True
        if line in ("/quit", "/exit", "quit", "exit"):
            return False
        try:
            if line.startswith("/"):
                name, _sep, rest = line[1:].partition(" ")
                self.command(name.lower(), rest.strip())
            else:
                text = self._read_paste(line) if line.startswith("```") else line
                self.show(handlers.mention(self.ctx, text))
        except HipbotError as exc:
            hint = "\n" + _("hint: {hint}").format(hint=localized(exc.hint)) if exc.hint else ""
            self.show(Reply(text=_("error: {message}").format(message=localized(exc.message)) + hint))
        except Exception as exc:  # noqa: BLE001 - one line's bug must not end the session
            log.exception("console line %r failed", line)
            self.show(
                Reply(
                    text=_("error: {command} failed ({error}); see the log").format(
                        command=line.split()[0], error=f"{type(exc).__name__}: {exc}"
                    )
                )
            )
        return True

    def command(self, name: str, rest: str) -> None:
        """A command of the table, read from the rest of its line as its row's ``args`` say."""
        if name == "help":
            self.write(console_help(CONSOLE_COMMANDS) + "\n" + _(CONSOLE_NOTE))
            return
        if name == "press":
            self.show(self._press(rest))
            return
        row = command(name)
        if not row.usage:
            raise HipbotError(
                _("unknown command /{name}").format(name=name), hint=_("/help lists the commands")
            )
        if row.args is Args.OWN:
            result = self._own[row.name](rest)
        else:
            args, kwargs = self._arguments(row, rest)
            result = row.handler(self.ctx, *args, **kwargs)
        if row.stream is not None:
            self.stream(result)
        else:
            self.show(result)

    def _arguments(self, row: Command, rest: str) -> tuple[list[str], dict[str, Any]]:
        """The handler's arguments after the context, read from the rest of the line."""
        if row.args is Args.TEXT:
            return [rest], {}
        if row.args is Args.WORD:
            return [_one_arg(rest, row.usage)], {}
        if row.args is Args.OPTIONAL:
            return ([rest] if rest else []), {}
        if row.args is Args.WORD_TEXT:
            word, _sep, text = rest.partition(" ")
            if not word or not text.strip():
                raise HipbotError(
                    _("usage: {usage}").format(usage=row.usage), hint=_("/help lists the commands")
                )
            return [word, text.strip()], {}
        if row.args is Args.PASTE:
            return [self._read_paste(rest)], {}
        if row.args is Args.KEY_VALUES:
            options = {o.name: o for o in row.options}
            return [], {
                options[k].keyword if k in options else k: _typed(options[k], v) if k in options else v
                for k, v in _key_values(rest).items()
            }
        return [], {}

    def _hipify(self, rest: str) -> Reply:
        args = _split(rest)
        arch = None
        if "--arch" in args:
            i = args.index("--arch")
            if i + 1 >= len(args):
                raise HipbotError(_("--arch needs a value, e.g. --arch gfx90a"))
            arch = args[i + 1]
            del args[i : i + 2]
        if len(args) == 1 and Path(args[0]).expanduser().is_file():
            path = Path(args[0]).expanduser()
            return handlers.hipify(self.ctx, attachment=(path.name, path.read_bytes()), arch=arch)
        code = " ".join(args) if args else self._read_paste()
        if code.lstrip().startswith("```"):
            blocks = handlers.extract_code_blocks(code)
            code = "\n\n".join(body for _, body in blocks)
        return handlers.hipify(self.ctx, code, arch=arch)

    def _finetune(self, rest: str) -> Reply:
        args = _split(rest)
        typed = {o.name: o for o in command("finetune").options}
        options = _key_values(" ".join(shlex.quote(a) for a in args if "=" in a))
        plain = [a for a in args if "=" not in a]
        dataset_path = options.pop("dataset", None)
        if "--dataset" in plain:
            i = plain.index("--dataset")
            if i + 1 >= len(plain):
                raise HipbotError(_("--dataset needs a file"))
            dataset_path = plain[i + 1]
            del plain[i : i + 2]
        yaml_text = None
        if plain:
            yaml_text = _read_file(plain[0])
        dataset = None
        dataset_name = options.pop("dataset_name", None)
        if dataset_path:
            path = Path(dataset_path).expanduser()
            if path.is_file():
                dataset = (path.name, path.read_bytes())
            else:
                dataset_name = dataset_path
        return handlers.finetune(
            self.ctx,
            yaml_text=yaml_text,
            dataset=dataset,
            dataset_name=dataset_name,
            model=options.pop("model", None),
            lora_rank=_typed(typed["lora_rank"], options.pop("lora_rank"))
            if "lora_rank" in options
            else None,
            lora_target=options.pop("lora_target", None),
            epochs=_typed(typed["epochs"], options.pop("epochs")) if "epochs" in options else None,
            **({"extra": options} if options else {}),
        )

    def _press(self, rest: str) -> Reply:
        if rest.isdigit() and 1 <= int(rest) <= len(self.buttons):
            custom_id = self.buttons[int(rest) - 1].custom_id
        elif rest.startswith("hipbot:"):
            custom_id = rest
        else:
            raise HipbotError(
                _("no such button"), hint=_("/press N with N from the last reply's [N] buttons")
            )
        return handlers.press(self.ctx, custom_id)

    def loop(self) -> None:
        with using(self.locale):
            self.write(_("hipbot console: /help lists the commands, /quit leaves."))
        while True:
            try:
                line = self.read(PROMPT)
            except (EOFError, KeyboardInterrupt):
                self.write("")
                return
            if not self.handle(line):
                return


def _one_arg(rest: str, usage: str) -> str:
    if not rest.strip() or len(rest.split()) != 1:
        raise HipbotError(_("usage: {usage}").format(usage=usage))
    return rest.strip()


def _read_file(name: str) -> str:
    path = Path(name).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HipbotError(_("cannot read {path}: {error}").format(path=path, error=exc)) from exc


def _split(rest: str) -> list[str]:
    """The words of a line, as a shell splits them; an unclosed quote is the user's to fix."""
    try:
        return shlex.split(rest) if rest else []
    except ValueError as exc:
        raise HipbotError(
            _("cannot read the line: {error}").format(error=exc),
            hint=_("close the quote, or escape it with a backslash"),
        ) from exc


def _typed(option: Option, raw: str) -> Any:
    """A key=value option read as the command table types it (Discord does this for its users)."""
    kinds = {Kind.INT: (int, _("a whole number")), Kind.FLOAT: (float, _("a number"))}
    if option.kind not in kinds:
        return raw
    convert, what = kinds[option.kind]
    try:
        value = convert(raw)
    except ValueError as exc:
        raise HipbotError(
            _("{option} must be {what}, got {raw!r}").format(option=option.name, what=what, raw=raw)
        ) from exc
    low = -math.inf if option.min is None else option.min
    high = math.inf if option.max is None else option.max
    if not low <= value <= high:  # nan is in no range
        raise HipbotError(
            _("{option} must be between {low:g} and {high:g}, got {raw}").format(
                option=option.name, low=low, high=high, raw=raw
            )
        )
    return value


def _key_values(rest: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _split(rest):
        key, sep, value = item.partition("=")
        if not sep:
            raise HipbotError(
                _("expected key=value, got {item!r}").format(item=item),
                hint=_("e.g. /config max_daily_per_user=5"),
            )
        out[key.strip()] = value.strip()
    return out
