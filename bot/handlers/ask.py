"""/ask: porting answers with sources, the buttons under them (votes, "More": the full passages and
all the sources)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from hipbot.bot.handlers.common import COLOR_INFO, Context
from hipbot.bot.replies import Button, Embed, Field, Link, Reply, truncate
from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import _

SOURCES_SHOWN = 3


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
    label = f"{section} — {name}" if section and name else section or name or _("source")
    return Link(truncate(label, 200), source.get("url") or "")


def ask(ctx: Context, question: str, *, k: int = 8) -> Reply:
    from hipbot.agents.docs.answers import check_question

    question = check_question(question or "", example='/ask question:"what replaces cudaMemcpyAsync?"')
    ctx.check_cooldown("ask")
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
        fields.append(Field(_("APIs"), truncate(", ".join(f"`{n}`" for n in names), 1024)))
    embed = Embed(
        title=truncate(question, 256),
        description=result.get("answer") or _("(no answer)"),
        fields=fields,
        links=[_source_link(s) for s in sources[:SOURCES_SHOWN]],
        footer=_("answer #{id} · {mode} · vote to help improve the answers").format(
            id=answer_id, mode=result.get("mode", "")
        ),
        color=COLOR_INFO,
    )
    buttons = []
    if result.get("more") or len(sources) > SOURCES_SHOWN:
        buttons.append(Button(f"hipbot:sources:{answer_id}", _("More")))
    buttons += [
        Button(f"hipbot:vote:up:{answer_id}", _("Helpful"), emoji="👍"),
        Button(f"hipbot:vote:down:{answer_id}", _("Not helpful"), emoji="👎"),
    ]
    return Reply(embeds=[embed], buttons=buttons)


def more_sources(ctx: Context, answer_id: int) -> Reply:
    row = ctx.state.answer(answer_id)
    if row is None:
        raise HipbotError(
            _("answer #{id} is not in the database any more").format(id=answer_id),
            hint=_("ask the question again"),
        )
    sources = row["answer"].get("sources") or []
    embed = Embed(
        title=truncate(_("More on: {question}").format(question=row["question"]), 256),
        description=truncate(row["answer"].get("more") or "", 4000),
        links=[_source_link(s) for s in sources],
        color=COLOR_INFO,
    )
    return Reply(embeds=[embed], ephemeral=True)


def vote(ctx: Context, answer_id: int, value: int) -> Reply:
    if ctx.state.answer(answer_id) is None:
        raise HipbotError(_("answer #{id} is not in the database any more").format(id=answer_id))
    tally = ctx.state.vote(answer_id, ctx.actor.user_id, value)
    mark = "👍" if value > 0 else "👎"
    return Reply(
        text=_("Thanks, your {mark} is recorded for answer #{id} (👍 {up} · 👎 {down}).").format(
            mark=mark, id=answer_id, up=tally["up"], down=tally["down"]
        ),
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
