"""The bot's commands as plain functions: inputs in, a ``Reply`` out (or a ``HipbotError``).

Discord and the console both call these; neither holds logic of its own. Each handler calls the
same library functions as the CLI (translator, answers, job queue, adapter registry), imported
lazily so that a front end starts without loading torch or the embedding model.
Handlers are synchronous and may be slow (retrieval, translation, SQLite): the Discord layer runs
them in a thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from hipbot.bot import permissions
from hipbot.bot.permissions import CONSOLE_ACTOR, Actor
from hipbot.bot.replies import (
    DEFAULT_FILE_LIMIT,
    Attachment,
    Button,
    Embed,
    Field,
    Link,
    Reply,
    code_reply_parts,
    error_reply,
    truncate,
)
from hipbot.bot.state import BotState, GuildConfig
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.jobs.finetune.backends import jobs_backend

CODE_EXTENSIONS = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc", ".cxx", ".c", ".hip")
MAX_CODE_BYTES = 1024 * 1024
SOURCES_SHOWN = 3
COLOR_OK = 0x2ECC71
COLOR_INFO = 0xED1C24  # AMD red
COLOR_WARN = 0xF1C40F
COLOR_FAIL = 0xE74C3C

# ```lang\n ... ``` with any (or no) language tag; the closing fence may end the message.
_BLOCK_RE = re.compile(r"```[ \t]*([\w+#.-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_MENTION_RE = re.compile(r"<@[!&]?\d+>")
_CUDA_HINT_RE = re.compile(r"\b(cuda\w*|__global__|__device__|__shared__|cublas\w*|curand\w*|cufft\w*)\b|<<<")


@dataclass
class Context:
    """Who asks, where, and the app's settings and state."""

    settings: Settings
    state: BotState
    actor: Actor = CONSOLE_ACTOR
    channel_id: int | None = None
    thread_id: int | None = None
    file_limit: int = DEFAULT_FILE_LIMIT
    _config: GuildConfig | None = field(default=None, repr=False)

    @property
    def config(self) -> GuildConfig:
        if self._config is None:
            self._config = self.state.guild_config(self.actor.guild_id)
        return self._config

    def audit(self, action: str, target: str = "", **detail: Any) -> None:
        self.state.audit(
            action,
            user_id=self.actor.user_id,
            user_name=self.actor.name,
            guild_id=self.actor.guild_id,
            target=target,
            detail=detail,
        )


def safe(fn: Any, *args: Any, **kwargs: Any) -> Reply:
    """Run a handler and turn a user error into an ephemeral reply that says what to do."""
    try:
        return fn(*args, **kwargs)
    except HipbotError as exc:
        return error_reply(exc.message, exc.hint)


# -- /ask -------------------------------------------------------------------------------------------


def _question_with_context(ctx: Context, question: str) -> str:
    """In a thread, a follow-up ("and the async one?") is read together with the thread's last question."""
    if not ctx.thread_id:
        return question
    history = ctx.state.thread_history(ctx.thread_id, limit=2)
    if not history:
        return question
    previous = " ".join(h["question"] for h in history)
    return f"{question}\n(follow-up to: {previous})"


def _source_link(source: dict[str, Any]) -> Link:
    section = source.get("section") or ""
    name = PurePath(source.get("path") or "").name
    label = f"{section} — {name}" if section and name else section or name or "source"
    return Link(truncate(label, 200), source.get("url") or "")


def ask(ctx: Context, question: str, *, k: int = 8) -> Reply:
    from hipbot.agents.docs.answers import check_question

    question = check_question(question or "", example='/ask question:"what replaces cudaMemcpyAsync?"')
    permissions.check_cooldown(ctx.state, ctx.actor, "ask", ctx.config.ask_cooldown_s)
    from hipbot.agents.docs import answers

    query = _question_with_context(ctx, question)
    result = answers.ask(query, ctx.settings, k=k).to_dict()
    answer_id = ctx.state.record_answer(
        question,
        result,
        context=query,
        user_id=ctx.actor.user_id,
        guild_id=ctx.actor.guild_id,
        channel_id=ctx.channel_id,
        thread_id=ctx.thread_id,
    )
    reply = answer_reply(answer_id, question, result)
    reply.meta["answer_id"] = answer_id
    return reply


