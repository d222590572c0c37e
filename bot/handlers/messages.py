"""What is not a slash command: a message that mentions the bot, and a button click."""

from __future__ import annotations

import re

from hipbot.bot.handlers.ask import ask, more_sources, vote
from hipbot.bot.handlers.common import Context
from hipbot.bot.handlers.hipify import CODE_EXTENSIONS, convert_message, extract_code_blocks, port_snippet
from hipbot.bot.handlers.serve import publish
from hipbot.bot.replies import Reply
from hipbot.errors import HipbotError
from hipbot.i18n import _

_MENTION_RE = re.compile(r"<@[!&]?\d+>")


def mention(ctx: Context, content: str, attachments: list[tuple[str, bytes]] | None = None) -> Reply:
    """A message that mentions the bot: a CUDA block is converted, anything else is a question."""
    text = _MENTION_RE.sub("", content or "").strip()
    blocks = extract_code_blocks(text)
    if blocks or any(n.lower().endswith(CODE_EXTENSIONS) for n, _ in attachments or []):
        return convert_message(ctx, text, attachments)
    if not text:
        from hipbot.bot.commands import help_reply  # the table imports the handlers

        return help_reply()
    return ask(ctx, text)


def press(ctx: Context, custom_id: str) -> Reply:
    """What a button click means; the id says it all, so clicks work after a restart."""
    parts = custom_id.split(":")
    try:
        if parts[:2] == ["hipbot", "vote"]:
            return vote(ctx, int(parts[3]), +1 if parts[2] == "up" else -1)
        if parts[:2] == ["hipbot", "sources"]:
            return more_sources(ctx, int(parts[2]))
        if parts[:2] == ["hipbot", "publish"]:
            return publish(ctx, parts[2])
        if parts[:2] == ["hipbot", "port"] and len(parts) == 4:
            return port_snippet(ctx, parts[2], parts[3])
    except (IndexError, ValueError):
        pass
    raise HipbotError(_("this button ({id}) is not one the bot knows").format(id=custom_id))
