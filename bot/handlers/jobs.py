"""Fine-tune jobs: /finetune, /jobs, /job, /cancel, and the status message each job keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hipbot.bot import permissions
from hipbot.bot.handlers.common import (
    COLOR_FAIL,
    COLOR_INFO,
    COLOR_OK,
    Context,
    is_owner,
    owner_tag,
    owner_user_id,
    parse_job_id,
)
from hipbot.bot.replies import Attachment, Button, Embed, Field, Reply, truncate
from hipbot.config import Settings
from hipbot.errors import HipbotError, JobNotFound
from hipbot.i18n import _, localized, using
from hipbot.jobs.finetune.backends import jobs_backend
from hipbot.jobs.finetune.models import JobInfo
from hipbot.jobs.finetune.queue import FINAL, state_name

STATE_ICONS = {
    "queued": "⏳",
    "assigned": "📦",
    "running": "🏃",
    "succeeded": "✅",
    "failed": "❌",
    "cancelled": "🚫",
}
STATE_COLORS = {"succeeded": COLOR_OK, "failed": COLOR_FAIL, "cancelled": 0x95A5A6}


def progress_bar(done: int | None, total: int | None, width: int = 20) -> str:
    if not total or done is None:
        return "░" * width
    filled = max(0, min(width, round(width * done / total)))
    return "█" * filled + "░" * (width - filled)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return _("{s} s").format(s=seconds)
    if seconds < 3600:
        return _("{m} min {s:02d} s").format(m=seconds // 60, s=seconds % 60)
    return _("{h} h {m:02d} min").format(h=seconds // 3600, m=seconds % 3600 // 60)


def job_embed(job: JobInfo) -> Embed:
    """One job as the status message shows it: state, progress bar, step, loss, ETA, worker, error."""
    state = job.state
    step, total = job.progress_step, job.progress_total
    progress = job.progress
    lines = [f"{STATE_ICONS.get(state, '•')} **{state_name(state)}**"]
    if job.cancel_requested and state not in FINAL:
        lines[0] += " " + _("(cancel requested)")
    if step is not None and total:
        percent = 100 * step // max(total, 1)
        lines.append(
            f"`{progress_bar(step, total)}` "
            + _("{percent} % · step {step}/{total}").format(percent=percent, step=step, total=total)
        )
    fields = [Field(_("Base model"), f"`{job.base_model}`", inline=True)]
    spec = job.spec
    if spec.get("lora_rank"):
        targets = ",".join(spec.get("lora_target") or []) or "all"
        fields.append(
            Field(
                "LoRA",
                _("rank {rank}, {targets}").format(rank=spec["lora_rank"], targets=targets),
                inline=True,
            )
        )
    if job.progress_loss is not None:
        fields.append(Field(_("Loss"), f"{job.progress_loss:.4f}", inline=True))
    if state in ("assigned", "running") and progress.get("eta_seconds") is not None:
        fields.append(Field(_("ETA"), _duration(progress["eta_seconds"]), inline=True))
    if progress.get("tokens_per_second"):
        speed = _("{n:.0f} tokens/s").format(n=progress["tokens_per_second"])
        fields.append(Field(_("Speed"), speed, inline=True))
    if job.worker_id:
        fields.append(Field(_("Worker"), f"`{job.worker_id}`", inline=True))
    if job.memory_gib:
        memory = _("~{n:.1f} GiB per GPU").format(n=job.memory_gib)
        fields.append(Field(_("Memory estimate"), memory, inline=True))
    if job.attempts > 1:
        fields.append(Field(_("Attempts"), f"{job.attempts}/{job.max_attempts}", inline=True))
    metrics = job.metrics
    if state == "succeeded" and metrics:
        summary = []
        if metrics.get("first_loss") is not None and metrics.get("final_loss") is not None:
            summary.append(
                _("loss {first:.4f} → {final:.4f}").format(
                    first=metrics["first_loss"], final=metrics["final_loss"]
                )
            )
        if metrics.get("global_step"):
            summary.append(_("{n} steps").format(n=metrics["global_step"]))
        if metrics.get("train_runtime"):
            summary.append(_("in {duration}").format(duration=_duration(metrics["train_runtime"])))
        if summary:
            fields.append(Field(_("Result"), ", ".join(summary)))
    if state == "failed" and job.error:
        fields.append(Field(_("Error"), f"```\n{truncate(job.error, 990)}\n```"))
    owner_id = owner_user_id(job.owner)
    created = _("created {at}").format(at=job.created_at)
    footer = _("owner {owner}").format(owner=job.owner or "-") + f" · {created}"
    return Embed(
        title=truncate(_("Fine-tune #{id} {name}").format(id=job.id, name=job.name), 256),
        description="\n".join(lines),
        fields=fields,
        footer=footer if owner_id is None else created,
        color=STATE_COLORS.get(state, COLOR_INFO),
    )


def _loss_curve(job: JobInfo) -> Attachment | None:
    """The trainer's loss.png beside the adapter, when this host can read it."""
    from pathlib import Path

    for candidate in job.artifacts.get("loss_png"), job.adapter_dir:
        if not candidate:
            continue
        path = Path(candidate)
        path = path / "loss.png" if path.is_dir() else path
        if path.is_file() and path.suffix == ".png":
            return Attachment(f"loss-job{job.id}.png", path.read_bytes(), _("loss curve"))
    return None


