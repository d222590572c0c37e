"""Admin commands: /config, /ingest, /workers."""

from __future__ import annotations

import re
from typing import Any

from hipbot.bot import permissions
from hipbot.bot.handlers.common import COLOR_INFO, COLOR_OK, Context
from hipbot.bot.replies import Embed, Field, Reply
from hipbot.bot.state import GuildConfig
from hipbot.errors import HipbotError
from hipbot.i18n import CHINESE, ENGLISH, _, normalize
from hipbot.jobs.finetune.backends import jobs_backend


def _role_list(value: str) -> list[str]:
    return [part.strip().lstrip("@") for part in re.split(r"[,\s]+", value or "") if part.strip()]


# Each language named in itself, as the /config choices show it.
LANGUAGE_NAMES = {ENGLISH: "English", CHINESE: "简体中文"}


def _language(value: str) -> str:
    """A /config language value: a supported language tag, stored normalized (``en``, ``zh_CN``)."""
    found = normalize(value)
    if found is None:
        raise HipbotError(
            _("the bot does not speak {value!r}").format(value=value),
            hint=_("languages: {names}").format(names=", ".join(LANGUAGE_NAMES)),
        )
    return found


def config(ctx: Context, **changes: Any) -> Reply:
    """Show the guild's settings, or change some; only admins change them."""
    current = ctx.config
    updates = {k: v for k, v in changes.items() if v is not None}
    if updates:
        permissions.require_admin(ctx.actor, current, "/config")
        for key, value in updates.items():
            if key not in GuildConfig.EDITABLE:
                raise HipbotError(
                    _("unknown setting {key!r}").format(key=key),
                    hint=_("settings: {keys}").format(keys=", ".join(GuildConfig.EDITABLE)),
                )
            if key == "language":
                value = _language(str(value))
            elif key in ("finetune_roles", "admin_roles"):
                value = _role_list(str(value)) if not isinstance(value, list) else value
            elif key == "notice_channel_id":
                value = int(str(value).strip("<#>")) if str(value).strip("<#>") else None
            elif key.endswith("_s"):
                value = float(value)
                if value < 0:
                    raise HipbotError(_("{key} must be 0 or more seconds").format(key=key))
            else:
                value = int(value)
                if value < 0:
                    raise HipbotError(_("{key} must be 0 or more").format(key=key))
            setattr(current, key, value)
        ctx.state.save_guild_config(current, user_id=ctx.actor.user_id)
        ctx.audit("config", target=str(current.guild_id), **updates)
    fields = [
        Field(_("Fine-tune roles"), ", ".join(current.finetune_roles) or _("(admins only)"), inline=True),
        Field(_("Admin roles"), ", ".join(current.admin_roles) or _("(Manage Server only)"), inline=True),
        Field(
            _("Fine-tune quotas"),
            _("per user: {running} running, {daily}/day").format(
                running=current.max_running_per_user, daily=current.max_daily_per_user
            )
            + "\n"
            + _("per server: {running} running, {daily}/day").format(
                running=current.max_running_per_guild, daily=current.max_daily_per_guild
            ),
        ),
        Field(
            _("Cooldowns"),
            _("/ask {ask:g} s, /hipify {hipify:g} s").format(
                ask=current.ask_cooldown_s, hipify=current.hipify_cooldown_s
            ),
            inline=True,
        ),
        Field(
            _("Job notices"),
            f"<#{current.notice_channel_id}>"
            if current.notice_channel_id
            else _("(the channel of the command)"),
            inline=True,
        ),
        Field(_("Language"), LANGUAGE_NAMES.get(current.language or ENGLISH, current.language), inline=True),
    ]
    title = _("Settings updated") if updates else _("Settings of this server")
    return Reply(embeds=[Embed(title=title, fields=fields, color=COLOR_INFO)], ephemeral=True)


def ingest(ctx: Context) -> Reply:
    permissions.require_admin(ctx.actor, ctx.config, "/ingest")
    from hipbot.agents.docs import ingest as docs_ingest

    summary = docs_ingest.ingest(ctx.settings, progress=False)
    ctx.audit("ingest", **summary.to_dict())
    return Reply(embeds=[Embed(title=_("Docs ingested"), description=str(summary), color=COLOR_OK)])


def workers(ctx: Context) -> Reply:
    permissions.require_admin(ctx.actor, ctx.config, "/workers")
    rows = jobs_backend(ctx.settings).workers()
    if not rows:
        return Reply(
            text=_("No GPU workers are registered."),
            embeds=[
                Embed(
                    title=_("Lend a GPU"),
                    description=_(
                        "`hipbot finetune token` makes a registration token; the volunteer runs "
                        "`hipbot worker --coordinator URL --token TOKEN`."
                    ),
                )
            ],
            ephemeral=True,
        )
    fields = []
    for w in rows[:25]:
        gpus = w.gpus.get("gpus") or []
        names = ", ".join(
            sorted(
                {
                    f"{g.get('name', '?')} ({g.get('arch', '?')}, {g.get('memory_gib', 0):.0f} GiB)"
                    for g in gpus
                }
            )
        )
        fields.append(
            Field(
                f"{w.name} · {w.id}",
                f"{w.gpu_count}× {w.backend}: {names or '-'}\n"
                + _("last heartbeat {at}").format(at=w.last_seen or _("never")),
            )
        )
    return Reply(
        embeds=[Embed(title=_("GPU workers ({n})").format(n=len(rows)), fields=fields, color=COLOR_INFO)],
        ephemeral=True,
    )
