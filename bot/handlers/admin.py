"""Admin commands: /config, /ingest, /workers."""

from __future__ import annotations

import re
from typing import Any

from hipbot.bot import permissions
from hipbot.bot.handlers.common import COLOR_INFO, COLOR_OK, Context
from hipbot.bot.replies import Embed, Field, Reply
from hipbot.bot.state import GuildConfig
from hipbot.errors import HipbotError
from hipbot.jobs.finetune.backends import jobs_backend


def _role_list(value: str) -> list[str]:
    return [part.strip().lstrip("@") for part in re.split(r"[,\s]+", value or "") if part.strip()]


def config(ctx: Context, **changes: Any) -> Reply:
    """Show the guild's settings, or change some; only admins change them."""
    current = ctx.config
    updates = {k: v for k, v in changes.items() if v is not None}
    if updates:
        permissions.require_admin(ctx.actor, current, "/config")
        for key, value in updates.items():
            if key not in GuildConfig.EDITABLE:
                raise HipbotError(
                    f"unknown setting {key!r}", hint="settings: " + ", ".join(GuildConfig.EDITABLE)
                )
            if key in ("finetune_roles", "admin_roles"):
                value = _role_list(str(value)) if not isinstance(value, list) else value
            elif key == "notice_channel_id":
                value = int(str(value).strip("<#>")) if str(value).strip("<#>") else None
            elif key.endswith("_s"):
                value = float(value)
                if value < 0:
                    raise HipbotError(f"{key} must be 0 or more seconds")
            else:
                value = int(value)
                if value < 0:
                    raise HipbotError(f"{key} must be 0 or more")
            setattr(current, key, value)
        ctx.state.save_guild_config(current, user_id=ctx.actor.user_id)
        ctx.audit("config", target=str(current.guild_id), **updates)
    fields = [
        Field("Fine-tune roles", ", ".join(current.finetune_roles) or "(admins only)", inline=True),
        Field("Admin roles", ", ".join(current.admin_roles) or "(Manage Server only)", inline=True),
        Field(
            "Fine-tune quotas",
            f"per user: {current.max_running_per_user} running, {current.max_daily_per_user}/day\n"
            f"per server: {current.max_running_per_guild} running, {current.max_daily_per_guild}/day",
        ),
        Field(
            "Cooldowns",
            f"/ask {current.ask_cooldown_s:g} s, /hipify {current.hipify_cooldown_s:g} s",
            inline=True,
        ),
        Field(
            "Job notices",
            f"<#{current.notice_channel_id}>"
            if current.notice_channel_id
            else "(the channel of the command)",
            inline=True,
        ),
    ]
    title = "Settings updated" if updates else "Settings of this server"
    return Reply(embeds=[Embed(title=title, fields=fields, color=COLOR_INFO)], ephemeral=True)


def ingest(ctx: Context) -> Reply:
    permissions.require_admin(ctx.actor, ctx.config, "/ingest")
    from hipbot.agents.docs import ingest as docs_ingest

    summary = docs_ingest.ingest(ctx.settings, progress=False)
    ctx.audit("ingest", **summary.to_dict())
    return Reply(embeds=[Embed(title="Docs ingested", description=str(summary), color=COLOR_OK)])


def workers(ctx: Context) -> Reply:
    permissions.require_admin(ctx.actor, ctx.config, "/workers")
    rows = jobs_backend(ctx.settings).workers()
    if not rows:
        return Reply(
            text="No GPU workers are registered.",
            embeds=[
                Embed(
                    title="Lend a GPU",
                    description="`hipbot finetune token` makes a registration token; the volunteer runs "
                    "`hipbot worker --coordinator URL --token TOKEN`.",
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
                f"{w.gpu_count}× {w.backend}: {names or '-'}\nlast heartbeat {w.last_seen or 'never'}",
            )
        )
    return Reply(
        embeds=[Embed(title=f"GPU workers ({len(rows)})", fields=fields, color=COLOR_INFO)], ephemeral=True
    )