def answer_reply(answer_id: int, question: str, result: dict[str, Any]) -> Reply:
    sources = result.get("sources") or []
    apis = result.get("apis") or []
    fields = []
    if apis:
        names = [a if isinstance(a, str) else a.get("cuda") or a.get("name") or str(a) for a in apis]
        fields.append(Field("APIs", truncate(", ".join(f"`{n}`" for n in names), 1024)))
    embed = Embed(
        title=truncate(question, 256),
        description=result.get("answer") or "(no answer)",
        fields=fields,
        links=[_source_link(s) for s in sources[:SOURCES_SHOWN]],
        footer=f"answer #{answer_id} · {result.get('mode', '')} · vote to help improve the answers",
        color=COLOR_INFO,
    )
    buttons = []
    if len(sources) > SOURCES_SHOWN:
        buttons.append(
            Button(f"hipbot:sources:{answer_id}", f"More sources ({len(sources) - SOURCES_SHOWN})")
        )
    buttons += [
        Button(f"hipbot:vote:up:{answer_id}", "Helpful", emoji="👍"),
        Button(f"hipbot:vote:down:{answer_id}", "Not helpful", emoji="👎"),
    ]
    return Reply(embeds=[embed], buttons=buttons)


def more_sources(ctx: Context, answer_id: int) -> Reply:
    row = ctx.state.answer(answer_id)
    if row is None:
        raise HipbotError(
            f"answer #{answer_id} is not in the database any more", hint="ask the question again"
        )
    sources = row["answer"].get("sources") or []
    embed = Embed(
        title=truncate(f"Sources for: {row['question']}", 256),
        links=[_source_link(s) for s in sources],
        color=COLOR_INFO,
    )
    return Reply(embeds=[embed], ephemeral=True)


def vote(ctx: Context, answer_id: int, value: int) -> Reply:
    if ctx.state.answer(answer_id) is None:
        raise HipbotError(f"answer #{answer_id} is not in the database any more")
    tally = ctx.state.vote(answer_id, ctx.actor.user_id, value)
    mark = "👍" if value > 0 else "👎"
    return Reply(
        text=f"Thanks, your {mark} is recorded for answer #{answer_id} (👍 {tally['up']} · 👎 {tally['down']}).",
        ephemeral=True,
    )


def warm_up(settings: Settings) -> bool:
    """Load the answer engine (API index, embedding model) before the first question arrives;
    False when the docs are not ingested yet (the first /ask then says what to run)."""
    from hipbot.agents.docs import answers

    try:
        answers.get_answerer(settings).warm_up()
    except HipbotError:
        return False
    return True


# -- /hipify and "Convert to HIP" ---------------------------------------------------------------


def _decode_code(data: bytes, name: str) -> str:
    if len(data) > MAX_CODE_BYTES:
        raise HipbotError(
            f"{name} is {len(data) // 1024} KiB; the bot converts files up to {MAX_CODE_BYTES // 1024} KiB",
            hint="run `hipbot hipify FILE` locally for big files",
        )
    from hipbot.agents.hipify.translate import check_text

    return check_text(data, name)


def check_code_filename(name: str) -> None:
    if not name.lower().endswith(CODE_EXTENSIONS):
        raise HipbotError(
            f"{name!r} is not a source file the bot converts",
            hint="attach a " + ", ".join(CODE_EXTENSIONS[:4]) + " file, or paste the code in the code option",
        )


def _output_name(name: str) -> str:
    path = PurePath(name)
    if path.suffix.lower() in (".cu", ".cpp", ".cc", ".cxx", ".c", ""):
        return f"{path.stem or 'snippet'}.hip"
    return path.name  # headers keep their name, as hipify-clang does


def hipify(
    ctx: Context,
    code: str | None = None,
    *,
    attachment: tuple[str, bytes] | None = None,
    arch: str | None = None,
    filename: str | None = None,
) -> Reply:
    """Translate CUDA to HIP: the code inline or as a file, the report as an embed, optionally compiled."""
    if attachment is not None:
        name, data = attachment
        check_code_filename(name)
        code = _decode_code(data, name)
        filename = name
    if code is None or not code.strip():
        raise HipbotError(
            "there is no code to convert", hint="paste CUDA in the code option or attach a .cu file"
        )
    permissions.check_cooldown(ctx.state, ctx.actor, "hipify", ctx.config.hipify_cooldown_s)
    return _translate_reply(code, filename or "snippet.cu", arch)


