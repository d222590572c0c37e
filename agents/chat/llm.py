"""The chat model behind generated answers: LangChain's ChatOpenAI against any OpenAI-compatible
endpoint (vLLM in production), configured by ``HIPBOT_LLM_URL`` / ``HIPBOT_LLM_MODEL``. When the
model is a published adapter that recorded its training chat template, answers are prompted the way
it was trained (``hipbot.jobs.serve.chat``) instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import httpx

from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

if TYPE_CHECKING:
    from hipbot.jobs.serve.chat import ChatTarget


def base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1`` (what vLLM serves); a URL with a path is kept."""
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise HipbotError(
            N_("HIPBOT_LLM_URL is not an http(s) URL: {url!r}", url=url),
            hint=N_("e.g. http://127.0.0.1:8000/v1"),
        )
    return url if parsed.path not in ("", "/") else f"{url}/v1"


def served_model(settings: Settings) -> str:
    """``settings.llm_model``, else the first model the endpoint lists (a vLLM server serves one)."""
    if settings.llm_model:
        return settings.llm_model
    url = f"{base_url(settings.llm_url or '')}/models"
    try:
        response = httpx.get(
            url, headers={"Authorization": f"Bearer {settings.llm_api_key}"}, timeout=settings.llm_timeout
        )
        response.raise_for_status()
        models = [m["id"] for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise HipbotError(
            N_("cannot list the models of {url}: {error}", url=url, error=exc),
            hint=N_("set HIPBOT_LLM_MODEL to the served model name"),
        ) from exc
    if not models:
        raise HipbotError(N_("{url} serves no model", url=url), hint=N_("set HIPBOT_LLM_MODEL"))
    return models[0]


def chat_model(settings: Settings):
    """A ``ChatOpenAI`` for the configured endpoint (temperature 0: answers should not vary;
    ``HIPBOT_LLM_MAX_TOKENS`` bounds the answer)."""
    if not settings.llm_url:
        raise HipbotError(
            N_("no LLM endpoint configured"), hint=N_("set HIPBOT_LLM_URL (e.g. http://127.0.0.1:8000/v1)")
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=base_url(settings.llm_url),
        model=served_model(settings),
        api_key=settings.llm_api_key or "EMPTY",
        timeout=settings.llm_timeout,
        temperature=0,
        max_tokens=settings.llm_max_tokens,
        max_retries=1,
    )


@dataclass(frozen=True)
class AdapterModel:
    """A published adapter, prompted with the chat template it was trained with."""

    target: ChatTarget
    max_tokens: int
    timeout: float


def answer_model(settings: Settings):
    """What generates answers: an ``AdapterModel`` when ``HIPBOT_LLM_MODEL`` names a registered
    adapter that recorded its template, else ``chat_model(settings)``."""
    from hipbot.jobs.serve.chat import answer_target

    target = answer_target(settings)
    if target is None:
        return chat_model(settings)
    return AdapterModel(target, settings.llm_max_tokens, settings.llm_timeout)


def generate(model, question: str, context: str, template: str = "answer.md") -> str:
    """Answer ``question`` from ``context`` (numbered passages) with the prompt in ``prompts/``;
    ``model`` is what ``answer_model`` (or ``chat_model``) returned."""
    import openai
    from langchain_core.messages import HumanMessage, SystemMessage

    from hipbot.jobs.serve.chat import ask
    from hipbot.prompts import load

    system = load(template).strip()
    user = f"Passages:\n\n{context}\n\nQuestion: {question}"
    if isinstance(model, AdapterModel):
        pieces = ask(model.target, user, system=system, max_tokens=model.max_tokens, temperature=0.0,
                     timeout=model.timeout)  # fmt: skip
        text = "".join(pieces)
    else:
        try:
            reply = model.invoke([SystemMessage(system), HumanMessage(user)])
        except (openai.APIError, httpx.HTTPError) as exc:
            raise HipbotError(N_("the LLM endpoint failed: {error}", error=exc)) from exc
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
    if not text.strip():
        raise HipbotError(N_("the LLM returned an empty answer"))
    return text
