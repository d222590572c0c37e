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

CODE_EXTENSIONS = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc", ".cxx", ".c", ".hip")
MAX_CODE_BYTES = 1024 * 1024
MAX_QUESTION_CHARS = 2000
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
    question = (question or "").strip()
    if not question:
        raise HipbotError(
            "the question is empty", hint='ask like: /ask question:"what replaces cudaMemcpyAsync?"'
        )
    if len(question) > MAX_QUESTION_CHARS:
        raise HipbotError(
            f"the question is {len(question)} characters; the limit is {MAX_QUESTION_CHARS}",
            hint="ask about one API or one problem at a time",
        )
    permissions.check_cooldown(ctx.state, ctx.actor, "ask", ctx.config.ask_cooldown_s)
    from hipbot.agents import answers

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


# -- /hipify and "Convert to HIP" ---------------------------------------------------------------


def _decode_code(data: bytes, name: str) -> str:
    if len(data) > MAX_CODE_BYTES:
        raise HipbotError(
            f"{name} is {len(data) // 1024} KiB; the bot converts files up to {MAX_CODE_BYTES // 1024} KiB",
            hint="run `hipbot hipify FILE` locally for big files",
        )
    from hipbot.agents.hipify import check_text

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
    from hipbot.agents import hipify as translator

    result = translator.translate(code, translator.HipifyOptions(), filename=filename)
    if result.report.errors:
        raise HipbotError("; ".join(result.report.errors), hint="send CUDA C++ source text")
    out_name = _output_name(filename)
    text, files = code_reply_parts(result.text, out_name)
    embeds = [_report_embed(result.report.to_dict(), [lint.to_dict() for lint in result.lints], out_name)]
    if arch:
        from hipbot.agents import compile_check

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
    from hipbot.agents import ingest as docs_ingest

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


def attachment_reply(name: str, data: bytes, text: str = "") -> Reply:
    return Reply(text=text, attachments=[Attachment(name, data)])


def stream_text(chunks: Iterator[str]) -> Iterator[str]:
    """Accumulated text after each streamed piece: what a message editor shows."""
    text = ""
    for piece in chunks:
        text += piece
        yield text