def _translate_reply(code: str, filename: str, arch: str | None) -> Reply:
    from hipbot.agents.hipify import translate as translator

    result = translator.translate(code, translator.HipifyOptions(), filename=filename)
    if result.report.errors:
        raise HipbotError("; ".join(result.report.errors), hint="send CUDA C++ source text")
    out_name = _output_name(filename)
    text, files = code_reply_parts(result.text, out_name)
    embeds = [_report_embed(result.report.to_dict(), [lint.to_dict() for lint in result.lints], out_name)]
    if arch:
        from hipbot.agents.hipify import compile_check

        embeds.append(_compile_embed(compile_check.check(result.text, arch), arch))
    return Reply(text=text, embeds=embeds, attachments=files, meta={"hip": result.text})


def _report_embed(report: dict[str, Any], lints: list[dict[str, Any]], name: str) -> Embed:
    """hipify's statistics, the identifiers left unconverted (with why) and the AMD lints."""
    fields = []
    by_api = report.get("converted_by_api") or {}
    if by_api:
        fields.append(Field("Converted", ", ".join(f"{api}: {n}" for api, n in by_api.items())))
    unconverted = report.get("unconverted") or []
    if unconverted:
        lines = [f"`{u['name']}` {u['line']}:{u['col']} — {u['reason']}" for u in unconverted[:15]]
        if len(unconverted) > 15:
            lines.append(f"… and {len(unconverted) - 15} more (`hipbot hipify --json` lists all)")
        fields.append(Field(f"Not converted ({len(unconverted)})", "\n".join(lines)))
    for lint in lints[:10]:
        where = f"line {lint.get('line')}" if lint.get("line") else ""
        body = lint.get("message", "")
        if lint.get("hint"):
            body += f"\n💡 {lint['hint']}"
        fields.append(Field(f"{lint.get('severity', 'warning')} {lint.get('id', '')} {where}".strip(), body))
    if len(lints) > 10:
        fields.append(Field("More lints", f"{len(lints) - 10} more; `hipbot hipify FILE` shows all"))
    description = (
        f"{report.get('converted_refs', 0)} CUDA references converted ({report.get('conversion_percent', 100)} %), "
        f"{len(unconverted)} left, {report.get('kernel_launches', 0)} kernel launches, {len(lints)} AMD lints."
    )
    return Embed(
        title=truncate(f"hipify report: {name}", 256),
        description=description,
        fields=fields,
        color=COLOR_WARN if (unconverted or lints) else COLOR_OK,
    )


def _compile_embed(check: Any, arch: str) -> Embed:
    data = check.to_dict() if hasattr(check, "to_dict") else dict(check)
    ok = bool(data.get("ok"))
    diags = data.get("diagnostics") or []
    lines = [
        f"{d.get('line')}:{d.get('column')} {d.get('severity', '')}: {d.get('message', '')}"
        for d in diags[:15]
    ]
    description = "compiles cleanly" if ok else (data.get("error") or f"{len(diags)} diagnostics")
    return Embed(
        title=f"hipcc --offload-arch={arch}",
        description=truncate(description + ("\n```\n" + "\n".join(lines) + "\n```" if lines else ""), 4096),
        color=COLOR_OK if ok else COLOR_FAIL,
    )


