"""What every handler shares: the ``Context`` of a command, ``safe``, colours and job owners."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hipbot.bot import permissions
from hipbot.bot.permissions import CONSOLE_ACTOR, Actor
from hipbot.bot.replies import DEFAULT_FILE_LIMIT, Reply, error_reply
from hipbot.bot.state import BotState, GuildConfig
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import ENGLISH, _, using

COLOR_OK = 0x2ECC71
COLOR_INFO = 0xED1C24  # AMD red
COLOR_WARN = 0xF1C40F
COLOR_FAIL = 0xE74C3C


@dataclass
class Context:
    """Who asks, where, and the app's settings and state."""

    settings: Settings
    state: BotState
    actor: Actor = CONSOLE_ACTOR
    channel_id: int | None = None
    thread_id: int | None = None
    file_limit: int = DEFAULT_FILE_LIMIT
    locale: str = ENGLISH  # the language of the replies (``hipbot.i18n``)
    _config: GuildConfig | None = field(default=None, repr=False)

    @property
    def config(self) -> GuildConfig:
        if self._config is None:
            self._config = self.state.guild_config(self.actor.guild_id)
        return self._config

    def check_cooldown(self, command: str) -> None:
        """Refuse when this user ran ``command`` too recently; the command table names the setting."""
        from hipbot.bot.commands import command as table_row  # the table imports the handlers

        setting = table_row(command).cooldown
        if setting is not None:
            permissions.check_cooldown(self.state, self.actor, command, getattr(self.config, setting))

    def audit(self, action: str, target: str = "", **detail: Any) -> None:
        self.state.audit(
            action,
            user_id=self.actor.user_id,
            user_name=self.actor.name,
            guild_id=self.actor.guild_id,
            target=target,
            detail=detail,
        )


def safe(fn: Callable[..., Reply], *args: Any, **kwargs: Any) -> Reply:
    """Run a handler in its context's language and turn a user error into an ephemeral reply that
    says what to do."""
    locale = args[0].locale if args and isinstance(args[0], Context) else None
    with using(locale):
        try:
            return fn(*args, **kwargs)
        except HipbotError as exc:
            return error_reply(exc.message, exc.hint)


def owner_tag(actor: Actor) -> str:
    """How the bot names a job's owner in the queue: the console is the local login."""
    if actor.local:
        import getpass

        return getpass.getuser()
    return f"discord:{actor.user_id}"


def owner_user_id(owner: str | None) -> int | None:
    if owner and owner.startswith("discord:") and owner[8:].isdigit():
        return int(owner[8:])
    return None


def is_owner(actor: Actor, owner: str | None) -> bool:
    return owner is not None and owner == owner_tag(actor)


def require_owner_or_admin(ctx: Context, owner: str | None, what: str) -> None:
    if is_owner(ctx.actor, owner) or permissions.is_admin(ctx.actor, ctx.config):
        return
    raise HipbotError(
        _("{what} belongs to someone else").format(what=what), hint=_("its owner or an admin can publish it")
    )


def parse_job_id(value: str | int) -> int:
    text = str(value).strip().lstrip("#")
    if not text.isdigit():
        raise HipbotError(
            _("{value!r} is not a job id").format(value=value),
            hint=_("job ids are numbers, e.g. /job 12 (see /jobs)"),
        )
    return int(text)
