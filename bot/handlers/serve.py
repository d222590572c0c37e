"""Serving: /models, /chat (streamed) and /publish of adapters to the vLLM servers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from hipbot.bot.handlers.common import (
    COLOR_INFO,
    COLOR_OK,
    Context,
    parse_job_id,
    require_owner_or_admin,
)
from hipbot.bot.replies import Embed, Field, Reply
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import _
from hipbot.jobs.finetune.backends import finished_adapter, jobs_backend
from hipbot.jobs.finetune.models import JobInfo


def _registry(settings: Settings) -> Any:
    from hipbot.jobs.serve.registry import Registry

    return Registry.open(settings)


def model_names(settings: Settings) -> list[str]:
    """Adapters and base models one can chat with (for autocomplete)."""
    registry = _registry(settings)
    names = [a.name for a in registry.list() if a.servers]
    names += sorted({s.served_model for s in registry.servers()})
    return names


def models(ctx: Context) -> Reply:
    registry = _registry(ctx.settings)
    adapters = registry.list()
    servers = registry.servers()
    fields = []
    for a in adapters[:20]:
        where = ", ".join(a.servers) if a.servers else _("not published")
        about = _("base `{base}` · rank {rank} · {targets} · template {template}").format(
            base=a.base_model, rank=a.rank, targets=", ".join(a.target_modules), template=a.template_label
        )
        job = " · " + _("job #{id}").format(id=a.job_id) if a.job_id else ""
        fields.append(Field(a.name, f"{about}\n{where}{job}"))
    for s in servers:
        fields.append(
            Field(
                _("base: {model}").format(model=s.served_model),
                _("server `{name}` (max LoRA rank {rank})").format(name=s.name, rank=s.max_lora_rank),
                inline=True,
            )
        )
    if not fields:
        return Reply(
            text=_("No adapters or vLLM servers are registered yet."),
            embeds=[
                Embed(
                    title=_("Serving"),
                    description=_("An admin adds a server with `hipbot serve servers add NAME URL`."),
                )
            ],
        )
    return Reply(embeds=[Embed(title=_("Models"), fields=fields, color=COLOR_INFO)])


def chat(ctx: Context, adapter: str, prompt: str, *, max_tokens: int = 512) -> Iterator[str]:
    """The streamed answer of an adapter (or of a server's base model), checked before it starts."""
    from hipbot.jobs.serve import chat as chat_lib

    if not prompt or not prompt.strip():
        raise HipbotError(_("the prompt is empty"))
    registry = _registry(ctx.settings)
    name = adapter.strip()
    if registry.find(name) is None:
        bases = {s.served_model for s in registry.servers()}
        if name not in bases and name not in ("base", ""):
            raise HipbotError(
                _("no adapter or base model named {name!r}").format(name=name),
                hint=_("/models lists what you can chat with"),
            )
        target = None
    else:
        target = name
    chat_lib.resolve_target(ctx.settings, target, registry)  # unknown, unpublished or no server: say so now
    return chat_lib.stream_chat(
        ctx.settings, prompt, adapter=target, registry=registry, max_tokens=max_tokens
    )


def _adapter_name_for_job(job: JobInfo) -> str:
    slug = re.sub(r"[^a-z0-9.-]+", "-", (job.name or "adapter").lower()).strip("-.") or "adapter"
    return f"{slug[:50]}-job{job.id}"


def publish(ctx: Context, adapter: str) -> Reply:
    """Publish a registered adapter, or a succeeded job's adapter (``#12``) after registering it."""
    from hipbot.jobs.serve import publish as publish_lib

    registry = _registry(ctx.settings)
    target = adapter.strip()
    if target.lstrip("#").isdigit() and registry.find(target) is None:
        found = registry.by_job(target.lstrip("#"))
        if found is None:
            job_data = jobs_backend(ctx.settings).get(parse_job_id(target))
            require_owner_or_admin(ctx, job_data.owner, _("job #{id}").format(id=job_data.id))
            job_data = finished_adapter(ctx.settings, job_data.id)
            from pathlib import Path

            found = publish_lib.register_adapter(
                registry,
                ctx.settings,
                _adapter_name_for_job(job_data),
                Path(job_data.adapter_dir),
                base_model=job_data.base_model,
                job_id=str(job_data.id),
                owner=job_data.owner,
            )
        target = found.name
    entry = registry.get(target)
    require_owner_or_admin(ctx, entry.owner, _("adapter {name}").format(name=entry.name))
    results = publish_lib.publish(registry, entry.name)
    ctx.audit("publish", target=entry.name, servers=[r.server for r in results])
    lines = [
        f"`{r.server}`: {publish_lib.action_name(r.action)}" + (f"\n⚠️ {r.warning}" if r.warning else "")
        for r in results
    ]
    return Reply(
        text=_("🚀 `{name}` is live: chat with `/chat adapter:{name}`").format(name=entry.name),
        embeds=[
            Embed(
                title=_("Published {name}").format(name=entry.name),
                description="\n".join(lines),
                color=COLOR_OK,
            )
        ],
    )


def model_choices(ctx: Context, current: str = "") -> list[tuple[str, str]]:
    """(name, name) of what one can chat with whose name contains ``current``, for autocompletion."""
    return [(n, n) for n in model_names(ctx.settings) if current.lower() in n.lower()]