def extract_code_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, code) for every fenced block, whatever its tag (```cuda, ```cpp, ```c++, ```)."""
    return [(lang.lower(), body) for lang, body in _BLOCK_RE.findall(text or "") if body.strip()]


def convert_message(ctx: Context, content: str, attachments: list[tuple[str, bytes]] | None = None) -> Reply:
    """ "Convert to HIP" on a message: its code blocks (any tag), else its code attachments, else its text
    when the text itself is CUDA."""
    blocks = extract_code_blocks(content)
    if blocks:
        code = "\n\n".join(body.rstrip() for _, body in blocks)
        return hipify(ctx, code, filename="message.cu")
    files = [(n, d) for n, d in attachments or [] if n.lower().endswith(CODE_EXTENSIONS)]
    if files:
        return hipify(ctx, attachment=files[0])
    if content and _CUDA_HINT_RE.search(content):
        return hipify(ctx, content, filename="message.cu")
    raise HipbotError(
        "that message has no code block or source attachment to convert",
        hint="use it on a message with a ```cuda block, or run /hipify with the code",
    )


# -- mentions and buttons ------------------------------------------------------------------------


def mention(ctx: Context, content: str, attachments: list[tuple[str, bytes]] | None = None) -> Reply:
    """A message that mentions the bot: a CUDA block is converted, anything else is a question."""
    text = _MENTION_RE.sub("", content or "").strip()
    blocks = extract_code_blocks(text)
    if blocks or any(n.lower().endswith(CODE_EXTENSIONS) for n, _ in attachments or []):
        return convert_message(ctx, text, attachments)
    if not text:
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
    except (IndexError, ValueError):
        pass
    raise HipbotError(f"this button ({custom_id}) is not one the bot knows")


# -- admin: /config, /ingest ----------------------------------------------------------------------


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


# -- help -------------------------------------------------------------------------------------------

COMMAND_HELP: dict[str, str] = {
    "ask": "answer a CUDA->HIP porting question, with sources",
    "hipify": "convert CUDA code (pasted or attached) to HIP, with AMD lints; arch runs hipcc",
    "finetune": "start a LoRA fine-tune (YAML attachment or the main options)",
    "jobs": "list fine-tune jobs (mine or all)",
    "job": "show one job",
    "cancel": "cancel a job (your own, or any as admin)",
    "models": "published adapters and base models",
    "chat": "chat with an adapter or base model",
    "publish": "publish a finished adapter to the vLLM servers",
    "workers": "registered GPU workers (admin)",
    "ingest": "re-read the HIP docs (admin)",
    "config": "this server's bot settings (admin to change)",
}


def help_reply() -> Reply:
    lines = [f"`/{name}` — {text}" for name, text in COMMAND_HELP.items()]
    lines.append("Mention me with a question, or with a ```cuda block to convert it.")
    return Reply(embeds=[Embed(title="hipbot commands", description="\n".join(lines), color=COLOR_INFO)])


# -- fine-tune jobs ---------------------------------------------------------------------------------

STATE_ICONS = {
    "queued": "⏳",
    "assigned": "📦",
    "running": "🏃",
    "succeeded": "✅",
    "failed": "❌",
    "cancelled": "🚫",
}
STATE_COLORS = {"succeeded": COLOR_OK, "failed": COLOR_FAIL, "cancelled": 0x95A5A6}
FINAL_STATES = ("succeeded", "failed", "cancelled")


def owner_tag(actor: Actor) -> str:
    """How the bot names a job's owner in the queue: the console is the local login."""
    if actor.local:
        import getpass

        return getpass.getuser()
    return f"discord:{actor.user_id}"


def _owner_user_id(owner: str | None) -> int | None:
    if owner and owner.startswith("discord:") and owner[8:].isdigit():
        return int(owner[8:])
    return None


def _is_owner(actor: Actor, owner: str | None) -> bool:
    return owner is not None and owner == owner_tag(actor)


