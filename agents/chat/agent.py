"""The free-chat porting agent (``hipbot chat``, the bot's chat): a LangChain tool-calling agent.

Tools: ``lookup_api`` (HIPIFY mapping rows), ``search_docs`` (hybrid retrieval) and
``translate_snippet`` (the hipify translator with AMD lints). Every source a tool used is
attached to the final answer. The agent is only as good as its model's tool calling: when the
endpoint refuses tools, or the model answers without calling one, the reply falls back to the
grounded ``ask`` path (structured lookup / retrieval + generation), so an answer is never
unsourced. Without an LLM endpoint the same fallback runs with no model at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from hipbot.agents.docs.answers import Answer, Answerer, get_answerer
from hipbot.agents.docs.compose import dedupe_sources, trim
from hipbot.agents.docs.retrieval import expand_query, query_terms
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

MAX_PROMPT_CHARS = 20_000  # chat prompts may carry a code snippet
MAX_HISTORY_TURNS = 10
RECURSION_LIMIT = 10  # model -> tool -> model ... steps before the agent must answer

_CODE = re.compile(
    r"```|__global__|<<<.*>>>|\bcuda[A-Z]\w*\s*\(|#include\s*[<\"]cuda|;\s*\n.*;\s*(\n|$)", re.DOTALL
)


@dataclass
class ToolLog:
    """What the tools looked at: becomes the answer's sources and apis."""

    sources: list[dict[str, str]] = field(default_factory=list)
    apis: list[dict] = field(default_factory=list)
    calls: int = 0


def looks_like_code(text: str) -> bool:
    return bool(_CODE.search(text))


def _names(text: str) -> str:
    return " ".join(f"`{n}`" for n in re.split(r"[\s,;]+", text) if n)


def lookup_api_text(answerer: Answerer, names: str, log: ToolLog) -> str:
    found, unknown = answerer.index.find(_names(names))
    lines, records, sources = answerer.api_facts(found, names)
    for token, suggestions in unknown:
        lines.append(f"`{token}` is not in HIPIFY's tables. Did you mean {' or '.join(suggestions)}?")
        records.append({"query": token, "found": False, "suggestions": suggestions})
    log.apis.extend(records)
    log.sources.extend(sources)
    return "\n".join(lines) or f"None of {names!r} is in HIPIFY's CUDA/HIP/ROC mapping tables."


def search_docs_text(answerer: Answerer, query: str, log: ToolLog, k: int = 4) -> str:
    found, _ = answerer.index.find(query)
    passages = answerer.retriever.search(query, k=k, identifiers=[f.name for f in found])
    terms = query_terms(expand_query(query))
    log.sources.extend(p.source() for p in passages)
    if not passages:
        return "No passage of the HIP docs matches."
    return "\n\n".join(
        f"[{p.path} \u203a {p.section}]\n{trim(p.text, terms, 700, focus=p.focus)}" for p in passages
    )


def translate_text(answerer: Answerer, code: str, log: ToolLog) -> str:
    from hipbot.agents.hipify.translate import translate

    code = re.sub(r"^```\w*\n|```\s*$", "", code.strip())
    result = translate(code)
    parts = [f"```cpp\n{result.text.rstrip()}\n```"]
    report = result.report
    if report.errors:
        parts.append("Errors: " + "; ".join(report.errors))
    if report.unconverted:
        left = ", ".join(sorted({f"`{u.name}` ({u.reason})" for u in report.unconverted}))
        parts.append(f"Left unconverted (no HIP equivalent in HIPIFY's tables): {left}")
    for lint in result.lints:
        parts.append(f"{lint.severity}: line {lint.line}: {lint.message} (hint: {lint.hint}; see {lint.doc})")
        doc = lint.doc.split("#")[0]
        if doc in answerer.urls:
            log.sources.append({"path": doc, "section": lint.id, "url": answerer.urls[doc]})
    for name in sorted(report.converted)[:5]:  # the table pages behind the renames
        hit = answerer.index.resolve(name)
        if hit is not None:
            log.sources.extend(answerer.table_sources(hit.rows[0], False))
    return "\n".join(parts)


