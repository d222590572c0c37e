"""A small typed client for the parts of vLLM's OpenAI-compatible server that hipbot uses.

Every failure becomes a ``HipbotError`` subclass whose message names the server and what to do:
``ServerDown`` (nothing answers), ``AdapterNotLoaded`` (the model name is unknown to the server),
``VllmRejected`` (the server answered with an error, its own message kept verbatim).
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from hipbot.errors import HipbotError
from hipbot.i18n import N_


class ServerDown(HipbotError):
    """Nothing answered at the server's URL (refused, DNS, timeout while connecting)."""


class AdapterNotLoaded(HipbotError):
    """The server does not serve a model or adapter by that name."""


class VllmRejected(HipbotError):
    """The server answered with an error status; ``status`` and vLLM's message are kept."""

    def __init__(self, message: str, *, status: int, detail: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.detail = detail


class ChatTimeout(HipbotError):
    """The answer did not finish within the time limit (what arrived so far was already yielded)."""


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``GET /v1/models``: the base model (``parent`` None) or a loaded LoRA adapter."""

    id: str
    root: str | None
    parent: str | None
    max_model_len: int | None = None

    @property
    def is_adapter(self) -> bool:
        return self.parent is not None


@dataclass(frozen=True)
class Health:
    ok: bool
    latency_ms: float
    error: str | None = None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Built once: httpx builds a fresh one per client (about 40 ms), which would be most of what
    hipbot adds to a chat request."""
    import certifi

    return ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or certifi.where())