def parse_job_id(value: str | int) -> int:
    text = str(value).strip().lstrip("#")
    if not text.isdigit():
        raise HipbotError(f"{value!r} is not a job id", hint="job ids are numbers, e.g. /job 12 (see /jobs)")
    return int(text)


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
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def job_embed(job: dict[str, Any]) -> Embed:
    """One job as the status message shows it: state, progress bar, step, loss, ETA, worker, error."""
    state = job.get("state", "?")
    step, total = job.get("progress_step"), job.get("progress_total")
    progress = job.get("progress") or {}
    lines = [f"{STATE_ICONS.get(state, '•')} **{state}**"]
    if job.get("cancel_requested") and state not in FINAL_STATES:
        lines[0] += " (cancel requested)"
    if step is not None and total:
        lines.append(f"`{progress_bar(step, total)}` {100 * step // max(total, 1)} % · step {step}/{total}")
    fields = [Field("Base model", f"`{job.get('base_model', '?')}`", inline=True)]
    spec = job.get("spec") or {}
    if spec.get("lora_rank"):
        targets = ",".join(spec.get("lora_target") or []) or "all"
        fields.append(Field("LoRA", f"rank {spec['lora_rank']}, {targets}", inline=True))
    if job.get("progress_loss") is not None:
        fields.append(Field("Loss", f"{job['progress_loss']:.4f}", inline=True))
    if state in ("assigned", "running") and progress.get("eta_seconds") is not None:
        fields.append(Field("ETA", _duration(progress["eta_seconds"]), inline=True))
    if progress.get("tokens_per_second"):
        fields.append(Field("Speed", f"{progress['tokens_per_second']:.0f} tokens/s", inline=True))
    if job.get("worker_id"):
        fields.append(Field("Worker", f"`{job['worker_id']}`", inline=True))
    if job.get("memory_gib"):
        fields.append(Field("Memory estimate", f"~{job['memory_gib']:.1f} GiB per GPU", inline=True))
    if (job.get("attempts") or 0) > 1:
        fields.append(Field("Attempts", f"{job['attempts']}/{job.get('max_attempts', '?')}", inline=True))
    metrics = job.get("metrics") or {}
    if state == "succeeded" and metrics:
        summary = []
        if metrics.get("first_loss") is not None and metrics.get("final_loss") is not None:
            summary.append(f"loss {metrics['first_loss']:.4f} → {metrics['final_loss']:.4f}")
        if metrics.get("global_step"):
            summary.append(f"{metrics['global_step']} steps")
        if metrics.get("train_runtime"):
            summary.append(f"in {_duration(metrics['train_runtime'])}")
        if summary:
            fields.append(Field("Result", ", ".join(summary)))
    if state == "failed" and job.get("error"):
        fields.append(Field("Error", f"```\n{truncate(job['error'], 990)}\n```"))
    owner_id = _owner_user_id(job.get("owner"))
    footer = f"owner {f'<@{owner_id}>' if owner_id else job.get('owner') or '-'} · created {job.get('created_at', '')}"
    return Embed(
        title=truncate(f"Fine-tune #{job['id']} {job.get('name', '')}", 256),
        description="\n".join(lines),
        fields=fields,
        footer=footer if owner_id is None else f"created {job.get('created_at', '')}",
        color=STATE_COLORS.get(state, COLOR_INFO),
    )


def _loss_curve(job: dict[str, Any]) -> Attachment | None:
    """The trainer's loss.png beside the adapter, when this host can read it."""
    from pathlib import Path

    for candidate in (job.get("artifacts") or {}).get("loss_png"), job.get("adapter_dir"):
        if not candidate:
            continue
        path = Path(candidate)
        path = path / "loss.png" if path.is_dir() else path
        if path.is_file() and path.suffix == ".png":
            return Attachment(f"loss-job{job['id']}.png", path.read_bytes(), "loss curve")
    return None


def job_reply(job: dict[str, Any], *, with_files: bool = True) -> Reply:
    embed = job_embed(job)
    reply = Reply(embeds=[embed], meta={"job_id": str(job["id"]), "state": job.get("state")})
    if job.get("state") == "succeeded":
        curve = _loss_curve(job) if with_files else None
        if curve is not None:
            reply.attachments.append(curve)
            embed.image = curve.name
        reply.buttons.append(Button(f"hipbot:publish:{job['id']}", "Publish", style="success", emoji="🚀"))
    return reply


@dataclass
class JobUpdate:
    state: str
    final: bool
    reply: Reply


def job_status(settings: Settings, job_id: str | int) -> JobUpdate | None:
    """What a job's status message should show now; None when the job no longer exists."""
    number = parse_job_id(job_id)
    try:
        job = jobs_backend(settings).get(number)
    except HipbotError as exc:
        if f"no job #{number}" in str(exc):
            return None
        raise  # the coordinator is unreachable: keep the link, try again on the next tick
    state = job.get("state", "?")
    return JobUpdate(state, state in FINAL_STATES, job_reply(job))


