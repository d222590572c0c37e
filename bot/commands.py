"""The bot's chat commands, in one table: name, handler, help text, options, who may run it, cooldown.

Everything else is built from ``COMMANDS``: the Discord application-command tree
(``discord_commands.py``), the console's ``/help`` and dispatch (``console.py``), ``/help`` itself,
``hipbot discord commands --json`` and the per-user cooldowns (``Context.check_cooldown``).
Adding a chat command is one ``Command`` row here plus its handler in ``handlers/``.

Slash-command and option names are marked ``N_()``: Discord shows them in the member's language
(``discord_commands.Translator``; their translations follow Discord's name rules), while the
handlers, the console and the JSON tree's ``name`` keep the English ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hipbot.bot import handlers
from hipbot.bot.handlers.common import COLOR_INFO, Context
from hipbot.bot.replies import Embed, Reply
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _

ADMINS = N_("admins (Manage Server or admin_roles)")
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # attachments larger than this are refused before downloading


class Kind(Enum):
    """What an option holds; each front end reads it its own way (a Discord attachment is a file
    path on the console)."""

    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    FILE = "file"  # (file name, bytes) for the handler
    CHANNEL = "channel"  # a channel id for the handler


class Args(Enum):
    """How the console reads a command's line."""

    NONE = "none"  # /models
    TEXT = "text"  # /ask the rest of the line
    WORD = "word"  # /job 12: exactly one word
    OPTIONAL = "optional"  # /jobs [all]: the rest of the line, when there is one
    WORD_TEXT = "word text"  # /chat ADAPTER the rest of the line
    KEY_VALUES = "key values"  # /config key=value ...
    PASTE = "paste"  # /convert: the rest of the line, or pasted lines up to a '.'
    OWN = "own"  # the console parses it itself (local files, flags): /hipify, /finetune


@dataclass(frozen=True)
class Option:
    name: str
    kind: Kind = Kind.TEXT
    description: str = ""
    required: bool = False
    param: str = ""  # the handler's keyword when it differs from ``name``
    min: float | None = None  # number range, or text length
    max: float | None = None
    choices: tuple[tuple[str, str], ...] = ()  # (label, value)
    complete: Callable[[Context, str], list[tuple[str, str]]] | None = None  # (label, value) suggestions
    max_bytes: int = MAX_UPLOAD_BYTES  # FILE: refused above this size, before it is read
    check: Callable[[str], None] | None = None  # FILE: the name is checked before the file is read
    decode: bool = False  # FILE: the handler gets UTF-8 text instead of (name, bytes)

    @property
    def keyword(self) -> str:
        return self.param or self.name


@dataclass(frozen=True)
class Command:
    name: str
    handler: Callable[..., Any]  # (ctx, **options) -> Reply, or an Iterator[str] when ``stream``
    help: str
    usage: str = ""  # the console's syntax; empty: not a console command
    options: tuple[Option, ...] = ()
    permission: str = N_("everyone")
    cooldown: str | None = None  # the GuildConfig field with this command's per-user cooldown
    args: Args = Args.NONE
    menu: str | None = None  # a message context-menu in Discord (not a slash command) of this name
    guild_only: bool = False
    hidden: bool = False  # hidden in Discord from members without Manage Server
    ephemeral: bool = False  # only the user who ran it sees the reply
    quick: bool = False  # answered at once, no "thinking" message
    thread: bool = False  # may open a thread on the reply for follow-up questions
    stream: str | None = None  # the handler streams text; the header, formatted with the options
    follow_job: bool = False  # the reply's message follows the job it started

    @property
    def title(self) -> str:
        """The name as Discord shows it: ``/ask``, or the menu's name."""
        return self.menu or self.name

    @property
    def who(self) -> str:
        """Who may run it, in English (the JSON tree's ``hipbot_permission``)."""
        return self.who_text(lambda text: text)

    def who_text(self, translate: Callable[[str], str] = _) -> str:
        """Who may run it, in the current language."""
        if self.cooldown is None:
            return translate(self.permission)
        return translate(N_("{permission}; per-user cooldown ({setting})")).format(
            permission=translate(self.permission), setting=self.cooldown
        )


def show_help(ctx: Context) -> Reply:
    """/help: every command with its help text."""
    return help_reply()


def help_reply() -> Reply:
    lines = [f"`/{c.name}` — {_(c.help)}" for c in COMMANDS if c.menu is None and c.name != "help"]
    lines.append(_("Mention me with a question, or with a ```cuda block to convert it."))
    return Reply(embeds=[Embed(title=_("hipbot commands"), description="\n".join(lines), color=COLOR_INFO)])