def job_reply(job: JobInfo, *, with_files: bool = True) -> Reply:
    embed = job_embed(job)
    reply = Reply(embeds=[embed], meta={"job_id": str(job.id), "state": job.state})
    if job.state == "succeeded":
        curve = _loss_curve(job) if with_files else None
        if curve is not None:
            reply.attachments.append(curve)
            embed.image = curve.name
        reply.buttons.append(Button(f"hipbot:publish:{job.id}", _("Publish"), style="success", emoji="🚀"))
    return reply


@dataclass
class JobUpdate:
    state: str
    final: bool
    reply: Reply


def job_status(settings: Settings, job_id: str | int, locale: str | None = None) -> JobUpdate | None:
    """What a job's status message should show now, in ``locale`` (the language of the one who
    started it); None when the job no longer exists."""
    with using(locale):
        return _job_status(settings, job_id)


def _job_status(settings: Settings, job_id: str | int) -> JobUpdate | None:
    number = parse_job_id(job_id)
    try:
        job = jobs_backend(settings).get(number)
    except JobNotFound:
        return None  # any other error (coordinator unreachable) propagates: keep the link, retry later
    state = job.state
    return JobUpdate(state, state in FINAL, job_reply(job))


def jobs(ctx: Context, scope: str = "mine") -> Reply:
    scope = (scope or "mine").strip().lower()
    if scope not in ("mine", "all"):
        raise HipbotError(_("unknown scope {scope!r}").format(scope=scope), hint=_("use mine or all"))
    owner = owner_tag(ctx.actor) if scope == "mine" else None
    guild = str(ctx.actor.guild_id) if ctx.actor.guild_id and scope == "all" else None
    rows = jobs_backend(ctx.settings).list(owner=owner, guild=guild, limit=25)
    if not rows:
        text = _("No fine-tune jobs of yours yet. start one with /finetune") if scope == "mine" else ""
        return Reply(text=text or _("No fine-tune jobs yet."), ephemeral=True)
    lines = []
    for j in rows:
        step = (
            " · " + _("step {step}/{total}").format(step=j.progress_step, total=j.progress_total)
            if j.progress_total
            else ""
        )
        loss = (
            " · " + _("loss {loss:.3f}").format(loss=j.progress_loss) if j.progress_loss is not None else ""
        )
        owner_id = owner_user_id(j.owner)
        who = f" · <@{owner_id}>" if owner_id and scope == "all" else ""
        lines.append(
            f"{STATE_ICONS.get(j.state, '•')} `#{j.id}` {j.name} **{state_name(j.state)}**{step}{loss}{who}"
        )
    title = _("Your fine-tune jobs") if scope == "mine" else _("Fine-tune jobs")
    return Reply(embeds=[Embed(title=title, description="\n".join(lines), color=COLOR_INFO)], ephemeral=True)


def job(ctx: Context, job_id: str | int) -> Reply:
    return job_reply(jobs_backend(ctx.settings).get(parse_job_id(job_id)))


def cancel(ctx: Context, job_id: str | int) -> Reply:
    number = parse_job_id(job_id)
    backend = jobs_backend(ctx.settings)
    current = backend.get(number)
    if current.state in FINAL:
        raise HipbotError(
            _("job #{id} is already {state}").format(id=number, state=state_name(current.state))
        )
    mine = is_owner(ctx.actor, current.owner)
    owner_id = owner_user_id(current.owner)
    permissions.require_cancel(
        ctx.actor, ctx.config, ctx.actor.user_id if mine else owner_id or -1, f"#{number}"
    )
    updated = backend.cancel(number)
    ctx.audit("finetune.cancel", target=str(number), owner=current.owner, state=updated.state)
    note = (
        _("Job #{id}: cancelled.")
        if updated.state == "cancelled"
        else _("Job #{id}: cancel requested: the worker stops within one heartbeat.")
    )
    reply = job_reply(updated)
    reply.text = note.format(id=number)
    return reply


