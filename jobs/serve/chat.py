"""Chat with a published adapter or a base model: the library call behind ``hipbot chat``, the bot's
``/chat`` and generated answers when ``HIPBOT_LLM_MODEL`` names an adapter.

The adapter's name is the ``model`` of an OpenAI-compatible request. hipbot finds the server that
has it loaded (from the registry), prompts it the way it was trained (its ``TemplateRecord``), and
turns every failure into a message the user can act on.

Why hipbot renders the prompt and calls ``/v1/completions`` rather than sending the template with a
``/v1/chat/completions`` request (``chat_template``/``chat_template_kwargs``): vLLM refuses a
request-supplied chat template unless the server runs with ``--trust-request-chat-template``, which
lets every client run its own Jinja on the server; rendering here works on any vLLM server as it
is, sends a few hundred bytes instead of the template on every turn, and the record's probe proves
the render equals the trainer's (``TemplateRecord.check``). The base model (``--base``) and adapters
without a record still use the chat endpoint and the server's own template.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.template_record import ChatMessage, TemplateRecord
from hipbot.jobs.serve.registry import Registry
from hipbot.jobs.serve.vllm_client import AdapterNotLoaded, VllmClient

ROLES = ("system", "user", "assistant")
# One client per server for the life of the process: chats reuse its kept-alive connections.
_CLIENTS: dict[tuple[str, str, str | None], VllmClient] = {}
_CLIENTS_LOCK = threading.Lock()


@dataclass(frozen=True)
class ChatTarget:
    """Where a chat goes: a server URL and the ``model`` to ask for."""

    server: str
    url: str
    model: str
    api_key: str | None = None
    is_adapter: bool = False
    template: TemplateRecord | None = None  # how the adapter was trained to be prompted


def _history(history: Sequence[Any] | None) -> list[ChatMessage]:
    turns = []
    for turn in history or ():
        role, content = (turn["role"], turn["content"]) if isinstance(turn, dict) else turn
        if role not in ROLES:
            raise HipbotError(
                N_(
                    "unknown chat role {role!r} in history (use one of {roles})",
                    role=role,
                    roles=", ".join(ROLES),
                )
            )
        turns.append(ChatMessage(role=role, content=str(content)))
    return turns


def resolve_target(
    settings: Settings, adapter: str | None = None, registry: Registry | None = None
) -> ChatTarget:
    """The server and model for an adapter (where the registry says it is loaded) or the base model
    (the first registered server, else ``HIPBOT_LLM_URL``/``HIPBOT_LLM_MODEL``)."""
    registry = registry or Registry.open(settings)
    if adapter is not None:
        entry = registry.get(adapter)
        if not entry.servers:
            raise AdapterNotLoaded(
                f"adapter {adapter!r} is registered but not published on any server",
                hint=f"hipbot serve publish {adapter}",
            )
        server = registry.server(entry.servers[0])
        return ChatTarget(
            server.name, server.url, adapter, server.api_key, is_adapter=True, template=entry.template
        )
    servers = registry.servers()
    if servers:
        server = servers[0]
        return ChatTarget(server.name, server.url, server.served_model, server.api_key)
    if settings.llm_url:
        url = settings.llm_url.removesuffix("/").removesuffix("/v1")
        model = settings.llm_model
        if not model:
            with VllmClient(url, api_key=settings.llm_api_key, timeout=10) as client:
                bases = client.base_models()
            if not bases:
                raise HipbotError(N_("the server at {url} lists no models", url=url))
            model = bases[0].id
        return ChatTarget("HIPBOT_LLM_URL", url, model, settings.llm_api_key)
    raise HipbotError(
        N_("no vLLM server is configured"),
        hint=N_(
            "hipbot serve servers add NAME URL (or set HIPBOT_LLM_URL); for a local one: "
            "hipbot serve local start"
        ),
    )


def _client(target: ChatTarget) -> VllmClient:
    key = (target.server, target.url, target.api_key)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = VllmClient(target.url, api_key=target.api_key, name=target.server)
        return _CLIENTS[key]


def ask(
    target: ChatTarget,
    prompt: str,
    history: Sequence[Any] | None = None,
    system: str | None = None,
    *,
    max_tokens: int = 512,
    temperature: float = 0.7,
    timeout: float = 60.0,
) -> Iterator[str]:
    """Stream ``target``'s answer: through ``/v1/completions`` with the prompt rendered from its
    template record when it has one (see the module docstring), else the chat endpoint."""
    if not prompt.strip():
        raise HipbotError(N_("the prompt is empty"))
    turns = _history(history)
    client = _client(target)
    if target.template is None:
        head = [ChatMessage(role="system", content=system)] if system else []
        messages = [m.model_dump() for m in [*head, *turns, ChatMessage(role="user", content=prompt)]]
        yield from client.chat_stream(
            target.model, messages, max_tokens=max_tokens, temperature=temperature, timeout=timeout
        )
        return
    record = target.template
    text = record.render(record.conversation(prompt, turns, system))
    yield from client.complete_stream(
        target.model,
        text,
        stop=record.stop,
        stop_token_ids=record.stop_token_ids,
        max_tokens=max_tokens,
        temperature=temperature,
        timeout=timeout,
    )


def stream_chat(
    settings: Settings,
    prompt: str,
    adapter: str | None = None,
    base: bool = False,
    history: Sequence[Any] | None = None,
    timeout: float | None = None,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float = 0.7,
    registry: Registry | None = None,
) -> Iterator[str]:
    """Yield the answer's text as it streams. ``adapter=NAME`` talks to a published adapter, prompted
    the way it was trained; without it (or with ``base=True``) the base model answers. ``history``
    is a list of ``{"role", "content"}`` dicts or ``(role, content)`` pairs, oldest first;
    ``system`` replaces the adapter's trained ``default_system``."""
    if adapter is not None and base:
        raise HipbotError(N_("choose either an adapter or the base model, not both"))
    if not prompt.strip():
        raise HipbotError(N_("the prompt is empty"))
    _history(history)  # a bad role fails before any server is asked
    target = resolve_target(settings, adapter, registry)
    limit = settings.llm_timeout if timeout is None else timeout
    try:
        yield from ask(
            target, prompt, history, system, max_tokens=max_tokens, temperature=temperature, timeout=limit
        )
    except AdapterNotLoaded as exc:
        if not target.is_adapter:
            raise
        raise AdapterNotLoaded(
            f"adapter {adapter!r} should be live on {target.server} but the server does not have it"
            " (was vLLM restarted?)",
            hint="hipbot serve sync",
        ) from exc


def answer_target(settings: Settings, registry: Registry | None = None) -> ChatTarget | None:
    """For generated answers: the ``HIPBOT_LLM_URL`` endpoint as a target when ``HIPBOT_LLM_MODEL``
    names a registered adapter that carries its template record; None otherwise (plain chat)."""
    if not settings.llm_url or not settings.llm_model:
        return None
    entry = (registry or Registry.open(settings)).find(settings.llm_model)
    if entry is None or entry.template is None:
        return None
    url = settings.llm_url.strip().rstrip("/").removesuffix("/v1")
    return ChatTarget(
        "HIPBOT_LLM_URL", url, entry.name, settings.llm_api_key, is_adapter=True, template=entry.template
    )