def jobs(ctx: Context, scope: str = "mine") -> Reply:
    scope = (scope or "mine").strip().lower()
    if scope not in ("mine", "all"):
        raise HipbotError(f"unknown scope {scope!r}", hint="use mine or all")
    owner = owner_tag(ctx.actor) if scope == "mine" else None
    guild = str(ctx.actor.guild_id) if ctx.actor.guild_id and scope == "all" else None
    rows = jobs_backend(ctx.settings).list(owner=owner, guild=guild, limit=25)
    if not rows:
        hint = "start one with /finetune" if scope == "mine" else ""
        return Reply(
            text=f"No fine-tune jobs{' of yours' if scope == 'mine' else ''} yet. {hint}".strip(),
            ephemeral=True,
        )
    lines = []
    for j in rows:
        step = f" · step {j['progress_step']}/{j['progress_total']}" if j.get("progress_total") else ""
        loss = f" · loss {j['progress_loss']:.3f}" if j.get("progress_loss") is not None else ""
        owner_id = _owner_user_id(j.get("owner"))
        who = f" · <@{owner_id}>" if owner_id and scope == "all" else ""
        lines.append(
            f"{STATE_ICONS.get(j['state'], '•')} `#{j['id']}` {j['name']} **{j['state']}**{step}{loss}{who}"
        )
    title = "Your fine-tune jobs" if scope == "mine" else "Fine-tune jobs"
    return Reply(embeds=[Embed(title=title, description="\n".join(lines), color=COLOR_INFO)], ephemeral=True)


def job(ctx: Context, job_id: str | int) -> Reply:
    return job_reply(jobs_backend(ctx.settings).get(parse_job_id(job_id)))


def cancel(ctx: Context, job_id: str | int) -> Reply:
    number = parse_job_id(job_id)
    backend = jobs_backend(ctx.settings)
    current = backend.get(number)
    if current["state"] in FINAL_STATES:
        raise HipbotError(f"job #{number} is already {current['state']}")
    mine = _is_owner(ctx.actor, current.get("owner"))
    owner_id = _owner_user_id(current.get("owner"))
    permissions.require_cancel(
        ctx.actor, ctx.config, ctx.actor.user_id if mine else owner_id or -1, f"#{number}"
    )
    updated = backend.cancel(number)
    ctx.audit("finetune.cancel", target=str(number), owner=current.get("owner"), state=updated["state"])
    note = (
        "cancelled"
        if updated["state"] == "cancelled"
        else "cancel requested: the worker stops within one heartbeat"
    )
    reply = job_reply(updated)
    reply.text = f"Job #{number}: {note}."
    return reply


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
        gpus = (w.get("gpus") or {}).get("gpus") or []
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
                f"{w['name']} · {w['id']}",
                f"{w.get('gpu_count', 0)}× {w.get('backend', '?')}: {names or '-'}\nlast heartbeat {w.get('last_seen') or 'never'}",
            )
        )
    return Reply(
        embeds=[Embed(title=f"GPU workers ({len(rows)})", fields=fields, color=COLOR_INFO)], ephemeral=True
    )


# -- serving: /models, /chat, /publish ------------------------------------------------------------


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
        where = ", ".join(a.servers) if a.servers else "not published"
        fields.append(
            Field(
                a.name,
                f"base `{a.base_model}` · rank {a.rank} · {', '.join(a.target_modules)}\n"
                f"{where}" + (f" · job #{a.job_id}" if a.job_id else ""),
            )
        )
    for s in servers:
        fields.append(
            Field(
                f"base: {s.served_model}", f"server `{s.name}` (max LoRA rank {s.max_lora_rank})", inline=True
            )
        )
    if not fields:
        return Reply(
            text="No adapters or vLLM servers are registered yet.",
            embeds=[
                Embed(
                    title="Serving",
                    description="An admin adds a server with `hipbot serve servers add NAME URL`.",
                )
            ],
        )
    return Reply(embeds=[Embed(title="Models", fields=fields, color=COLOR_INFO)])