def build_job_yaml(
    yaml_text: str | None,
    *,
    model: str | None = None,
    dataset: tuple[str, bytes] | None = None,
    dataset_name: str | None = None,
    lora_rank: int | None = None,
    lora_target: str | None = None,
    epochs: float | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """The job's LLaMA-Factory YAML: the attached config with the given options on top, or the
    options alone. An attached dataset is named after its file, as the queue declares it."""
    import yaml

    raw: dict[str, Any] = {}
    if yaml_text is not None:
        try:
            loaded = yaml.safe_load(yaml_text)
        except yaml.YAMLError as exc:
            raise HipbotError(
                _("the config is not valid YAML: {error}").format(error=exc).replace("\n", " ")
            ) from exc
        if not isinstance(loaded, dict):
            raise HipbotError(
                _("the config must be a mapping of keys to values (a LLaMA-Factory train YAML)")
            )
        raw.update(loaded)
    elif not model:
        raise HipbotError(
            _("give a config file or at least a model and a dataset"),
            hint="/finetune model:HuggingFaceTB/SmolLM2-135M-Instruct dataset:<attach data.jsonl>",
        )
    overrides = {
        "model_name_or_path": model,
        "lora_rank": lora_rank,
        "lora_target": lora_target,
        "num_train_epochs": epochs,
        "dataset": dataset_name,
    }
    raw.update({k: v for k, v in overrides.items() if v is not None})
    if extra:  # key=value pairs, read as `hipbot finetune run CONFIG key=value` reads them
        from hipbot.jobs.finetune.spec import apply_overrides, parse_overrides

        raw = apply_overrides(raw, parse_overrides([f"{k}={v}" for k, v in extra.items()]).values)
    if dataset is not None and not raw.get("dataset"):
        from pathlib import PurePath

        raw["dataset"] = PurePath(dataset[0]).stem
    if yaml_text is None:
        raw.setdefault("stage", "sft")
        raw.setdefault("finetuning_type", "lora")
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def finetune(
    ctx: Context,
    *,
    yaml_text: str | None = None,
    dataset: tuple[str, bytes] | None = None,
    model: str | None = None,
    dataset_name: str | None = None,
    lora_rank: int | None = None,
    lora_target: str | None = None,
    epochs: float | None = None,
    extra: dict[str, Any] | None = None,
) -> Reply:
    """Validate a fine-tune (config, options, dataset), check roles and quotas, then queue it."""
    permissions.require_finetune(ctx.actor, ctx.config)
    text = build_job_yaml(
        yaml_text,
        model=model,
        dataset=dataset,
        dataset_name=dataset_name,
        lora_rank=lora_rank,
        lora_target=lora_target,
        epochs=epochs,
        extra=extra,
    )
    from hipbot.jobs.finetune.spec import validate_job

    checked = validate_job(text, dataset[1] if dataset else None, dataset[0] if dataset else None)
    if not checked.ok:
        raise HipbotError(checked.error or "")
    backend = jobs_backend(ctx.settings)

    def is_running(job_id: str) -> bool:
        try:
            return backend.get(int(job_id)).state not in FINAL
        except HipbotError:
            return False

    permissions.check_finetune_quota(ctx.state, ctx.actor, ctx.config, is_running)
    submitted = backend.submit(
        text,
        owner=owner_tag(ctx.actor),
        guild=str(ctx.actor.guild_id) if ctx.actor.guild_id else None,
        dataset=dataset[1] if dataset else None,
        dataset_name=dataset[0] if dataset else None,
    )
    job_data = submitted.job
    ctx.state.record_finetune(str(job_data.id), ctx.actor.user_id, ctx.actor.guild_id)
    ctx.audit(
        "finetune.start",
        target=str(job_data.id),
        base_model=job_data.base_model,
        dataset=dataset[0] if dataset else job_data.spec.get("dataset"),
    )
    reply = job_reply(job_data)
    reply.text = _("Queued fine-tune **#{id}**; this message follows the job.").format(id=job_data.id)
    if submitted.warning:
        reply.text += f"\n⚠️ {localized(submitted.warning)}"
    return reply


def job_choices(ctx: Context, current: str = "") -> list[tuple[str, str]]:
    """(label, id) of the user's recent jobs (a server's, for admins), for autocompletion."""
    admin = permissions.is_admin(ctx.actor, ctx.config)
    try:
        rows = jobs_backend(ctx.settings).list(
            owner=None if admin else owner_tag(ctx.actor),
            guild=str(ctx.actor.guild_id) if admin and ctx.actor.guild_id else None,
            limit=25,
        )
    except HipbotError:
        return []
    out = []
    for j in rows:
        label = truncate(f"#{j.id} {j.name} ({state_name(j.state)})", 100)
        if current.lower().lstrip("#") in label.lower():
            out.append((label, str(j.id)))
    return out
