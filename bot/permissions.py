"""Who may do what: roles, cooldowns and fine-tune quotas, decided from plain data.

The Discord layer turns a member into an ``Actor``; the console is one local admin. Every refusal is
a ``HipbotError`` whose message says why and whose hint says what to do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hipbot.bot.state import BotState, GuildConfig
from hipbot.errors import HipbotError
from hipbot.i18n import _

DAY_S = 24 * 3600


@dataclass(frozen=True)
class Actor:
    """The user behind a command, as much as permission checks need."""

    user_id: int
    name: str = ""
    guild_id: int | None = None
    roles: tuple[tuple[int, str], ...] = field(default_factory=tuple)  # (role id, role name)
    guild_admin: bool = False  # Discord's Administrator or Manage Server permission, or the console user
    local: bool = False  # the console's own user: no cooldowns on their own machine

    @property
    def mention(self) -> str:
        return f"<@{self.user_id}>" if self.guild_id else (self.name or str(self.user_id))


CONSOLE_ACTOR = Actor(user_id=0, name="console", guild_admin=True, local=True)


def has_role(actor: Actor, configured: Iterable[str]) -> bool:
    """A configured role matches by id or by name (case-insensitive); ``@everyone`` matches all."""
    wanted = {str(r).strip().lstrip("@").lower() for r in configured if str(r).strip()}
    if "everyone" in wanted:
        return True
    return any(str(rid) in wanted or rname.lower() in wanted for rid, rname in actor.roles)


def is_admin(actor: Actor, config: GuildConfig) -> bool:
    return actor.guild_admin or has_role(actor, config.admin_roles)


def require_admin(actor: Actor, config: GuildConfig, command: str) -> None:
    if not is_admin(actor, config):
        raise HipbotError(
            _("{command} is for admins of this server").format(command=command),
            hint=_("ask someone with Manage Server to run it, or to add your role with /config admin_roles"),
        )


def require_finetune(actor: Actor, config: GuildConfig) -> None:
    """Fine-tunes use volunteers' GPUs: only admins and the roles named in /config may start them."""
    if is_admin(actor, config):
        return
    if not config.finetune_roles:
        raise HipbotError(
            _("fine-tunes are not open to members of this server yet"),
            hint=_("an admin can allow a role with /config finetune_roles:<role>"),
        )
    if not has_role(actor, config.finetune_roles):
        allowed = ", ".join(config.finetune_roles)
        raise HipbotError(
            _("you need one of these roles to start a fine-tune: {roles}").format(roles=allowed),
            hint=_("ask an admin for the role, or to change the list with /config finetune_roles"),
        )


def require_cancel(actor: Actor, config: GuildConfig, owner_id: int | None, job_id: str) -> None:
    """Users cancel their own jobs; admins cancel anyone's."""
    if owner_id is not None and owner_id == actor.user_id:
        return
    if is_admin(actor, config):
        return
    raise HipbotError(
        _("job {job_id} was started by someone else; you can cancel only your own jobs").format(
            job_id=job_id
        ),
        hint=_("ask an admin of this server to cancel it"),
    )


def check_cooldown(
    state: BotState, actor: Actor, command: str, seconds: float, now: float | None = None
) -> None:
    if seconds <= 0 or actor.local:
        return
    wait = state.take_cooldown(actor.user_id, command, seconds, now=now)
    if wait > 0:
        raise HipbotError(
            _("/{command} is cooling down for you: try again in {wait} s").format(
                command=command, wait=math.ceil(wait)
            ),
            hint=_("each user can run /{command} once every {seconds:g} s in this server").format(
                command=command, seconds=seconds
            ),
        )


def check_finetune_quota(
    state: BotState,
    actor: Actor,
    config: GuildConfig,
    is_running: Callable[[str], bool],
    now: float | None = None,
) -> None:
    """Per-user and per-guild limits on running jobs and on jobs started in the last 24 hours.

    ``is_running(job_id)`` asks the job queue whether a job is still queued or running.
    Admins are held to the guild's limits but not to the per-user ones.
    """
    now = time.time() if now is None else now
    day_ago = now - DAY_S
    admin = is_admin(actor, config)
    if not admin:
        mine_today = state.finetunes_since(since_ts=day_ago, user_id=actor.user_id, guild_id=actor.guild_id)
        if len(mine_today) >= config.max_daily_per_user:
            raise HipbotError(
                _("you started {n} fine-tunes in the last 24 hours (limit {limit})").format(
                    n=len(mine_today), limit=config.max_daily_per_user
                ),
                hint=_("try again tomorrow, or ask an admin to raise max_daily_per_user with /config"),
            )
        mine_all = state.finetunes_since(since_ts=0, user_id=actor.user_id, guild_id=actor.guild_id)
        running = [j for j in mine_all if is_running(j)]
        if len(running) >= config.max_running_per_user:
            raise HipbotError(
                _("you already have {n} fine-tune(s) queued or running (limit {limit}): {jobs}").format(
                    n=len(running), limit=config.max_running_per_user, jobs=", ".join(running)
                ),
                hint=_("wait for one to finish, or /cancel it"),
            )
    if actor.guild_id:
        guild_today = state.finetunes_since(since_ts=day_ago, guild_id=actor.guild_id)
        if len(guild_today) >= config.max_daily_per_guild:
            raise HipbotError(
                _("this server started {n} fine-tunes in the last 24 hours (limit {limit})").format(
                    n=len(guild_today), limit=config.max_daily_per_guild
                ),
                hint=_("try again tomorrow, or an admin can raise max_daily_per_guild with /config"),
            )
        guild_all = state.finetunes_since(since_ts=0, guild_id=actor.guild_id)
        guild_running = [j for j in guild_all if is_running(j)]
        if len(guild_running) >= config.max_running_per_guild:
            raise HipbotError(
                _("this server already has {n} fine-tunes queued or running (limit {limit})").format(
                    n=len(guild_running), limit=config.max_running_per_guild
                ),
                hint=_("wait for one to finish; an admin can raise max_running_per_guild with /config"),
            )
