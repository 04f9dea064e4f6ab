"""An OpenAI-compatible model server on 127.0.0.1 that plays a script.

Each POST to `/v1/chat/completions` consumes one queued step. Streamed requests get
server-sent events shaped like OpenAI's (`chat.completion.chunk` objects, an optional
usage chunk with empty `choices`, then `data: [DONE]`); non-streamed requests get one
`chat.completion` object. Every request is recorded so tests can assert what the model
was sent. An empty script answers 500 "script exhausted" (and is remembered), unless a
default step was set with `reply_default`.

It knows nothing about kelpie: it only speaks the wire format.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

UsageSpec = bool | tuple[int, int]
ToolCallSpec = tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str | None]


# --- steps ------------------------------------------------------------------------


@dataclass(frozen=True)
class TextStep:
    """Answer with text, streamed `chunk_size` characters per delta.

    `think` is put in front of the text as `<think>...</think>`, split across chunks
    like any other content (the way some local models send their reasoning).
    """

    text: str
    chunk_size: int = 4
    usage: UsageSpec = True
    think: str | None = None
    finish_reason: str = "stop"
    # Native reasoning (a signed thinking block on Anthropic); the OpenAI peer ignores it.
    reasoning: str | None = None
    # The OpenAI peer holds the stream after its first piece until this is set (or the
    # client leaves, or the peer stops): a test sees what the client does mid-stream.
    hold: asyncio.Event | None = None


@dataclass(frozen=True)
class ToolCallsStep:
    """Answer with tool calls; each call's arguments JSON is split over several deltas."""

    calls: tuple[tuple[str, str, str], ...]  # (call_id, name, arguments_json)
    text: str = ""
    usage: UsageSpec = True
    chunk_size: int = 6
    reasoning: str | None = None


@dataclass(frozen=True)
class ErrorStep:
    status: int
    message: str
    error_type: str | None = None
    code: str | None = None
    param: str | None = None  # the request field at fault, in OpenAI's error body


@dataclass(frozen=True)
class CutStep:
    """Send a few content chunks, then stop: no finish_reason, no [DONE].

    `abort=True` drops the TCP connection mid-body (a crashed server); `abort=False` ends
    the HTTP body cleanly (a proxy that closes the stream early). With `error`, the
    OpenAI-compatible peer first sends it as an event `{"error": {...}}`, the way OpenAI
    reports a failure after the 200 (other peers ignore it).
    """

    text: str = "This answer is cut"
    chunk_size: int = 4
    abort: bool = True
    error: str | None = None


@dataclass(frozen=True)
class HangStep:
    """Hold the request for `seconds` without sending anything, then play `then` (or drop).
    With `release`, hold it until the test sets that event instead: no clock decides."""

    seconds: float
    then: Step | None = None
    release: asyncio.Event | None = None


@dataclass(frozen=True)
class LongLineStep:
    """Start an event and never end its line: `size` bytes of content, written in 64 KB
    pieces (what the client read is in `line_bytes_sent`), then the rest of the stream."""

    size: int


@dataclass(frozen=True)
class TrickleStep:
    """Answer with `text`, one character every `interval` seconds: each read gets data
    in time, the whole answer takes `len(text) * interval`."""

    text: str
    interval: float


@dataclass(frozen=True)
class RedirectStep:
    """Answer with `status` and `Location: location` (and no body)."""

    status: int
    location: str


@dataclass(frozen=True)
class DynamicStep:
    """Let a function pick the step from the request body."""

    decide: Callable[[dict[str, Any]], Step]


Step = (
    TextStep
    | ToolCallsStep
    | ErrorStep
    | CutStep
    | HangStep
    | DynamicStep
    | LongLineStep
    | TrickleStep
    | RedirectStep
)


def tool_calls_step(
    calls: Sequence[ToolCallSpec],
    *,
    text: str = "",
    usage: UsageSpec = True,
    chunk_size: int = 6,
    reasoning: str | None = None,
) -> ToolCallsStep:
    """Build a ToolCallsStep from `(name, args)` or `(name, args, call_id)` tuples."""
    normalized: list[tuple[str, str, str]] = []
    for i, spec in enumerate(calls):
        name, args = spec[0], spec[1]
        call_id = spec[2] if len(spec) > 2 else None
        arguments = args if isinstance(args, str) else json.dumps(args)
        normalized.append((call_id or f"call_{i}_{uuid.uuid4().hex[:8]}", name, arguments))
    return ToolCallsStep(
        tuple(normalized), text=text, usage=usage, chunk_size=chunk_size, reasoning=reasoning
    )


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    step: str = ""
    query: dict[str, str] = field(default_factory=dict)
    # When it arrived (time.monotonic), to order it against other peers' records.
    time: float = field(default_factory=time.monotonic)


