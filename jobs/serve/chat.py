"""Chat with a published adapter or a base model: the library call behind ``hipbot chat`` and the bot.

The adapter's name is the ``model`` of an ordinary OpenAI-compatible chat request, so the only
thing hipbot adds is finding the server that has it loaded (from the registry) and turning every
failure into a message the user can act on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hipbot.config import Settings
from hipbot.errors import HipbotError
from hipbot.jobs.serve.registry import Registry
from hipbot.jobs.serve.vllm_client import AdapterNotLoaded, VllmClient

Message = dict[str, str]
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


def _messages(prompt: str, history: Sequence[Any] | None, system: str | None) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    for turn in history or ():
        role, content = (turn["role"], turn["content"]) if isinstance(turn, dict) else turn
        if role not in ROLES:
            raise HipbotError(f"unknown chat role {role!r} in history (use one of {', '.join(ROLES)})")
        messages.append({"role": role, "content": str(content)})
    if not prompt.strip():
        raise HipbotError("the prompt is empty")
    messages.append({"role": "user", "content": prompt})
    return messages


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
        return ChatTarget(server.name, server.url, adapter, server.api_key, is_adapter=True)
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
                raise HipbotError(f"the server at {url} lists no models")
            model = bases[0].id
        return ChatTarget("HIPBOT_LLM_URL", url, model, settings.llm_api_key)
    raise HipbotError(
        "no vLLM server is configured",
        hint="hipbot serve servers add NAME URL (or set HIPBOT_LLM_URL); for a local one: hipbot serve local start",
    )


def _client(target: ChatTarget) -> VllmClient:
    key = (target.server, target.url, target.api_key)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = VllmClient(target.url, api_key=target.api_key, name=target.server)
        return _CLIENTS[key]


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
    """Yield the answer's text as it streams. ``adapter=NAME`` talks to a published adapter;
    without it (or with ``base=True``) the base model answers. ``history`` is a list of
    ``{"role", "content"}`` dicts or ``(role, content)`` pairs, oldest first."""
    if adapter is not None and base:
        raise HipbotError("choose either an adapter or the base model, not both")
    messages = _messages(prompt, history, system)
    target = resolve_target(settings, adapter, registry)
    limit = settings.llm_timeout if timeout is None else timeout
    try:
        yield from _client(target).chat_stream(
            target.model, messages, max_tokens=max_tokens, temperature=temperature, timeout=limit
        )
    except AdapterNotLoaded as exc:
        if not target.is_adapter:
            raise
        raise AdapterNotLoaded(
            f"adapter {adapter!r} should be live on {target.server} but the server does not have it"
            " (was vLLM restarted?)",
            hint="hipbot serve sync",
        ) from exc