def _error_detail(response: httpx.Response) -> str:
    """vLLM wraps errors as {"error": {"message": ...}}; older builds use {"message": ...} or text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if body.get("detail"):
            return str(body["detail"])
    return json.dumps(body)[:500]


class VllmClient:
    """``VllmClient("http://host:8000")``; use as a context manager or call ``close()``."""

    def __init__(
        self, url: str, *, api_key: str | None = None, timeout: float = 30.0, name: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.name = name or self.url
        headers = {"Authorization": f"Bearer {api_key}"} if api_key and api_key != "EMPTY" else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, verify=_tls_context())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> VllmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._down(exc) from exc
        except httpx.TimeoutException as exc:
            raise ServerDown(
                N_(
                    "vLLM server {name} did not answer {method} {path} in time",
                    name=self.name,
                    method=method,
                    path=path,
                ),
                hint=str(exc),
            ) from exc
        except httpx.HTTPError as exc:
            raise self._down(exc) from exc

    def _down(self, exc: Exception) -> ServerDown:
        return ServerDown(
            N_(
                "vLLM server {name} is not reachable at {url} ({error_type})",
                name=self.name,
                url=self.url,
                error_type=type(exc).__name__,
            ),
            hint=N_(
                "start it (hipbot serve local start, or deploy/README.md) and check with: hipbot "
                "serve servers check"
            ),
        )

    def _rejected(self, response: httpx.Response, what: str) -> VllmRejected:
        detail = _error_detail(response)
        return VllmRejected(
            N_(
                "vLLM server {name} refused to {what} (HTTP {status}): {detail}",
                name=self.name,
                what=what,
                status=response.status_code,
                detail=detail,
            ),
            status=response.status_code,
            detail=detail,
        )

    def health(self) -> Health:
        start = time.perf_counter()
        try:
            response = self._request("GET", "/health")
        except ServerDown as exc:
            return Health(False, (time.perf_counter() - start) * 1000, exc.message)
        latency = (time.perf_counter() - start) * 1000
        if response.status_code != 200:
            return Health(False, latency, f"HTTP {response.status_code}")
        return Health(True, latency)

    def models(self) -> list[ServedModel]:
        response = self._request("GET", "/v1/models")
        if response.status_code != 200:
            raise self._rejected(response, N_("list its models"))
        return [
            ServedModel(
                id=str(item["id"]),
                root=item.get("root"),
                parent=item.get("parent"),
                max_model_len=item.get("max_model_len"),
            )
            for item in response.json().get("data", [])
        ]

    def base_models(self) -> list[ServedModel]:
        return [m for m in self.models() if not m.is_adapter]

    def adapters(self) -> dict[str, ServedModel]:
        return {m.id: m for m in self.models() if m.is_adapter}

    def load_adapter(self, name: str, path: str, *, inplace: bool = False) -> None:
        """``POST /v1/load_lora_adapter``; needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True on the server."""
        body: dict[str, Any] = {"lora_name": name, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        response = self._request("POST", "/v1/load_lora_adapter", json=body)
        if _route_missing(response):
            raise self._no_runtime_lora(response)
        if response.status_code != 200:
            raise self._rejected(response, N_("load adapter {name!r} from {path}", name=name, path=path))

    def _no_runtime_lora(self, response: httpx.Response) -> VllmRejected:
        return VllmRejected(
            N_("vLLM server {name} has no runtime LoRA API", name=self.name),
            status=response.status_code,
            detail=_error_detail(response),
            hint=N_("start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"),
        )

    def unload_adapter(self, name: str) -> bool:
        """Return False when the adapter was not loaded (already the wanted state)."""
        response = self._request("POST", "/v1/unload_lora_adapter", json={"lora_name": name})
        if response.status_code == 200:
            return True
        if response.status_code in (400, 404) and "cannot be found" in _error_detail(response):
            return False
        if _route_missing(response):
            raise self._no_runtime_lora(response)
        raise self._rejected(response, N_("unload adapter {name!r}", name=name))

    def chat_stream(
        self,
        model: str,
        messages: list[dict[str, str]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.7,
        timeout: float = 60.0,
        extra: dict[str, Any] | None = None,
    ) -> Iterator[str]:
        """Stream the answer's text pieces (server-sent events) from ``/v1/chat/completions``: the
        server renders ``messages`` with its own chat template (the base model's).

        ``timeout`` bounds the whole answer, not each read: a slow trickle cannot hold a bot
        handler forever. Raises ``ChatTimeout`` after the pieces that arrived in time.
        """
        body: dict[str, Any] = {"model": model, "messages": messages, **(extra or {})}
        yield from self._stream("/v1/chat/completions", body, max_tokens, temperature, timeout)

    def complete_stream(
        self,
        model: str,
        prompt: str,
        *,
        stop: Sequence[str] = (),
        stop_token_ids: Sequence[int] = (),
        max_tokens: int = 512,
        temperature: float = 0.7,
        timeout: float = 60.0,
    ) -> Iterator[str]:
        """Stream the continuation of a prompt rendered by the caller, from ``/v1/completions``.

        The prompt already holds every special token its template writes, so the server adds none
        (``add_special_tokens`` false: a tokenizer that prepends BOS would double it), the way the
        trainer tokenized it. ``stop``/``stop_token_ids``: the template's turn-end marker.
        """
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "add_special_tokens": False,
            "stop": list(stop),
            "stop_token_ids": list(stop_token_ids),
        }
        yield from self._stream("/v1/completions", body, max_tokens, temperature, timeout)

    def _stream(
        self, path: str, body: dict[str, Any], max_tokens: int, temperature: float, timeout: float
    ) -> Iterator[str]:
        model = str(body["model"])
        body = {**body, "max_tokens": max_tokens, "temperature": temperature, "stream": True}
        deadline = time.monotonic() + timeout
        per_read = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        try:
            with self._http.stream("POST", path, json=body, timeout=per_read) as response:
                if response.status_code != 200:
                    response.read()
                    raise self._chat_error(response, model)
                for data in _sse_data(response.iter_lines()):
                    if time.monotonic() > deadline:
                        raise ChatTimeout(
                            N_(
                                "{model} did not finish its answer within {timeout:g} s",
                                model=model,
                                timeout=timeout,
                            )
                        )
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    if "error" in event:
                        raise VllmRejected(
                            N_(
                                "vLLM server {name} failed while answering: {error}",
                                name=self.name,
                                error=_event_error(event),
                            ),
                            status=200,
                            detail=_event_error(event),
                        )
                    for choice in event.get("choices", []):
                        # chat events carry {"delta": {"content"}}, completion events {"text"}
                        piece = choice.get("text") or (choice.get("delta") or {}).get("content")
                        if piece:
                            yield piece
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._down(exc) from exc
        except httpx.TimeoutException as exc:
            raise ChatTimeout(
                N_("{model} did not answer within {timeout:g} s", model=model, timeout=timeout)
            ) from exc
        except httpx.HTTPError as exc:
            raise ServerDown(
                N_(
                    "lost the connection to vLLM server {name} while streaming ({error_type})",
                    name=self.name,
                    error_type=type(exc).__name__,
                )
            ) from exc

    def tokenize(
        self, model: str, *, prompt: str | None = None, messages: list[dict[str, str]] | None = None
    ) -> list[int]:
        """``POST /tokenize``: the token ids of ``prompt`` as given (no special tokens added), or of
        ``messages`` rendered by the server's chat template with the generation prompt."""
        body: dict[str, Any] = {"model": model}
        if messages is not None:
            body |= {"messages": messages, "add_generation_prompt": True}
        else:
            body |= {"prompt": prompt, "add_special_tokens": False}
        response = self._request("POST", "/tokenize", json=body)
        if response.status_code != 200:
            raise self._rejected(response, N_("tokenize"))
        return [int(t) for t in response.json()["tokens"]]

    def chat(self, model: str, messages: list[dict[str, str]], **kwargs: Any) -> str:
        return "".join(self.chat_stream(model, messages, **kwargs))

    def _chat_error(self, response: httpx.Response, model: str) -> HipbotError:
        detail = _error_detail(response)
        if response.status_code == 404 and "does not exist" in detail:
            return AdapterNotLoaded(
                N_(
                    "{model!r} is not loaded on vLLM server {name}: {detail}",
                    model=model,
                    name=self.name,
                    detail=detail,
                ),
                hint=N_("publish it: hipbot serve publish {model}", model=model),
            )
        return self._rejected(response, N_("answer with {model!r}", model=model))


def _route_missing(response: httpx.Response) -> bool:
    """FastAPI's bare 404: the server runs without VLLM_ALLOW_RUNTIME_LORA_UPDATING."""
    return response.status_code == 404 and _error_detail(response) == "Not Found"


def _event_error(event: dict[str, Any]) -> str:
    err = event["error"]
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The ``data:`` payloads of a server-sent event stream (multi-line data joined by newlines)."""
    buffer: list[str] = []
    for line in lines:
        if not line:
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            buffer.append(value[1:] if value.startswith(" ") else value)
    if buffer:
        yield "\n".join(buffer)