def make_tools(answerer: Answerer, log: ToolLog) -> list:
    from langchain_core.tools import tool

    @tool
    def lookup_api(names: str) -> str:
        """Look up CUDA, HIP, rocBLAS/rocSPARSE/rocRAND/MIOpen API names in HIPIFY's mapping tables:
        the equivalent, the version it appeared in, and deprecated/removed/unsupported status.
        `names`: one or more identifiers separated by spaces, e.g. "cudaMemcpyAsync cublasSgemm"."""
        log.calls += 1
        return lookup_api_text(answerer, names, log)

    @tool
    def search_docs(query: str) -> str:
        """Search the HIP and HIPIFY documentation (porting guide, FAQ, kernel language, hipify
        manuals). Returns passages, each headed by its [path > section] source."""
        log.calls += 1
        return search_docs_text(answerer, query, log)

    @tool
    def translate_snippet(code: str) -> str:
        """Translate a CUDA C++ snippet to HIP like hipify, listing what could not be converted and
        AMD porting warnings (warp size 64, ...)."""
        log.calls += 1
        return translate_text(answerer, code, log)

    return [lookup_api, search_docs, translate_snippet]


def _history_messages(history: Sequence | None) -> list:
    from langchain_core.messages import AIMessage, HumanMessage

    out = []
    for turn in list(history or [])[-2 * MAX_HISTORY_TURNS :]:
        role, content = (turn.get("role"), turn.get("content")) if isinstance(turn, dict) else turn
        if not isinstance(content, str) or not content.strip():
            continue
        out.append(AIMessage(content) if role in ("assistant", "ai", "bot") else HumanMessage(content))
    return out


def _grounded(answerer: Answerer, prompt: str) -> Answer:
    """The answer without an agent: translation for code, else the lookup / retrieval path."""
    if looks_like_code(prompt):
        log = ToolLog()
        text = translate_text(answerer, prompt, log)
        return Answer(text, dedupe_sources(log.sources), "extractive", log.apis)
    return answerer.ask(prompt)


def run_agent(prompt: str, settings: Settings | None = None, history: Sequence | None = None) -> Answer:
    """Answer a chat message with the tool-calling agent; ``history`` is earlier turns as
    ``{"role": "user"|"assistant", "content": str}`` dicts or ``(role, content)`` pairs."""
    settings = settings or load_settings()
    if not isinstance(prompt, str) or not prompt.strip():
        raise HipbotError(N_("the message is empty"))
    if len(prompt) > MAX_PROMPT_CHARS:
        raise HipbotError(
            N_(
                "the message is too long ({length} characters; the limit is {limit})",
                length=len(prompt),
                limit=MAX_PROMPT_CHARS,
            ),
            hint=N_("translate whole files with: hipbot hipify FILE"),
        )
    answerer = get_answerer(settings)
    if not settings.llm_url:
        return _grounded(answerer, prompt)

    import openai
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage

    from hipbot.agents.chat.llm import chat_model
    from hipbot.prompts import load

    log = ToolLog()
    agent = create_agent(
        chat_model(settings), make_tools(answerer, log), system_prompt=load("agent.md").strip()
    )
    messages = [*_history_messages(history), HumanMessage(prompt)]
    try:
        state = agent.invoke({"messages": messages}, config={"recursion_limit": RECURSION_LIMIT})
    except openai.BadRequestError:
        # Typically a server started without tool calling (vLLM needs --enable-auto-tool-choice).
        return _grounded(answerer, prompt)
    except (openai.APIError, HipbotError) as exc:
        answer = _grounded(answerer, prompt)
        answer.answer = f"(LLM endpoint failed: {exc}; answering from the docs directly)\n\n{answer.answer}"
        return answer
    except Exception as exc:  # langgraph's recursion limit: the model kept calling tools
        if type(exc).__name__ != "GraphRecursionError":
            raise
        return _grounded(answerer, prompt)
    final = next((m for m in reversed(state["messages"]) if isinstance(m, AIMessage) and m.content), None)
    if log.calls == 0 or final is None:
        return _grounded(answerer, prompt)  # an answer no tool backed is not worth showing
    text = final.content if isinstance(final.content, str) else str(final.content)
    return Answer(text.strip(), dedupe_sources(log.sources), "generated", log.apis)
