"""Buttons on Discord messages, and the conversion of a ``Reply`` into what discord.py sends.

Every button is a ``HipbotButton``: a ``DynamicItem`` whose custom_id (``hipbot:vote:up:12``) says
what the click means, so buttons keep working on old messages after a restart. The click goes to
``handlers.press``, the same call the console's ``/press`` makes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from typing import TYPE_CHECKING, Any

import discord

from hipbot.bot import handlers
from hipbot.bot.replies import Button, Embed, Reply, fit
from hipbot.i18n import using

if TYPE_CHECKING:
    from hipbot.bot.discord_app import HipBot

_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "secondary": discord.ButtonStyle.secondary,
    "success": discord.ButtonStyle.success,
    "danger": discord.ButtonStyle.danger,
}

# Clicks whose handler may be slow (publishing talks to vLLM servers, a port runs hipcc) are deferred first.
_SLOW_PREFIXES = ("hipbot:publish:", "hipbot:port:")


class HipbotButton(discord.ui.DynamicItem[discord.ui.Button], template=r"hipbot:(?P<rest>[\w:.\-]+)"):
    def __init__(
        self, custom_id: str, label: str = "", style: str = "secondary", emoji: str | None = None
    ) -> None:
        super().__init__(
            discord.ui.Button(
                custom_id=custom_id,
                label=label or None,
                style=_STYLES.get(style, _STYLES["secondary"]),
                emoji=emoji,
            )
        )

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button, match: re.Match[str], /
    ) -> HipbotButton:
        return cls(item.custom_id or f"hipbot:{match['rest']}", item.label or "", emoji=None)

    async def callback(self, interaction: discord.Interaction) -> None:
        bot: HipBot = interaction.client  # type: ignore[assignment]
        custom_id = self.item.custom_id or ""
        if custom_id.startswith(_SLOW_PREFIXES):
            await interaction.response.defer(ephemeral=True, thinking=True)
        ctx = await bot.context_for(interaction)
        reply = await asyncio.to_thread(handlers.safe, handlers.press, ctx, custom_id)
        reply.ephemeral = True
        with using(ctx.locale):  # the notes fit() adds
            await send_reply(interaction, reply)


def build_view(buttons: list[Button]) -> discord.ui.View | None:
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for b in buttons:
        item = HipbotButton(b.custom_id, b.label, b.style, b.emoji)
        item.item.disabled = b.disabled
        view.add_item(item)
    return view


def build_embed(embed: Embed) -> discord.Embed:
    out = discord.Embed(
        title=embed.title or None,
        description=embed.description or None,
        url=embed.url,
        color=embed.color,
    )
    for f in embed.fields:
        out.add_field(name=f.name, value=f.value, inline=f.inline)
    if embed.footer:
        out.set_footer(text=embed.footer)
    if embed.image:
        out.set_image(url=f"attachment://{embed.image}")
    return out


def message_kwargs(reply: Reply) -> dict[str, Any]:
    """One fitted ``Reply`` as keyword arguments for ``send``/``edit`` (content, embeds, files, view)."""
    kwargs: dict[str, Any] = {
        "content": reply.text or None,
        "embeds": [build_embed(e) for e in reply.embeds],
        "files": [
            discord.File(io.BytesIO(a.data), filename=a.name, description=a.description or None)
            for a in reply.attachments
        ],
    }
    view = build_view(reply.buttons)
    if view is not None:
        kwargs["view"] = view
    return kwargs


async def send_reply(interaction: discord.Interaction, reply: Reply) -> list[discord.Message | None]:
    """Send a reply to an interaction, split to Discord's limits.

    Before any response: the first message is the response itself. After a public defer, an error
    must stay private, so the "thinking…" message is deleted and the error goes as an ephemeral
    follow-up.
    """
    messages = fit(reply, interaction.filesize_limit or 10 * 1024 * 1024)
    sent: list[discord.Message | None] = []
    deferred_public = interaction.response.is_done() and not _deferred_ephemeral(interaction)
    if (
        reply.ephemeral
        and deferred_public
        and interaction.response.type is discord.InteractionResponseType.deferred_channel_message
    ):
        with contextlib.suppress(discord.HTTPException):
            await interaction.delete_original_response()
    for message in messages:
        kwargs = message_kwargs(message)
        if not interaction.response.is_done():
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            callback = await interaction.response.send_message(ephemeral=message.ephemeral, **kwargs)
            resource = callback.resource if callback is not None else None
            sent.append(resource if isinstance(resource, discord.InteractionMessage) else None)
        else:
            if kwargs.get("content") is None:
                kwargs.pop("content")
            sent.append(await interaction.followup.send(ephemeral=message.ephemeral, wait=True, **kwargs))
    return sent


def _deferred_ephemeral(interaction: discord.Interaction) -> bool:
    return bool(interaction.extras.get("deferred_ephemeral"))


async def defer(interaction: discord.Interaction, *, ephemeral: bool = False) -> None:
    """Acknowledge at once (Discord allows 3 s), remembering whether the thinking message is private."""
    interaction.extras["deferred_ephemeral"] = ephemeral
    await interaction.response.defer(ephemeral=ephemeral, thinking=True)