@dataclass
class _Script:
    steps: deque[Step] = field(default_factory=deque)
    default: Step | None = None


# --- server -----------------------------------------------------------------------


class ScriptedPeer:
    """What every scripted provider peer shares: the script, the request log, the lifecycle.

    A subclass adds its routes, its `api_base`, its error shape and how it plays a step on
    its own wire format; `_accept` records a request and picks the step it gets.
    """

    base_path = ""

    def __init__(self, *, model: str = "test-model") -> None:
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.recorded: list[RecordedRequest] = []
        self.exhausted: list[dict[str, Any]] = []
        # Requests the peer refused the way the real provider would (status, message).
        self.rejected: list[tuple[int, str]] = []
        # (input, output) tokens of each usage report sent, in the provider's own fields.
        self.usage_reported: list[tuple[int, int]] = []
        # Bytes of a `LongLineStep`'s line written before the client stopped reading.
        self.line_bytes_sent = 0
        self._script = _Script()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._arrived = asyncio.Condition()
        self._closing = asyncio.Event()

    # lifecycle

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def root(self) -> str:
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_base(self) -> str:
        return self.root + self.base_path

    @property
    def headers(self) -> list[dict[str, str]]:
        return [r.headers for r in self.recorded]

    # script

    def enqueue(self, step: Step) -> None:
        self._script.steps.append(step)

    def reply_text(
        self,
        text: str,
        *,
        chunk_size: int = 4,
        usage: UsageSpec = True,
        think: str | None = None,
        finish_reason: str = "stop",
        reasoning: str | None = None,
        hold: asyncio.Event | None = None,
    ) -> None:
        self.enqueue(TextStep(text, chunk_size, usage, think, finish_reason, reasoning, hold))

    def reply_tool_calls(
        self,
        calls: Sequence[ToolCallSpec],
        *,
        text: str = "",
        usage: UsageSpec = True,
        chunk_size: int = 6,
        reasoning: str | None = None,
    ) -> None:
        self.enqueue(
            tool_calls_step(
                calls, text=text, usage=usage, chunk_size=chunk_size, reasoning=reasoning
            )
        )

    def reply_error(
        self,
        status: int,
        message: str = "upstream failure",
        *,
        error_type: str | None = None,
        code: str | None = None,
    ) -> None:
        self.enqueue(ErrorStep(status, message, error_type, code))

    def reply_cut(
        self,
        text: str = "This answer is cut",
        *,
        chunk_size: int = 4,
        abort: bool = True,
        error: str | None = None,
    ) -> None:
        self.enqueue(CutStep(text, chunk_size, abort, error))

    def reply_hang(self, seconds: float, *, then: Step | None = None) -> None:
        self.enqueue(HangStep(seconds, then))

    def reply_held(self, *, then: Step | None = None) -> asyncio.Event:
        """The next request waits, sending nothing, until the returned event is set (or the
        client gives up), then gets `then` (None: the connection is dropped)."""
        release = asyncio.Event()
        self.enqueue(HangStep(0, then, release))
        return release

    def reply_with(self, decide: Callable[[dict[str, Any]], Step]) -> None:
        self.enqueue(DynamicStep(decide))

    def reply_default(self, step: Step | None) -> None:
        """Play `step` whenever the queue is empty (None restores "script exhausted")."""
        self._script.default = step

    # assertions

    @property
    def pending_steps(self) -> int:
        return len(self._script.steps)

    def assert_script_consumed(self) -> None:
        assert not self.rejected, f"the peer refused request(s): {self.rejected}"
        assert not self.exhausted, (
            f"{len(self.exhausted)} request(s) arrived after the script ran out; "
            f"last request: {self.exhausted[-1]!r}"
        )
        assert not self._script.steps, f"{len(self._script.steps)} scripted step(s) never played"

    # The shared peer API takes a timeout, like the other peers' wait_for_* helpers.
    async def wait_for_requests(self, n: int, timeout: float = 10) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.requests) >= n)
        return self.requests

    @property
    def open_connections(self) -> int:
        """TCP connections clients hold open to this peer now (kept-alive ones included)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def wait_connections_closed(self, timeout: float = 10) -> None:
        """Until every client has closed its connections (a client left open holds them)."""
        async with asyncio.timeout(timeout):
            while self.open_connections:
                await asyncio.sleep(0.01)

    def _report(self, usage: dict[str, int]) -> dict[str, int]:
        """Record an OpenAI-shaped usage report on its way out."""
        self.usage_reported.append((usage["prompt_tokens"], usage["completion_tokens"]))
        return usage

    # handling

    async def _accept(self, request: web.Request, body: dict[str, Any]) -> Step | None:
        """Record the request and take its step (None: the script ran out)."""
        step: Step | None
        if self._script.steps:
            step = self._script.steps.popleft()
        else:
            step = self._script.default
        while isinstance(step, DynamicStep):
            step = step.decide(body)
        self.recorded.append(
            RecordedRequest(
                request.path, dict(request.headers), body, type(step).__name__, dict(request.query)
            )
        )
        self.requests.append(body)
        if step is None:
            self.exhausted.append(body)
        async with self._arrived:
            self._arrived.notify_all()
        return step

    async def _record_only(self, request: web.Request, body: dict[str, Any]) -> None:
        """Record a request refused before any step plays (the script is not consumed)."""
        self.recorded.append(
            RecordedRequest(
                request.path, dict(request.headers), body, "rejected", dict(request.query)
            )
        )
        self.requests.append(body)
        async with self._arrived:
            self._arrived.notify_all()

    async def _refuse(
        self, request: web.Request, body: dict[str, Any], status: int, message: str
    ) -> web.Response:
        """Refuse what the provider refuses, in the provider's own error shape."""
        await self._record_only(request, body)
        self.rejected.append((status, message))
        return self._error(ErrorStep(status, message))

    async def _play_common(self, request: web.Request, step: Step) -> Step | web.StreamResponse:
        """Hang and error steps look the same on every peer but for the error body."""
        while isinstance(step, HangStep):
            await self._hang(step)
            if step.then is None or self._closing.is_set():
                _drop(request)
                return web.Response(status=204)
            step = step.then
        if isinstance(step, ErrorStep):
            return self._error(step)
        return step

    async def _hang(self, step: HangStep) -> None:
        """Until the step's time passed or its release was set, or the peer stops."""
        waits = [asyncio.ensure_future(self._closing.wait())]
        if step.release is not None:
            waits.append(asyncio.ensure_future(step.release.wait()))
        timeout = None if step.release is not None else step.seconds
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _error(self, step: ErrorStep) -> web.Response:
        raise NotImplementedError


