"""The Discord application-command tree, built from the command table (``commands.COMMANDS``).

A row becomes a slash command (or a message context-menu) whose options, descriptions, choices,
ranges, autocompletion, guild-only and hidden flags come from the row. Its callback reads the
options (attachments are downloaded, choices and channels become plain values) and runs the handler
through ``HipBot.run_handler``; the row's flags add what some commands do after the reply: open a
thread on it, stream it, or link it to the fine-tune job it started.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import unicodedata
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Optional

import discord
from discord import app_commands

from hipbot.bot.commands import COMMANDS, Command, Kind, Option, command
from hipbot.bot.handlers import safe
from hipbot.bot.replies import Reply, error_reply, truncate
from hipbot.bot.views import defer, send_reply
from hipbot.errors import HipbotError
from hipbot.i18n import ENGLISH, N_, _, gettext, normalize, using

if TYPE_CHECKING:
    from hipbot.bot.discord_app import HipBot

log = logging.getLogger("hipbot.discord")

THREAD_OPTION = N_("thread")
_TYPES: dict[Kind, type] = {
    Kind.TEXT: str,
    Kind.INT: int,
    Kind.FLOAT: float,
    Kind.BOOL: bool,
    Kind.FILE: discord.Attachment,
    Kind.CHANNEL: discord.TextChannel,
}


_NAMES = (
    app_commands.TranslationContextLocation.command_name,
    app_commands.TranslationContextLocation.group_name,
    app_commands.TranslationContextLocation.parameter_name,
)
_DEVANAGARI_THAI = ((0x0900, 0x097F), (0x0E00, 0x0E7F))


def _valid_name(text: str) -> bool:
    """Discord's rule for a slash command's, group's or option's name in any language
    (``^[-_\\p{L}\\p{N}\\p{sc=Deva}\\p{sc=Thai}]{1,32}$``, lowercase where the script has case);
    a menu's name may hold spaces and capitals."""

    def allowed(char: str) -> bool:
        return (
            char in "-_"
            or unicodedata.category(char)[0] in "LN"
            or any(lo <= ord(char) <= hi for lo, hi in _DEVANAGARI_THAI)
        )

    return 1 <= len(text) <= 32 and text == text.lower() and all(allowed(c) for c in text)


class Translator(app_commands.Translator):
    """Command and option names, descriptions and choices in each Discord locale the bot speaks,
    from the same gettext catalogue as the replies. A name whose translation breaks Discord's rule
    keeps its English name (Discord would refuse the whole tree)."""

    async def translate(
        self,
        string: app_commands.locale_str,
        locale: discord.Locale,
        context: app_commands.TranslationContext,
    ) -> str | None:
        language = normalize(locale.value)
        if language is None or language == ENGLISH:
            return None
        text = gettext(string.message, language)
        if text == string.message:
            return None
        slash = not isinstance(context.data, app_commands.ContextMenu)
        if context.location in _NAMES and slash and not _valid_name(text):
            log.warning(
                "the %s translation of the name %r is not a valid name: %r", language, string.message, text
            )
            return None
        return text


def register_commands(bot: HipBot) -> None:
    """Build the application-command tree on ``bot.tree``, one command per row of the table."""
    for row in COMMANDS:
        bot.tree.add_command(_context_menu(bot, row) if row.menu else _slash_command(bot, row))


async def command_tree_json(bot: HipBot) -> list[dict[str, Any]]:
    """The command tree as Discord receives it (with each locale's names and descriptions), plus
    who may run each command."""
    out = []
    translator = bot.tree.translator or Translator()
    for cmd in bot.tree.get_commands():
        data = await cmd.get_translated_payload(bot.tree, translator)
        data["hipbot_permission"] = command(cmd.name).who
        out.append(data)
    return out


async def read_attachment(attachment: discord.Attachment, limit: int) -> tuple[str, bytes]:
    if attachment.size > limit:
        raise HipbotError(
            _("{name} is {size} MiB; the bot reads files up to {limit} MiB").format(
                name=attachment.filename, size=attachment.size // (1024 * 1024), limit=limit // (1024 * 1024)
            ),
            hint=_("use the hipbot CLI for big files"),
        )
    return attachment.filename, await attachment.read()


# -- building --------------------------------------------------------------------------------------


def _annotation(option: Option) -> Any:
    base: Any = _TYPES[option.kind]
    if option.choices:
        base = app_commands.Choice[str]
    elif option.min is not None or option.max is not None:
        base = app_commands.Range[base, option.min, option.max]
    return base if option.required else Optional[base]  # noqa: UP045 (a Range is not a type: no `|`)


def _signature(row: Command) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("interaction", kind, annotation=discord.Interaction)]
    for option in row.options:
        default = inspect.Parameter.empty if option.required else None
        params.append(inspect.Parameter(option.name, kind, annotation=_annotation(option), default=default))
    if row.thread:
        params.append(inspect.Parameter(THREAD_OPTION, kind, annotation=bool, default=False))
    return inspect.Signature(params)


