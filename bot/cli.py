"""``hipbot discord run|commands``, ``hipbot console`` and ``hipbot start``."""

from __future__ import annotations

import asyncio
import json
import logging

import click

from hipbot.clihelp import Command, Group
from hipbot.config import Settings, config_file_path, load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_, _, current


def _open_state(settings: Settings):  # -> BotState, imported lazily with the rest of the bot
    from hipbot.bot.state import BotState

    return BotState.open(settings.database)


def _token_missing() -> HipbotError:
    return HipbotError(
        _("no Discord bot token is set"),
        hint=_(
            'export DISCORD_TOKEN=... (or HIPBOT_DISCORD_TOKEN), or put discord_token = "..." in '
            "{path}; get a token at https://discord.com/developers/applications (Bot tab). "
            "`hipbot console` tries the bot without one"
        ).format(path=config_file_path()),
    )


def _run_discord(settings: Settings, *, message_content: bool, sync: bool, guild: int | None) -> None:
    import discord

    from hipbot.bot.discord_app import HipBot

    if not settings.discord_token:
        raise _token_missing()
    bot = HipBot(settings, message_content=message_content)

    async def sync_commands() -> None:
        target = discord.Object(id=guild) if guild else None
        if target is not None:
            bot.tree.copy_global_to(guild=target)
        synced = await bot.tree.sync(guild=target)
        logging.getLogger("hipbot.discord").info(
            "synced %d commands%s", len(synced), f" to guild {guild}" if guild else ""
        )

    if sync:
        original = bot.setup_hook

        async def setup_hook() -> None:
            await original()
            await sync_commands()

        bot.setup_hook = setup_hook  # type: ignore[method-assign]
    try:
        bot.run(settings.discord_token, log_level=logging.INFO)
    except discord.LoginFailure as exc:
        raise HipbotError(
            _("Discord refused the token: {error}").format(error=exc),
            hint=_("copy the token again from the Bot tab of your application"),
        ) from exc
    except discord.PrivilegedIntentsRequired as exc:
        raise HipbotError(
            _("the message-content intent is not enabled for this bot"),
            hint=_("enable it in the developer portal (Bot tab), or run without --message-content"),
        ) from exc


@click.group(cls=Group)
def discord() -> None:
    """Run the Discord bot, or show its command tree."""


@discord.command("run")
@click.option(
    "--message-content/--no-message-content",
    default=False,
    help=N_(
        "Ask for the message-content intent (mentions in threads without a ping); slash commands need none."
    ),
)
@click.option("--sync/--no-sync", default=True, help=N_("Register the slash commands with Discord on start."))
@click.option(
    "--guild", type=int, default=None, help=N_("Register the commands in this guild only (instant updates).")
)
def run_cmd(message_content: bool, sync: bool, guild: int | None) -> None:
    """Connect to Discord with DISCORD_TOKEN and serve the slash commands."""
    _run_discord(load_settings(), message_content=message_content, sync=sync, guild=guild)


@discord.command("commands")
@click.option("--json", "as_json", is_flag=True, help=N_("Print the tree as JSON (what Discord receives)."))
def commands_cmd(as_json: bool) -> None:
    """Print the command tree (names, options, permissions) without connecting."""
    from hipbot.bot.commands import command as table_row
    from hipbot.bot.discord_app import HipBot
    from hipbot.bot.discord_commands import command_tree_json
    from hipbot.bot.state import BotState

    bot = HipBot(load_settings(), state=BotState.open(":memory:"))  # builds the tree; touches no file
    tree = asyncio.run(command_tree_json(bot))
    if as_json:
        click.echo(json.dumps(tree, indent=2, ensure_ascii=False))
        return
    for command in tree:
        options = " ".join(
            _shown(o["name"] + ("" if o.get("required") else "?"), o) for o in command.get("options", [])
        )
        kind = {1: "/", 3: "(message menu) "}.get(command.get("type", 1), "")
        click.echo(f"{kind}{_shown(command['name'], command)} {options}".rstrip())
        if command.get("description"):
            click.echo(f"    {_(command['description'])}")  # the English text is the catalogue's key
        who = table_row(command["name"]).who_text()
        click.echo("    " + _("who: {permission}").format(permission=who))


def _shown(text: str, item: dict) -> str:
    """A command's or option's name, with the name Discord shows in the terminal's language beside
    it (``ask (提问)``)."""
    local = item.get("name_localizations", {}).get(current().replace("_", "-"))
    return f"{text} ({local})" if local else text


def _console(settings: Settings, commands: tuple[str, ...] = ()) -> None:
    from hipbot.bot.console import Console

    console = Console(
        settings=settings,
        state=_open_state(settings),
        write=click.echo,
        write_part=lambda text: click.echo(text, nl=False),
    )
    if commands:
        for line in commands:
            click.echo(f"{'>'} {line}")
            if not console.handle(line):
                break
        return
    import threading

    from hipbot.bot.handlers import warm_up

    # Load the answer engine while the user types the first line. Joined before returning: a
    # process that exits while torch is loading in a thread aborts ("terminate called ...").
    loader = threading.Thread(target=warm_up, args=(settings,), name="hipbot-warm-up")
    loader.start()
    try:
        console.loop()
    finally:
        loader.join()


@click.command(cls=Command)
@click.option("-c", "--command", "commands", multiple=True, help=N_("Run this line (repeatable) and exit."))
def console(commands: tuple[str, ...]) -> None:
    """A terminal chat with the bot's commands (/ask, /hipify ...), no Discord needed."""
    _console(load_settings(), commands)


def first_start_ingest(settings: Settings, echo=click.echo) -> bool:
    """On an empty database, read the docs corpus if it is there; True when it ran."""
    from hipbot.agents.docs.store import is_ingested, open_docs_db

    db = open_docs_db(settings.database)
    try:
        if is_ingested(db):
            return False
    finally:
        db.conn.close()
    if settings.docs is None:
        echo(
            _(
                "note: the answers database is empty and no docs corpus was found; "
                "run `hipbot ingest --docs PATH` (or --download) to enable /ask"
            )
        )
        return False
    from hipbot.agents.docs import ingest

    echo(
        _("first start: reading the HIP docs from {docs} into {database} (a minute or two)").format(
            docs=settings.docs, database=settings.database
        )
    )
    summary = ingest.ingest(settings, progress=True)
    echo(str(summary))
    return True


@click.command(cls=Command)
@click.option(
    "--message-content/--no-message-content", default=False, help=N_("See `hipbot discord run --help`.")
)
@click.option(
    "--coordinator-port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help=N_(
        "Also serve the job coordinator and its operator page (/ui) on 127.0.0.1 at this port, "
        "over the same database, unless HIPBOT_COORDINATOR_URL names another; 0: none."
    ),
)
def start(message_content: bool, coordinator_port: int) -> None:
    """Start the assistant: the Discord bot when a token is set, else the terminal console; beside it
    the job coordinator (workers' API and the operator page) on this machine."""
    settings = load_settings()
    first_start_ingest(settings)
    if coordinator_port and not settings.coordinator_url:
        from hipbot.jobs.finetune.coordinator import serve_in_background

        url = serve_in_background(settings, port=coordinator_port)
        click.echo(
            _("operator page: {url} (sign in with `hipbot finetune token --page NAME --admin`)").format(
                url=url
            )
        )
    if settings.discord_token:
        _run_discord(settings, message_content=message_content, sync=True, guild=None)
    else:
        click.echo(_("no DISCORD_TOKEN set: starting the terminal console (set one to run the Discord bot)"))
        _console(settings)
