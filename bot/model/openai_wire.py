"""`OpenAIWireGateway`: the OpenAI Chat Completions wire, spoken directly over aiohttp.

The opt-in client of a profile with `client: openai-compatible` (OpenAI itself, vLLM,
llama.cpp, LM Studio, Ollama's `/v1`, most gateways). It exists for speed: LiteLLM and the
openai SDK walk the whole conversation on every request and wrap every streamed chunk in
their own objects; this client encodes the request once (the messages are plain dicts
already), parses the server-sent events as they arrive and reuses one keep-alive session.
It makes exactly one HTTP request per call (the engine owns retries) and says the same
sentences as `LiteLLMGateway` for the same failures (`failures.py`).

What a reply may cost is bounded: a line over `MAX_LINE_BYTES` or a body over
`MAX_REPLY_BYTES` ends the call, the profile's `timeout_s` bounds the whole request (not
each read: a server trickling a byte at a time does not hold a turn forever), and the
conversation is re-sent only to the origin it was meant for (a redirect elsewhere is
refused, never followed).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from bot.config import AuthMethod
from bot.errors import KelpieError
from bot.model.failures import (
    MAX_LINE_BYTES,
    MAX_REPLY_BYTES,
    Failure,
    ModelCall,
    failure_of_status,
)
from bot.model.streaming import StreamAssembly, assembled_reply, relay
from bot.model.types import ModelError, ModelReply, ModelRequest, ProviderSettings, TextSink

DEFAULT_API_BASE = "https://api.openai.com/v1"
MODEL_PREFIX = "openai/"
# `auth: provider-default`: the variable LiteLLM's chain reads for `openai/` models.
PROVIDER_KEY_ENV = "OPENAI_API_KEY"
DONE = b"[DONE]"
# An error body is read for its message and code; a server may send a whole page instead.
_ERROR_BODY_BYTES = 64 * 1024
# A POST is followed only where it keeps its method and body (307, 308) and only to the
# same scheme, host and port: anywhere else would receive the conversation (and the key).
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_FOLLOWED = frozenset({307, 308})
_MAX_HOPS = 3


class LineTooLong(KelpieError):
    """A server-sent-event line longer than the parser accepts (the client turns it into a
    ModelError naming the line limit; it never leaves this module)."""


class SseParser:
    """Server-sent events to the `data` of each event, fed bytes split anywhere.

    Lines end in LF or CRLF; an event ends at a blank line; several `data:` lines of one
    event are joined by LF; comments (`:`) and other fields are skipped. Only the bytes
    after the last line break are held, so a long line arriving in pieces stays linear; a
    line longer than `max_line` raises `LineTooLong` as soon as it is that long.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max_line = max_line
        self._partial: list[bytes] = []
        self._partial_size = 0
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        self._partial.append(chunk)
        self._partial_size += len(chunk)
        if b"\n" not in chunk:
            self._check(self._partial_size)
            return []
        lines = b"".join(self._partial).split(b"\n")
        tail = lines.pop()
        self._partial = [tail] if tail else []
        self._partial_size = len(tail)
        events: list[bytes] = []
        for line in lines:
            self._check(len(line))
            self._line(line.removesuffix(b"\r"), events)
        self._check(len(tail))
        return events

    def _check(self, size: int) -> None:
        if size > self._max_line:
            raise LineTooLong(f"a stream line over {self._max_line} bytes")

    def finish(self) -> list[bytes]:
        """At the end of the body: an event whose blank line never came still counts (some
        servers end with `data: [DONE]` and no blank line)."""
        events: list[bytes] = []
        tail = b"".join(self._partial)
        self._partial = []
        self._partial_size = 0
        if tail:
            self._line(tail.removesuffix(b"\r"), events)
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._data:
                events.append(b"\n".join(self._data))
                self._data = []
            return
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value.removeprefix(b" "))


