"""The Discord front end: discord.py 2.x application commands over ``handlers``.

This module only translates: an interaction becomes a ``Context`` and handler arguments, the
handler runs in a thread (translation, retrieval and SQLite never block the event loop), and its
``Reply`` becomes messages. Every slow command defers at once and follows up. A background task
edits the status message of each fine-tune job as the job advances; which message shows which job
is stored in SQLite, so the edits continue after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import discord
from discord import app_commands
from discord.ext import commands

from hipbot.bot import handlers
from hipbot.bot.discord_commands import Translator, register_commands
from hipbot.bot.handlers import Context
from hipbot.bot.permissions import Actor
from hipbot.bot.replies import MESSAGE_LIMIT, Reply, error_reply, fit, truncate
from hipbot.bot.state import BotState
from hipbot.bot.views import HipbotButton, defer, message_kwargs, send_reply
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import _, resolve, using

log = logging.getLogger("hipbot.discord")

CHAT_EDIT_INTERVAL_S = 1.0


def actor_from(
    user: discord.abc.User, guild: discord.Guild | None, permissions: discord.Permissions | None
) -> Actor:
    roles: tuple[tuple[int, str], ...] = ()
    if isinstance(user, discord.Member):
        roles = tuple((r.id, r.name) for r in user.roles if not r.is_default())
    admin = False
    if guild is not None:
        perms = permissions or (user.guild_permissions if isinstance(user, discord.Member) else None)
        admin = bool(perms and (perms.administrator or perms.manage_guild)) or guild.owner_id == user.id
    return Actor(
        user_id=user.id,
        name=getattr(user, "display_name", None) or user.name,
        guild_id=guild.id if guild else None,
        roles=roles,
        guild_admin=admin,
    )


class HipBot(commands.Bot):
    """The bot: settings, state, the command tree and the job-status watcher."""

    def __init__(
        self,
        settings: Settings,
        state: BotState | None = None,
        *,
        message_content: bool = False,
        watch_interval: float = 15.0,
    ) -> None:
        intents = discord.Intents.default()
        intents.message_content = message_content  # optional: slash commands work without it
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            help_command=None,
            # Replies quote what people paste (code, questions, notes): an "@everyone" or a role
            # mention in them must not ping anyone. Only the job-done notice mentions its owner.
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self.settings = settings
        self.state = state or BotState.open(settings.database)
        self.watch_interval = watch_interval
        self._watcher: asyncio.Task[None] | None = None
        self._warm: asyncio.Task[bool] | None = None  # the answer engine loading in a thread
        register_commands(self)
        self.tree.on_error = self._on_tree_error  # type: ignore[method-assign]

    async def on_ready(self) -> None:
        assert self.user is not None
        invite = discord.utils.oauth_url(
            self.user.id,
            permissions=discord.Permissions(
                send_messages=True,
                send_messages_in_threads=True,
                create_public_threads=True,
                embed_links=True,
                attach_files=True,
                read_message_history=True,
            ),
            scopes=("bot", "applications.commands"),
        )
        log.info("logged in as %s in %d servers; invite: %s", self.user, len(self.guilds), invite)

    async def setup_hook(self) -> None:
        await self.tree.set_translator(Translator())
        self.add_dynamic_items(HipbotButton)
        self._watcher = asyncio.create_task(self._watch_jobs(), name="hipbot-job-watcher")
        self._warm = asyncio.create_task(
            asyncio.to_thread(handlers.warm_up, self.settings), name="hipbot-warm-up"
        )

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await super().close()

    # -- contexts --------------------------------------------------------------------------------
    async def context_for(self, interaction: discord.Interaction) -> Context:
        """Who runs the interaction, where, and in which language: the member's own Discord language
        when the bot speaks it, else the server's ``/config language``, else English."""
        actor = actor_from(interaction.user, interaction.guild, interaction.permissions)
        channel = interaction.channel
        config = await asyncio.to_thread(self.state.guild_config, actor.guild_id)
        return Context(
            settings=self.settings,
            state=self.state,
            actor=actor,
            channel_id=getattr(channel, "id", None),
            thread_id=channel.id if isinstance(channel, discord.Thread) else None,
            file_limit=interaction.filesize_limit,
            locale=resolve(interaction.locale.value, config.language),
            _config=config,
        )

    async def run_handler(
        self,
        interaction: discord.Interaction,
        fn: Callable[..., Reply],
        *args: Any,
        ephemeral: bool = False,
        **kwargs: Any,
    ) -> tuple[Reply, list[discord.Message | None]]:
        """Defer, run the handler in a thread, send its reply: the path of every slow command."""
        if not interaction.response.is_done():
            await defer(interaction, ephemeral=ephemeral)
        ctx = await self.context_for(interaction)
        reply = await asyncio.to_thread(handlers.safe, fn, ctx, *args, **kwargs)
        if ephemeral:
            reply.ephemeral = True
        return reply, await send_reply(interaction, reply)

    async def run_stream(
        self,
        interaction: discord.Interaction,
        fn: Callable[..., Iterator[str]],
        header: str,
        **kwargs: Any,
    ) -> None:
        """Run a streaming handler (checked before it starts) and show its text as it comes."""
        if not interaction.response.is_done():
            await defer(interaction)
        ctx = await self.context_for(interaction)
        try:
            chunks = await asyncio.to_thread(fn, ctx, **kwargs)
        except HipbotError as exc:
            await send_reply(interaction, error_reply(exc.message, exc.hint))
            return
        await stream_reply(interaction, chunks, header=header)

    async def _on_tree_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        cause = getattr(error, "original", error)
        if isinstance(cause, HipbotError):
            reply = error_reply(cause.message, cause.hint)
        else:
            log.exception(
                "command %s failed", interaction.command and interaction.command.name, exc_info=cause
            )
            config = await asyncio.to_thread(self.state.guild_config, interaction.guild_id)
            with using(resolve(interaction.locale.value, config.language)):
                reply = error_reply(
                    _("something went wrong on the bot's side; it is logged"), _("try again in a minute")
                )
        with contextlib.suppress(discord.HTTPException):
            await send_reply(interaction, reply)

    # -- mentions --------------------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None:
            return
        # With the message-content intent, any message in a thread the bot opened is a follow-up.
        in_own_thread = (
            isinstance(message.channel, discord.Thread)
            and message.channel.owner_id == self.user.id
            and bool(message.content.strip())
        )
        if self.user not in message.mentions and not in_own_thread:
            return
        actor = actor_from(message.author, message.guild, None)
        config = await asyncio.to_thread(self.state.guild_config, actor.guild_id)
        ctx = Context(
            settings=self.settings,
            state=self.state,
            actor=actor,
            channel_id=message.channel.id,
            thread_id=message.channel.id if isinstance(message.channel, discord.Thread) else None,
            file_limit=message.guild.filesize_limit if message.guild else 10 * 1024 * 1024,
            locale=resolve(config.language),  # a message carries no locale: the server's language
            _config=config,
        )
        files = [
            (a.filename, await a.read()) for a in message.attachments if a.size <= handlers.MAX_CODE_BYTES
        ]
        async with message.channel.typing():
            reply = await asyncio.to_thread(handlers.safe, handlers.mention, ctx, message.content, files)
        for i, part in enumerate(fit(reply, ctx.file_limit)):
            kwargs = {k: v for k, v in message_kwargs(part).items() if v is not None}
            sent = await (message.reply(**kwargs) if i == 0 else message.channel.send(**kwargs))
            if i == 0 and "answer_id" in reply.meta:
                await asyncio.to_thread(
                    self.state.set_answer_location, reply.meta["answer_id"], message_id=sent.id
                )

    # -- job status messages ---------------------------------------------------------------------
    async def link_status_message(
        self, interaction: discord.Interaction, job_id: str, message: discord.Message
    ) -> None:
        """Remember which message shows the job (in the guild's notice channel when one is set)."""
        ctx = await self.context_for(interaction)
        actor, config = ctx.actor, ctx.config
        channel_id, message_id = message.channel.id, message.id
        if config.notice_channel_id and config.notice_channel_id != channel_id:
            update = await asyncio.to_thread(handlers.job_status, self.settings, job_id, ctx.locale)
            if update is not None:
                notice = self.get_partial_messageable(config.notice_channel_id)
                kwargs = {k: v for k, v in message_kwargs(fit(update.reply)[-1]).items() if v is not None}
                try:
                    posted = await notice.send(**kwargs)
                    channel_id, message_id = posted.channel.id, posted.id
                except discord.HTTPException as exc:
                    log.warning("cannot post in notice channel %s: %s", config.notice_channel_id, exc)
        await asyncio.to_thread(
            self.state.link_job_message,
            job_id,
            channel_id=channel_id,
            message_id=message_id,
            user_id=actor.user_id,
            guild_id=actor.guild_id,
            locale=ctx.locale,
        )

    async def _watch_jobs(self) -> None:
        await self.wait_until_ready()
        while not self.is_closed():
            try:
                await self.refresh_job_messages()
            except Exception:  # a bad tick must not stop the watcher
                log.exception("job status refresh failed")
            await asyncio.sleep(self.watch_interval)

    async def refresh_job_messages(self) -> int:
        """Edit every open job message whose job changed; returns how many were edited."""
        rows = await asyncio.to_thread(self.state.open_job_messages)
        edited = 0
        for row in rows:
            try:
                update = await asyncio.to_thread(
                    handlers.job_status, self.settings, row["job_id"], row.get("locale")
                )
            except HipbotError as exc:  # coordinator down: keep the link, retry next tick
                log.warning("cannot read job %s: %s", row["job_id"], exc)
                continue
            if update is None:
                await asyncio.to_thread(
                    self.state.update_job_message, row["job_id"], state="gone", render="", final=True
                )
                continue
            render = json.dumps(update.reply.to_dict(), sort_keys=True)
            if render == row["last_render"]:
                continue
            channel = self.get_partial_messageable(row["channel_id"])
            message = channel.get_partial_message(row["message_id"])
            [part] = fit(update.reply)[-1:]
            kwargs = message_kwargs(part)
            files = kwargs.pop("files")
            try:
                await message.edit(attachments=files, **kwargs)
                if update.final and row["user_id"]:
                    with using(row.get("locale")):
                        done = _("<@{user}> fine-tune `{job}` {state}.").format(
                            user=row["user_id"], job=row["job_id"], state=handlers.state_name(update.state)
                        )
                    await channel.send(
                        done,
                        reference=message.to_reference(fail_if_not_exists=False),
                        allowed_mentions=discord.AllowedMentions(users=True),
                    )
            except discord.NotFound:
                await asyncio.to_thread(
                    self.state.update_job_message,
                    row["job_id"],
                    state=update.state,
                    render=render,
                    final=True,
                )
                continue
            except discord.HTTPException as exc:
                log.warning("cannot edit the status message of job %s: %s", row["job_id"], exc)
                continue
            await asyncio.to_thread(
                self.state.update_job_message,
                row["job_id"],
                state=update.state,
                render=render,
                final=update.final,
            )
            edited += 1
        return edited