def console_help(extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The console's ``/help``: the table's usage lines, then the console's own ``extra`` ones."""
    lines = []
    for usage, text in [(c.usage, c.help) for c in COMMANDS if c.usage] + list(extra):
        text = _(text) if text else text
        lines.append(
            (f"  {usage:<34} {text}" if len(usage) < 35 else f"  {usage}\n  {'':<34} {text}").rstrip()
        )
    return _("commands (the same as in Discord):") + "\n" + "\n".join(lines)


def command(name: str) -> Command:
    """The row of a command, by its name or its menu's name."""
    for row in COMMANDS:
        if name in (row.name, row.menu):
            return row
    raise HipbotError(_("unknown command /{name}").format(name=name), hint=_("/help lists the commands"))


ARCHES = (
    ("gfx90a (MI200: MI210/MI250)", "gfx90a"),
    ("gfx942 (MI300X/MI300A)", "gfx942"),
    ("gfx908 (MI100)", "gfx908"),
    ("gfx1100 (RX 7900, W7900)", "gfx1100"),
    ("gfx1030 (RX 6800/6900, W6800)", "gfx1030"),
)
JOB_ID = Option(
    N_("job_id"), description=N_("a job number (see /jobs)"), required=True, complete=handlers.job_choices
)

COMMANDS: tuple[Command, ...] = (
    Command(
        N_("ask"),
        handlers.ask,
        N_("Answer a CUDA->HIP porting question from the HIP docs, with sources"),
        usage="/ask QUESTION",
        options=(
            Option(
                N_("question"),
                description=N_("e.g. what replaces cudaMemcpyToSymbolAsync?"),
                required=True,
                min=1,
                max=2000,
            ),
        ),
        cooldown="ask_cooldown_s",
        args=Args.TEXT,
        thread=True,
    ),
    Command(
        N_("hipify"),
        handlers.hipify,
        N_("Convert CUDA code to HIP, with AMD porting lints"),
        usage="/hipify [FILE] [--arch gfx90a]",
        options=(
            Option(N_("code"), description=N_("CUDA source (or attach a file)")),
            Option(
                N_("file"),
                Kind.FILE,
                N_("a .cu, .cuh, .cpp or .h file"),
                param="attachment",
                max_bytes=handlers.MAX_CODE_BYTES,
                check=handlers.check_code_filename,
            ),
            Option(
                N_("arch"), description=N_("compile the result for this AMD GPU with hipcc"), choices=ARCHES
            ),
        ),
        cooldown="hipify_cooldown_s",
        args=Args.OWN,
    ),
    Command(
        "convert",
        handlers.convert_message,
        N_("Convert a message's code blocks (or its code attachments) to HIP"),
        usage="/convert",
        options=(
            Option("content", required=True),
            Option(
                "attachments",
                Kind.FILE,
                max_bytes=handlers.MAX_CODE_BYTES,
                check=handlers.check_code_filename,
            ),
        ),
        permission=N_("everyone; shares the /hipify cooldown"),
        args=Args.PASTE,
        menu=N_("Convert to HIP"),
    ),
    Command(
        N_("finetune"),
        handlers.finetune,
        N_("Start a LoRA fine-tune on the community GPUs"),
        usage="/finetune [CONFIG.yaml] [--dataset FILE] [key=value ...]",
        options=(
            Option(
                N_("config"),
                Kind.FILE,
                N_("a LLaMA-Factory train YAML (or give the options below)"),
                param="yaml_text",
                max_bytes=256 * 1024,
                decode=True,
            ),
            Option(
                N_("dataset"),
                Kind.FILE,
                N_("a dataset file (alpaca or sharegpt; json, jsonl, csv or parquet)"),
            ),
            Option(N_("model"), description=N_("base model (model_name_or_path)")),
            Option(N_("dataset_name"), description=N_("a dataset name from the hub or dataset_info.json")),
            Option(N_("lora_rank"), Kind.INT, N_("LoRA rank (8, 16, 32, 64 ...)"), min=1, max=512),
            Option(N_("lora_target"), description=N_("all, or modules such as q_proj,v_proj")),
            Option(N_("epochs"), Kind.FLOAT, N_("num_train_epochs"), min=0.01, max=100.0),
        ),
        permission=N_("admins and the roles in finetune_roles; per-user and per-server quotas"),
        args=Args.OWN,
        guild_only=True,
        follow_job=True,
    ),
    Command(
        N_("jobs"),
        handlers.jobs,
        N_("List fine-tune jobs"),
        usage="/jobs [mine|all]",
        options=(
            Option(
                N_("scope"),
                description=N_("your jobs, or all of this server's"),
                choices=((N_("mine"), "mine"), (N_("all"), "all")),
            ),
        ),
        args=Args.OPTIONAL,
        ephemeral=True,
    ),
    Command(
        N_("job"),
        handlers.job,
        N_("Show one fine-tune job"),
        usage="/job ID",
        options=(JOB_ID,),
        args=Args.WORD,
    ),
    Command(
        N_("cancel"),
        handlers.cancel,
        N_("Cancel a fine-tune job (yours, or any as admin)"),
        usage="/cancel ID",
        options=(JOB_ID,),
        permission=N_("the job's owner, or admins"),
        args=Args.WORD,
    ),
    Command(N_("help"), show_help, N_("What hipbot can do"), ephemeral=True, quick=True),
    Command(N_("models"), handlers.models, N_("Published adapters and base models"), usage="/models"),
    Command(
        N_("chat"),
        handlers.chat,
        N_("Chat with a published adapter or a base model"),
        usage="/chat ADAPTER PROMPT",
        options=(
            Option(
                N_("adapter"),
                description=N_("adapter or base model name (see /models)"),
                required=True,
                complete=handlers.model_choices,
            ),
            Option(N_("prompt"), description=N_("your message"), required=True, min=1, max=4000),
        ),
        args=Args.WORD_TEXT,
        stream="**{adapter}**: ",
    ),
    Command(
        N_("publish"),
        handlers.publish,
        N_("Publish a finished adapter to the vLLM servers"),
        usage="/publish ADAPTER",
        options=(
            Option(
                N_("adapter"), description=N_("an adapter name, or a finished job's number"), required=True
            ),
        ),
        permission=N_("the job's owner, or admins"),
        args=Args.WORD,
    ),
    Command(
        N_("workers"),
        handlers.workers,
        N_("Registered GPU workers (admin)"),
        usage="/workers",
        permission=ADMINS,
        guild_only=True,
        hidden=True,
        ephemeral=True,
    ),
    Command(
        N_("ingest"),
        handlers.ingest,
        N_("Re-read the HIP docs into the answers database (admin)"),
        usage="/ingest",
        permission=ADMINS,
        guild_only=True,
        hidden=True,
        ephemeral=True,
    ),
    Command(
        N_("config"),
        handlers.config,
        N_("This server's bot settings (admins change them)"),
        usage="/config [key=value ...]",
        options=(
            Option(
                N_("finetune_roles"),
                description=N_(
                    "roles allowed to start fine-tunes (names or ids, comma separated; 'everyone' for all)"
                ),
            ),
            Option(N_("admin_roles"), description=N_("roles with admin rights in the bot")),
            Option(
                N_("max_running_per_user"),
                Kind.INT,
                N_("fine-tunes a user may have queued or running"),
                min=0,
                max=100,
            ),
            Option(
                N_("max_daily_per_user"),
                Kind.INT,
                N_("fine-tunes a user may start per 24 h"),
                min=0,
                max=1000,
            ),
            Option(
                N_("max_running_per_guild"),
                Kind.INT,
                N_("fine-tunes this server may have queued or running"),
                min=0,
                max=1000,
            ),
            Option(
                N_("max_daily_per_guild"),
                Kind.INT,
                N_("fine-tunes this server may start per 24 h"),
                min=0,
                max=10000,
            ),
            Option(
                N_("notice_channel"),
                Kind.CHANNEL,
                N_("channel for job status messages"),
                param="notice_channel_id",
            ),
            Option(
                N_("ask_cooldown_s"), Kind.FLOAT, N_("seconds between two /ask of one user"), min=0, max=3600
            ),
            Option(
                N_("hipify_cooldown_s"),
                Kind.FLOAT,
                N_("seconds between two /hipify of one user"),
                min=0,
                max=3600,
            ),
            Option(
                N_("language"),
                description=N_(
                    "the language of replies when a member's Discord language is not one the bot speaks"
                ),
                choices=(("English", "en"), ("简体中文", "zh_CN")),
            ),
        ),
        permission=N_("everyone may view; admins change"),
        args=Args.KEY_VALUES,
        guild_only=True,
        ephemeral=True,
    ),
)