class ModelServer(ScriptedPeer):
    """Scripted OpenAI-compatible server; `api_base` is `http://127.0.0.1:PORT/v1`."""

    base_path = "/v1"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/chat/completions", self._chat_completions)

    def _error(self, step: ErrorStep) -> web.Response:
        return _error_response(step)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error_response(ErrorStep(400, "request body is not JSON"))
        refusal = _reasoning_model_refusal(body)
        if refusal is not None:
            await self._record_only(request, body)
            self.rejected.append((refusal.status, refusal.message))
            return _error_response(refusal)
        step = await self._accept(request, body)
        if step is None:
            return _error_response(ErrorStep(500, "script exhausted", "server_error"))
        played = await self._play_common(request, step)
        if isinstance(played, web.StreamResponse):
            return played
        if isinstance(played, RedirectStep):
            return web.Response(status=played.status, headers={"Location": played.location})
        if isinstance(played, LongLineStep | TrickleStep):
            return await self._stream_slowly(request, played)
        if body.get("stream"):
            return await self._stream(request, body, played)
        return web.json_response(self._completion(body, played))

    # non-streamed

    def _completion(self, body: dict[str, Any], step: Step) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish_reason = "stop"
        out_text = ""
        if isinstance(step, TextStep):
            out_text = _visible(step)
            message["content"] = out_text
            finish_reason = step.finish_reason
        elif isinstance(step, ToolCallsStep):
            message["content"] = step.text or None
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in step.calls
            ]
            finish_reason = "tool_calls"
            out_text = step.text + "".join(args for _, _, args in step.calls)
        elif isinstance(step, CutStep):
            message["content"] = step.text
            out_text = step.text
        result: dict[str, Any] = {
            "id": _new_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        usage_spec = getattr(step, "usage", True)
        if usage_spec is not False:
            result["usage"] = self._report(_usage(body, out_text, usage_spec))
        return result

    # streamed

    async def _stream(
        self, request: web.Request, body: dict[str, Any], step: Step
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await response.prepare(request)
        chunk_id = _new_id()
        created = int(time.time())
        model = body.get("model", self.model)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def send(
            delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any
        ) -> None:
            obj: dict[str, Any] = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_test",
                "choices": []
                if delta is None
                else [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if include_usage:  # OpenAI: every other chunk carries `"usage": null`
                obj["usage"] = None
            obj.update(extra)
            await response.write(f"data: {json.dumps(obj)}\n\n".encode())

        await send({"role": "assistant", "content": ""})

        if isinstance(step, CutStep):
            for piece in _pieces(step.text, step.chunk_size)[:3]:
                await send({"content": piece})
            if step.error is not None:
                failure = {"message": step.error, "type": "server_error", "code": None}
                await response.write(f"data: {json.dumps({'error': failure})}\n\n".encode())
            if step.abort:
                _drop(request)
            else:
                await response.write_eof()
            return response

        out_text = ""
        finish_reason = "stop"
        usage_spec: UsageSpec = True
        if isinstance(step, TextStep):
            content = _visible(step)
            for i, piece in enumerate(_pieces(content, step.chunk_size)):
                await send({"content": piece})
                if i == 0 and step.hold is not None:
                    await self._hang(HangStep(0, release=step.hold))
            out_text, finish_reason, usage_spec = content, step.finish_reason, step.usage
        elif isinstance(step, ToolCallsStep):
            for piece in _pieces(step.text, step.chunk_size):
                await send({"content": piece})
            for index, (call_id, name, args) in enumerate(step.calls):
                await send(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in _pieces(args, step.chunk_size):
                    await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            out_text = step.text + "".join(args for _, _, args in step.calls)
            finish_reason, usage_spec = "tool_calls", step.usage

        await send({}, finish_reason)
        if include_usage and usage_spec is not False:
            await send(None, usage=self._report(_usage(body, out_text, usage_spec)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _stream_slowly(
        self, request: web.Request, step: LongLineStep | TrickleStep
    ) -> web.StreamResponse:
        """An endless line or a trickle: what a hostile or broken server streams."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if isinstance(step, LongLineStep):
                await self._long_line(response, step.size)
            else:
                for char in step.text:
                    delta = {"choices": [{"index": 0, "delta": {"content": char}}]}
                    await response.write(f"data: {json.dumps(delta)}\n\n".encode())
                    await asyncio.sleep(step.interval)
            done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            await response.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client left: what it read is recorded
            pass
        return response

    async def _long_line(self, response: web.StreamResponse, size: int) -> None:
        await response.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
        piece = b"x" * 65536
        while self.line_bytes_sent < size:
            await response.write(piece)
            self.line_bytes_sent += len(piece)
        await response.write(b'"}}]}\n\n')


# --- helpers ----------------------------------------------------------------------


def _new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _visible(step: TextStep) -> str:
    if step.think is not None:
        return f"<think>{step.think}</think>{step.text}"
    return step.text


def _usage(body: dict[str, Any], out_text: str, spec: UsageSpec) -> dict[str, int]:
    if isinstance(spec, tuple):
        prompt, completion = spec
    else:
        sent = json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))
        prompt, completion = max(1, len(sent) // 4), max(1, len(out_text) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _error_response(step: ErrorStep) -> web.Response:
    default_type, default_code = _ERROR_TYPES.get(step.status, ("server_error", None))
    payload = {
        "error": {
            "message": step.message,
            "type": step.error_type or default_type,
            "param": step.param,
            "code": step.code if step.code is not None else default_code,
        }
    }
    return web.json_response(payload, status=step.status)


def _reasoning_model(name: str) -> tuple[bool, bool]:
    """(is a reasoning model, is of the gpt-5 family), by OpenAI's names: the o-series
    (`o1`, `o3-mini`, `o4-mini`) and gpt-5 onward (not the `gpt-5-chat` chat models)."""
    gpt5 = ("gpt-5" in name or "gpt-6" in name) and "gpt-5-chat" not in name
    return (len(name) > 1 and name[0] == "o" and name[1].isdigit()) or gpt5, gpt5


def _reasoning_model_refusal(body: dict[str, Any]) -> ErrorStep | None:
    """What OpenAI answers a reasoning model's request that sets `max_tokens`, or a
    temperature other than 1 while it reasons (a gpt-5 model told `reasoning_effort: none`
    takes one): 400, `invalid_request_error`, the field in `param`."""
    reasoning, gpt5 = _reasoning_model(str(body.get("model", "")))
    if not reasoning:
        return None
    if "max_tokens" in body:
        message = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
        return ErrorStep(400, message, code="unsupported_parameter", param="max_tokens")
    temperature = body.get("temperature")
    if temperature not in (None, 1) and not (gpt5 and body.get("reasoning_effort") == "none"):
        message = (
            f"Unsupported value: 'temperature' does not support {temperature} with this "
            "model. Only the default (1) value is supported."
        )
        return ErrorStep(400, message, code="unsupported_value", param="temperature")
    return None


def _drop(request: web.Request) -> None:
    """Close the TCP connection abruptly, the way a crashed or restarted server does."""
    transport = request.transport
    if transport is not None:
        transport.abort()