async def stream_reply(interaction: discord.Interaction, chunks: Iterator[str], header: str = "") -> str:
    """Show a streamed answer by editing the reply about once a second; past 2000 characters the
    text continues in a new follow-up message that is edited in turn. Returns the whole text."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def pump() -> None:
        try:
            for piece in chunks:
                loop.call_soon_threadsafe(queue.put_nowait, ("data", piece))
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
        except HipbotError as exc:
            loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
        except Exception as exc:  # surfaced to the user as a message, logged with its traceback
            log.exception("chat stream failed")
            loop.call_soon_threadsafe(
                queue.put_nowait,
                ("error", HipbotError(_("the chat stream broke: {error}").format(error=exc))),
            )

    worker = asyncio.create_task(asyncio.to_thread(pump))
    text = ""
    page_start = 0  # where the current message's text starts
    current: discord.abc.Messageable | Any = None  # the follow-up message being edited, None = original
    last_edit = 0.0
    shown = ""
    budget = MESSAGE_LIMIT - len(header) - 8

    async def show(final: bool) -> None:
        nonlocal page_start, current, shown
        while len(text) - page_start > budget:
            cut = text.rfind("\n", page_start, page_start + budget)
            cut = cut if cut > page_start else page_start + budget
            await _edit_page(interaction, current, header + text[page_start:cut])
            page_start = cut
            current = await interaction.followup.send(content="…", wait=True)
        body = header + text[page_start:] + ("" if final else " ▌")
        if body != shown:
            await _edit_page(interaction, current, body or _("(empty reply)"))
            shown = body

    while True:
        kind, value = await queue.get()
        if kind == "data":
            text += value
            if time.monotonic() - last_edit >= CHAT_EDIT_INTERVAL_S:
                await show(final=False)
                last_edit = time.monotonic()
            continue
        if kind == "error":
            if text:
                await show(final=True)
            await send_reply(interaction, error_reply(value.message, value.hint))
        else:
            await show(final=True)
        break
    await worker
    return text


async def _edit_page(interaction: discord.Interaction, message: Any, content: str) -> None:
    if message is None:
        await interaction.edit_original_response(content=truncate(content, MESSAGE_LIMIT))
    else:
        await message.edit(content=truncate(content, MESSAGE_LIMIT))