class OpenAIWireGateway:
    """One model behind an OpenAI-compatible `/chat/completions`; one session it owns."""

    def __init__(
        self, settings: ProviderSettings, *, environ: Mapping[str, str] = os.environ
    ) -> None:
        if not settings.model.startswith(MODEL_PREFIX):
            raise ValueError(
                f"profile {settings.profile}: client openai-compatible needs an openai/ model"
            )
        self._settings = settings
        self._model = settings.model
        self._wire_model = settings.model.removeprefix(MODEL_PREFIX)
        self._url = (settings.api_base or DEFAULT_API_BASE).rstrip("/") + "/chat/completions"
        # `auth: provider-default` reads the key here, at each request, as LiteLLM does.
        self._environ = environ
        self._call = ModelCall.of(settings)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIWireGateway(model={self._model!r}, api_base={self._settings.api_base!r})"

    @property
    def model_name(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        assembly = StreamAssembly()
        async with self._deadline():
            response = await self._send(self._body(request))
            try:
                text = await relay(self._chunks(response), assembly, on_text)
            finally:
                response.release()
        return assembled_reply(request, assembly, text, self._model)

    async def ping(self) -> None:
        """One non-streamed, one-token request: proves the address, the key and the model."""
        body: dict[str, Any] = {**self._settings.options, "model": self._wire_model}
        body["messages"] = [{"role": "user", "content": "Reply with OK."}]
        body["max_tokens"] = 1
        async with self._deadline():
            response = await self._send(fit_reasoning_model(body))
            try:
                await _read_capped(response.content, MAX_REPLY_BYTES)
            except Exception as exc:
                raise self._transport_error(exc, midway=True) from exc
            finally:
                response.release()

    async def close(self) -> None:
        """Close the session and its kept-alive connections."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    @asynccontextmanager
    async def _deadline(self) -> AsyncIterator[None]:
        """The whole request, answer included, within the profile's `timeout_s`."""
        deadline = asyncio.timeout(self._settings.timeout_s)
        try:
            async with deadline:
                yield
        except TimeoutError as exc:
            if not deadline.expired():  # not ours (a sink's own timeout): not the model's
                raise
            raise self._transport_error(exc, midway=True) from exc

    # the request

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """What LiteLLMGateway sends for an `openai/` model; `options` first, so kelpie's
        own fields win (the config refuses options that name them)."""
        body: dict[str, Any] = {**self._settings.options, "model": self._wire_model}
        body["messages"] = request.messages
        if request.tools:
            body["tools"] = request.tools
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if self._settings.temperature is not None:
            body["temperature"] = self._settings.temperature
        if self._settings.max_tokens is not None:
            body["max_tokens"] = self._settings.max_tokens
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
            body.pop("temperature", None)  # reasoning models refuse one
        return fit_reasoning_model(body)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._settings.auth is AuthMethod.NONE:
            return headers
        key = self._settings.api_key
        if key is None and self._settings.auth is AuthMethod.PROVIDER_DEFAULT:
            key = self._environ.get(PROVIDER_KEY_ENV) or None
        if key is None:  # never send a request that can only be refused
            raise self._call.error(
                Failure.BAD_KEY, detail=f"no API key: {PROVIDER_KEY_ENV} is not set", sent=False
            )
        headers["Authorization"] = f"Bearer {key}"
        return headers

    async def _send(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        headers = self._headers()
        # One pass over the history; compact, as the server parses it once too.
        data = json.dumps(body, separators=(",", ":")).encode()
        url = self._url
        for hop in range(_MAX_HOPS + 1):
            try:
                response = await self._client().post(
                    url, data=data, headers=headers, allow_redirects=False
                )
            except Exception as exc:
                raise self._transport_error(exc, midway=False) from exc
            if response.status not in _REDIRECTS:
                break
            url = self._redirect(response, url, last=hop == _MAX_HOPS)
        if response.status >= 400:
            raise await self._status_error(response)
        return response

    def _redirect(self, response: aiohttp.ClientResponse, url: str, *, last: bool) -> str:
        """Where a redirect leads, when it may be followed: 307/308 (the POST and its body
        kept) to the same origin, within `_MAX_HOPS`; anything else is one sentence."""
        location = response.headers.get("Location", "")
        status = response.status
        response.release()
        target = urljoin(url, location) if location else ""
        origin = _origin(target) if target else None
        if status not in _FOLLOWED or last or origin is None or origin != _origin(url):
            detail = self._redact(f"HTTP {status} to {location[:200]!r}, not followed")
            raise self._call.error(Failure.REDIRECTED, detail=detail, sent=True, status=status)
        return target

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # The connect alone here; `_deadline` bounds the whole request, answer included.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._settings.timeout_s)
            # Not trust_env: it would also add ~/.netrc credentials (a header `auth: none`
            # must not send) and hop to a thread twice per request. The proxy is read once.
            self._session = aiohttp.ClientSession(timeout=timeout, proxy=_env_proxy(self._url))
        return self._session

    # the response

    async def _chunks(self, response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
        async with aclosing(self._events(response)) as events:
            async for event in events:
                if event == DONE:
                    return
                yield self._chunk(event)

    async def _events(self, response: aiohttp.ClientResponse) -> AsyncGenerator[bytes]:
        parser = SseParser()
        reader = response.content.iter_any().__aiter__()
        size = 0
        while True:
            try:
                data = await reader.__anext__()
            except StopAsyncIteration:
                break
            except Exception as exc:
                raise self._transport_error(exc, midway=True) from exc
            size += len(data)
            if size > MAX_REPLY_BYTES:
                detail = f"the streamed body passed {MAX_REPLY_BYTES} bytes"
                raise self._call.error(Failure.REPLY_TOO_LARGE, detail=detail, sent=True)
            try:
                events = parser.feed(data)
            except LineTooLong as exc:
                raise self._call.error(Failure.LINE_TOO_LONG, detail=str(exc), sent=True) from exc
            for event in events:
                yield event
        for event in parser.finish():
            yield event

    def _chunk(self, event: bytes) -> Any:
        try:
            chunk = json.loads(event)
        except ValueError as exc:
            detail = self._redact(f"unreadable stream event: {event[:200]!r}")
            raise self._call.error(Failure.BROKE_OFF, detail=detail, sent=True) from exc
        if isinstance(chunk, dict) and chunk.get("error"):  # a failure after the 200
            message, _ = _error_fields(chunk)
            detail = self._redact(f"error in the stream: {message}")
            raise self._call.error(Failure.BROKE_OFF, detail=detail, sent=True)
        return chunk

    async def _status_error(self, response: aiohttp.ClientResponse) -> ModelError:
        status = response.status
        try:
            raw = await _read_capped(response.content, _ERROR_BODY_BYTES)
        except Exception:  # the status says enough
            raw = b""
        finally:
            response.release()
        try:
            message, code = _error_fields(json.loads(raw))
        except ValueError:
            message, code = raw.decode(errors="replace")[:500], None
        detail = self._redact(f"HTTP {status}: {message}")
        failure = failure_of_status(status, code, message)
        return self._call.error(failure, detail=detail, sent=True, status=status)

    def _transport_error(self, exc: Exception, *, midway: bool) -> ModelError:
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, asyncio.TimeoutError):
            return self._call.error(Failure.TIMEOUT, detail=detail, sent=True)
        if midway:
            return self._call.error(Failure.BROKE_OFF, detail=detail, sent=True)
        if isinstance(exc, aiohttp.ClientConnectionError | OSError):
            return self._call.error(Failure.UNREACHABLE, detail=detail, sent=False)
        return self._call.error(Failure.UNKNOWN, detail=detail, sent=False)

    def _redact(self, text: str) -> str:
        for key in (self._settings.api_key, self._environ.get(PROVIDER_KEY_ENV)):
            if key:
                text = text.replace(key, "***")
        return text


async def _read_capped(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to `limit` bytes (one `read` returns what has arrived, maybe less)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        part = await content.read(limit - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def is_reasoning_family(model: str) -> bool:
    """OpenAI's reasoning models, told apart by name as LiteLLM does: the o-series (`o1`,
    `o3-mini`, `o4-mini`: `o` and a digit) and gpt-5 onward (a name containing `gpt-5` or
    `gpt-6`, except the `gpt-5-chat` chat models)."""
    name = model.rsplit("/", 1)[-1]
    o_series = len(name) > 1 and name[0] == "o" and name[1].isdigit()
    return o_series or _is_gpt5_family(model)


def _is_gpt5_family(model: str) -> bool:
    name = model.rsplit("/", 1)[-1]
    return any(marker in model for marker in ("gpt-5", "gpt-6")) and "gpt-5-chat" not in name


def fit_reasoning_model(body: dict[str, Any]) -> dict[str, Any]:
    """What OpenAI's reasoning models accept: they refuse `max_tokens` (their limit,
    reasoning included, is `max_completion_tokens`) and any temperature but 1 while they
    reason. Renamed and dropped as LiteLLM does for them with kelpie's `drop_params`
    (`OpenAIOSeriesConfig`, `OpenAIGPT5Config`); a gpt-5 model sent `reasoning_effort:
    none` keeps its temperature. (LiteLLM also keeps it for a model whose map entry says
    its default effort is none; this client does not read the map per request.)"""
    model = str(body.get("model", ""))
    if not is_reasoning_family(model):
        return body
    if "max_tokens" in body:
        body["max_completion_tokens"] = body.pop("max_tokens")
    temperature = body.get("temperature")
    thinks = not (_is_gpt5_family(model) and body.get("reasoning_effort") == "none")
    if temperature is not None and temperature != 1 and thinks:
        del body["temperature"]
    return body


def _env_proxy(url: str) -> str | None:
    """The proxy HTTPS_PROXY / HTTP_PROXY name for `url` (NO_PROXY honoured), as LiteLLM's
    HTTP client would use it."""
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """Scheme, host and port (the scheme's default when none is written); None for a URL
    whose port is not a number."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        return None
    return scheme, (parts.hostname or ""), port


def _error_fields(body: Any) -> tuple[str, str | None]:
    """(message, code) of OpenAI's `{"error": {"message", "type", "code"}}`, or of the flat
    `{"message", "code"}` some compatible servers send."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        return error, None
    fields = error if isinstance(error, dict) else body if isinstance(body, dict) else {}
    code = fields.get("code")
    return str(fields.get("message") or ""), code if isinstance(code, str) else None