def _slash_command(bot: HipBot, row: Command) -> app_commands.Command[Any, ..., None]:
    async def callback(interaction: discord.Interaction, **values: Any) -> None:
        await _run(bot, row, interaction, values)

    callback.__signature__ = _signature(row)  # type: ignore[attr-defined]
    descriptions = {o.name: o.description for o in row.options if o.description}
    if row.thread:
        descriptions[THREAD_OPTION] = N_("open a thread on the answer for follow-up questions")
    if descriptions:
        app_commands.describe(**descriptions)(callback)
    choices = {
        o.name: [app_commands.Choice(name=label, value=value) for label, value in o.choices]
        for o in row.options
        if o.choices
    }
    if choices:
        app_commands.choices(**choices)(callback)
    if row.guild_only:
        app_commands.guild_only()(callback)
    if row.hidden:
        # Hidden from members without Manage Server; server owners can grant it to roles in
        # Discord's Integrations settings. The bot still checks its own admin roles.
        app_commands.default_permissions(manage_guild=True)(callback)
    slash = app_commands.Command(name=row.name, description=row.help, callback=callback)
    for option in row.options:
        if option.complete is not None:
            slash.autocomplete(option.name)(_completer(bot, option.complete))
    return slash


def _completer(
    bot: HipBot, complete: Callable[..., list[tuple[str, str]]]
) -> Callable[..., Coroutine[Any, Any, list[app_commands.Choice[str]]]]:
    async def autocomplete(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        ctx = await bot.context_for(interaction)
        with using(ctx.locale):  # the thread copies this context: labels such as a job's state
            choices = await asyncio.to_thread(complete, ctx, current)
        return [app_commands.Choice(name=label, value=value) for label, value in choices[:25]]

    return autocomplete


def _context_menu(bot: HipBot, row: Command) -> app_commands.ContextMenu:
    """A message menu: the handler gets the message's text and those of its files the row's FILE
    option accepts."""
    file_option = next(o for o in row.options if o.kind is Kind.FILE)

    async def callback(interaction: discord.Interaction, message: discord.Message) -> None:
        await defer(interaction)
        with using((await bot.context_for(interaction)).locale):
            files = [
                await read_attachment(a, file_option.max_bytes)
                for a in message.attachments
                if a.size <= file_option.max_bytes and _name_ok(file_option, a.filename)
            ]
            await bot.run_handler(interaction, row.handler, message.content, files)

    return app_commands.ContextMenu(name=row.title, callback=callback)


def _name_ok(option: Option, name: str) -> bool:
    if option.check is None:
        return True
    try:
        option.check(name)
    except HipbotError:
        return False
    return True


# -- running ---------------------------------------------------------------------------------------


async def _run(bot: HipBot, row: Command, interaction: discord.Interaction, values: dict[str, Any]) -> None:
    ctx = await bot.context_for(interaction)
    with using(ctx.locale):  # this interaction's task: its errors and the threads it starts
        await _run_in_locale(bot, row, interaction, values)


async def _run_in_locale(
    bot: HipBot, row: Command, interaction: discord.Interaction, values: dict[str, Any]
) -> None:
    if row.quick:
        reply = safe(row.handler, await bot.context_for(interaction))
        reply.ephemeral = reply.ephemeral or row.ephemeral
        await send_reply(interaction, reply)
        return
    await defer(interaction, ephemeral=row.ephemeral)
    try:
        kwargs = {
            o.keyword: await _value(o, values[o.name]) for o in row.options if values.get(o.name) is not None
        }
    except HipbotError as exc:
        await send_reply(interaction, error_reply(exc.message, exc.hint))
        return
    if row.stream is not None:
        await bot.run_stream(interaction, row.handler, row.stream.format(**kwargs), **kwargs)
        return
    reply, sent = await bot.run_handler(interaction, row.handler, ephemeral=row.ephemeral, **kwargs)
    first = row.options[0].keyword if row.options else ""
    if "answer_id" in reply.meta and sent and sent[0] is not None:
        await _place_answer(
            bot, interaction, reply, sent[0], values.get(THREAD_OPTION), str(kwargs.get(first))
        )
    job_id = reply.meta.get("job_id")
    if row.follow_job and job_id and sent and sent[-1] is not None:
        await bot.link_status_message(interaction, job_id, sent[-1])


async def _value(option: Option, value: Any) -> Any:
    """An option as the handler takes it."""
    if isinstance(value, app_commands.Choice):
        return value.value
    if isinstance(value, discord.abc.GuildChannel):
        return value.id
    if not isinstance(value, discord.Attachment):
        return value
    if option.check is not None:
        option.check(value.filename)
    name, data = await read_attachment(value, option.max_bytes)
    if not option.decode:
        return name, data
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise HipbotError(
            _("the {option} file is not UTF-8 text").format(option=_(option.name)),
            hint=_("attach the {option} as a UTF-8 text file").format(option=_(option.name)),
        ) from None


async def _place_answer(
    bot: HipBot,
    interaction: discord.Interaction,
    reply: Reply,
    message: discord.Message,
    thread: bool | None,
    title: str,
) -> None:
    """Remember which message shows the answer, and open a thread on it when asked."""
    answer_id = reply.meta["answer_id"]
    await asyncio.to_thread(bot.state.set_answer_location, answer_id, message_id=message.id)
    channel = interaction.channel
    if not thread or not isinstance(channel, discord.TextChannel):
        return
    try:
        started = await channel.create_thread(
            name=truncate(title, 90), message=message, auto_archive_duration=1440
        )
    except discord.HTTPException as exc:
        log.warning("cannot open a thread for answer %s: %s", answer_id, exc)
        return
    await asyncio.to_thread(
        bot.state.set_answer_location, answer_id, message_id=message.id, thread_id=started.id
    )