def chat(ctx: Context, adapter: str, prompt: str, *, max_tokens: int = 512) -> Iterator[str]:
    """The streamed answer of an adapter (or of a server's base model), checked before it starts."""
    from hipbot.jobs.serve import chat as chat_lib

    if not prompt or not prompt.strip():
        raise HipbotError("the prompt is empty")
    registry = _registry(ctx.settings)
    name = adapter.strip()
    if registry.find(name) is None:
        bases = {s.served_model for s in registry.servers()}
        if name not in bases and name not in ("base", ""):
            raise HipbotError(
                f"no adapter or base model named {name!r}", hint="/models lists what you can chat with"
            )
        target = None
    else:
        target = name
    chat_lib.resolve_target(ctx.settings, target, registry)  # unknown, unpublished or no server: say so now
    return chat_lib.stream_chat(
        ctx.settings, prompt, adapter=target, registry=registry, max_tokens=max_tokens
    )


def _adapter_name_for_job(job: dict[str, Any]) -> str:
    slug = re.sub(r"[^a-z0-9.-]+", "-", str(job.get("name") or "adapter").lower()).strip("-.") or "adapter"
    return f"{slug[:50]}-job{job['id']}"


def publish(ctx: Context, adapter: str) -> Reply:
    """Publish a registered adapter, or a succeeded job's adapter (``#12``) after registering it."""
    from hipbot.jobs.serve import publish as publish_lib

    registry = _registry(ctx.settings)
    target = adapter.strip()
    if target.lstrip("#").isdigit() and registry.find(target) is None:
        found = registry.by_job(target.lstrip("#"))
        if found is None:
            job_data = jobs_backend(ctx.settings).get(parse_job_id(target))
            _require_owner_or_admin(ctx, job_data.get("owner"), f"job #{job_data['id']}")
            if job_data["state"] != "succeeded" or not job_data.get("adapter_dir"):
                raise HipbotError(
                    f"job #{job_data['id']} is {job_data['state']}: only a succeeded job has an adapter"
                )
            from pathlib import Path

            found = publish_lib.register_adapter(
                registry,
                ctx.settings,
                _adapter_name_for_job(job_data),
                Path(job_data["adapter_dir"]),
                base_model=job_data.get("base_model"),
                job_id=str(job_data["id"]),
                owner=job_data.get("owner"),
            )
        target = found.name
    entry = registry.get(target)
    _require_owner_or_admin(ctx, entry.owner, f"adapter {entry.name}")
    results = publish_lib.publish(registry, entry.name)
    ctx.audit("publish", target=entry.name, servers=[r.server for r in results])
    lines = [f"`{r.server}`: {r.action}" for r in results]
    return Reply(
        text=f"🚀 `{entry.name}` is live: chat with `/chat adapter:{entry.name}`",
        embeds=[Embed(title=f"Published {entry.name}", description="\n".join(lines), color=COLOR_OK)],
    )


def _require_owner_or_admin(ctx: Context, owner: str | None, what: str) -> None:
    if _is_owner(ctx.actor, owner) or permissions.is_admin(ctx.actor, ctx.config):
        return
    raise HipbotError(f"{what} belongs to someone else", hint="its owner or an admin can publish it")


# -- /finetune --------------------------------------------------------------------------------------


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
            raise HipbotError(f"the config is not valid YAML: {exc}".replace("\n", " ")) from exc
        if not isinstance(loaded, dict):
            raise HipbotError("the config must be a mapping of keys to values (a LLaMA-Factory train YAML)")
        raw.update(loaded)
    elif not model:
        raise HipbotError(
            "give a config file or at least a model and a dataset",
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
    raw.update(extra or {})
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
        raise HipbotError(str(checked.error))
    backend = jobs_backend(ctx.settings)

    def is_running(job_id: str) -> bool:
        try:
            return backend.get(int(job_id))["state"] not in FINAL_STATES
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
    job_data = submitted["job"]
    ctx.state.record_finetune(str(job_data["id"]), ctx.actor.user_id, ctx.actor.guild_id)
    ctx.audit(
        "finetune.start",
        target=str(job_data["id"]),
        base_model=job_data.get("base_model"),
        dataset=dataset[0] if dataset else job_data.get("spec", {}).get("dataset"),
    )
    reply = job_reply(job_data)
    reply.text = f"Queued fine-tune **#{job_data['id']}**; this message follows the job."
    if submitted.get("warning"):
        reply.text += f"\n⚠️ {submitted['warning']}"
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
        label = truncate(f"#{j['id']} {j['name']} ({j['state']})", 100)
        if current.lower().lstrip("#") in label.lower():
            out.append((label, str(j["id"])))
    return out
