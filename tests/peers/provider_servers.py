"""Scripted peers for the other wire formats LiteLLM speaks: Anthropic, Gemini, Ollama.

They play the same steps as the OpenAI-compatible `ModelServer` (text, tool calls, errors,
hangs, cut streams), each on its own provider's wire format and streaming framing, and
each refuses what its provider refuses, with the provider's own error shape:

- Anthropic Messages API (`POST /v1/messages`, SSE events): `x-api-key` and
  `anthropic-version` headers, non-empty text blocks, every `tool_use` answered by a
  `tool_result` in the next message, and with extended thinking on: `budget_tokens` of at
  least 1,024 and below `max_tokens`, no `temperature` but 1, and the last assistant turn
  with tool calls must start with the signed thinking block this peer issued for it.
- Gemini (`POST /v1beta/models/<m>:streamGenerateContent?alt=sse`): the `x-goog-api-key`
  header, roles `user`/`model`, no empty text part (next to function calls or anywhere),
  and as many function responses as the function call turn made calls.
- Ollama (`POST /api/chat`, NDJSON stream): a known model name, tool-call arguments as
  JSON objects (not strings), and a bearer token only when the peer was given one.

They know nothing about kelpie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from aiohttp import web

from tests.peers.model_server import (
    CutStep,
    ErrorStep,
    ScriptedPeer,
    Step,
    TextStep,
    ToolCallsStep,
    _drop,
    _pieces,
    _visible,
)

_SIGNING_KEY = b"kelpie-test-peer-thinking"


def sign_thinking(thinking: str) -> str:
    """The signature the Anthropic peer puts on a thinking block it sends."""
    digest = hmac.new(_SIGNING_KEY, thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


async def _json_body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


# --- Anthropic -------------------------------------------------------------------------

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
THINKING_REQUIRED = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`."
)


class AnthropicServer(ScriptedPeer):
    """The Messages API; `api_base` is the server root (LiteLLM adds `/v1/messages`)."""

    def __init__(self, *, model: str = "claude-test", api_key: str | None = None) -> None:
        super().__init__(model=model)
        self.api_key = api_key

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)

    def _error(self, step: ErrorStep) -> web.Response:
        kind = step.error_type or _ANTHROPIC_ERRORS.get(step.status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": step.message}}
        return web.json_response(payload, status=step.status)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        if body is None:
            return self._error(ErrorStep(400, "There was an error parsing the body."))
        key = request.headers.get("x-api-key")
        if self.api_key is not None and key != self.api_key:
            return await self._refuse(request, body, 401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return await self._refuse(request, body, 400, "anthropic-version: header is required")
        problem = anthropic_problem(body)
        if problem is not None:
            return await self._refuse(request, body, 400, problem)
        step = await self._accept(request, body)
        if step is None:
            return self._error(ErrorStep(500, "script exhausted"))
        played = await self._play_common(request, step)
        if isinstance(played, web.StreamResponse):
            return played
        blocks = self._blocks(body, played)
        if not body.get("stream"):
            return web.json_response(self._message(body, played, blocks))
        return await self._stream(request, body, played, blocks)

    def _blocks(self, body: dict[str, Any], step: Step) -> list[dict[str, Any]]:
        """The content blocks of the answer, complete (the stream splits them)."""
        blocks: list[dict[str, Any]] = []
        thinking_on = (body.get("thinking") or {}).get("type") == "enabled"
        reasoning = getattr(step, "reasoning", None)
        if thinking_on and reasoning:
            blocks.append(
                {"type": "thinking", "thinking": reasoning, "signature": sign_thinking(reasoning)}
            )
        if isinstance(step, TextStep | CutStep):
            text = _visible(step) if isinstance(step, TextStep) else step.text
            blocks.append({"type": "text", "text": text})
        elif isinstance(step, ToolCallsStep):
            if step.text:
                blocks.append({"type": "text", "text": step.text})
            for call_id, name, arguments in step.calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": name,
                        "input": json.loads(arguments),
                    }
                )
        return blocks

    @staticmethod
    def _stop_reason(step: Step) -> str:
        if isinstance(step, ToolCallsStep):
            return "tool_use"
        if isinstance(step, TextStep) and step.finish_reason == "length":
            return "max_tokens"
        return "end_turn"

    def _message(
        self, body: dict[str, Any], step: Step, blocks: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", self.model),
            "content": blocks,
            "stop_reason": self._stop_reason(step),
            "stop_sequence": None,
            "usage": {
                "input_tokens": _tokens(body.get("messages")),
                "output_tokens": _tokens(blocks),
            },
        }

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        step: Step,
        blocks: list[dict[str, Any]],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        message = self._message(body, step, [])
        message["stop_reason"] = None
        message["usage"]["output_tokens"] = 1
        await send("message_start", {"type": "message_start", "message": message})
        size = getattr(step, "chunk_size", 4)
        for index, block in enumerate(blocks):
            await self._stream_block(send, index, block, size)
            if isinstance(step, CutStep):
                if step.abort:
                    _drop(request)
                else:
                    await response.write_eof()
                return response
        output_tokens = _tokens(blocks)
        self.usage_reported.append((message["usage"]["input_tokens"], output_tokens))
        await send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(step), "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
        await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response

    @staticmethod
    async def _stream_block(send: Any, index: int, block: dict[str, Any], size: int) -> None:
        kind = block["type"]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], size)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], size)]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments, size)
            ]
        await send(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            await send(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        await send("content_block_stop", {"type": "content_block_stop", "index": index})


def anthropic_problem(body: dict[str, Any]) -> str | None:
    """What the Messages API would refuse in this request body, or None."""
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        problem = _thinking_options_problem(body, thinking)
        if problem is not None:
            return problem
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for position, block in enumerate(blocks):
            if block.get("type") == "text" and not block.get("text"):
                return "messages: text content blocks must be non-empty"
            if block.get("type") == "thinking" and block.get("signature") != sign_thinking(
                block.get("thinking", "")
            ):
                return (
                    f"messages.{index}.content.{position}: Invalid `signature` in `thinking` block"
                )
        problem = _tool_results_problem(messages, index, blocks)
        if problem is not None:
            return problem
    if thinking.get("type") == "enabled":
        return _final_thinking_problem(messages)
    return None


def _thinking_options_problem(body: dict[str, Any], thinking: dict[str, Any]) -> str | None:
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if body.get("temperature") not in (None, 1, 1.0):
        return "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode."
    return None


def _tool_results_problem(
    messages: list[dict[str, Any]], index: int, blocks: list[dict[str, Any]]
) -> str | None:
    ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
    if not ids or messages[index].get("role") != "assistant":
        return None
    following = messages[index + 1] if index + 1 < len(messages) else None
    answered: set[str] = set()
    if following is not None and isinstance(following.get("content"), list):
        answered = {
            b.get("tool_use_id", "") for b in following["content"] if b.get("type") == "tool_result"
        }
    missing = [i for i in ids if i not in answered]
    if missing:
        return (
            f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(str(m) for m in missing)}. Each `tool_use` block "
            "must have a corresponding `tool_result` block in the next message."
        )
    return None


def _final_thinking_problem(messages: list[dict[str, Any]]) -> str | None:
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None:
        return None
    content = messages[last].get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if not any(b.get("type") == "tool_use" for b in blocks):
        return None
    first = blocks[0].get("type")
    if first not in ("thinking", "redacted_thinking"):
        return THINKING_REQUIRED.format(index=last, found=first)
    return None


# --- Gemini ----------------------------------------------------------------------------

EMPTY_TEXT = (
    "Unable to submit request because it has an empty text parameter. Add a value to the "
    "parameter and try again."
)
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


class GeminiServer(ScriptedPeer):
    """Google AI Studio's `generateContent`; `api_base` ends in `/v1beta`."""

    base_path = "/v1beta"

    def __init__(self, *, model: str = "gemini-test", api_key: str | None = None) -> None:
        super().__init__(model=model)
        self.api_key = api_key

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{action}", self._generate)

    def _error(self, step: ErrorStep) -> web.Response:
        status = step.error_type or _GEMINI_STATUS.get(step.status, "INTERNAL")
        payload = {"error": {"code": step.status, "message": step.message, "status": status}}
        return web.json_response(payload, status=step.status)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        if body is None:
            return self._error(ErrorStep(400, "Invalid JSON payload received."))
        model, _, action = request.match_info["action"].partition(":")
        key = request.headers.get("x-goog-api-key") or request.query.get("key")
        if self.api_key is not None and key is None:
            return await self._refuse(
                request, body, 403, "Method doesn't allow unregistered callers."
            )
        if self.api_key is not None and key != self.api_key:
            return await self._refuse(
                request, body, 400, "API key not valid. Please pass a valid API key."
            )
        if model != self.model:
            return await self._refuse(request, body, 404, f"models/{model} is not found.")
        problem = gemini_problem(body)
        if problem is not None:
            return await self._refuse(request, body, 400, problem)
        step = await self._accept(request, body)
        if step is None:
            return self._error(ErrorStep(500, "script exhausted"))
        played = await self._play_common(request, step)
        if isinstance(played, web.StreamResponse):
            return played
        chunks = self._chunks(body, played)
        if action != "streamGenerateContent":
            parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
            final = dict(chunks[-1])
            final["candidates"] = [
                {**chunks[-1]["candidates"][0], "content": {"role": "model", "parts": parts}}
            ]
            return web.json_response(final)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        if isinstance(played, CutStep):
            if played.abort:
                _drop(request)
            return response
        await response.write_eof()
        return response

    def _chunks(self, body: dict[str, Any], step: Step) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        finish = "STOP"
        size = getattr(step, "chunk_size", 4)
        if isinstance(step, TextStep):
            parts = [{"text": p} for p in _pieces(_visible(step), size)]
            finish = "MAX_TOKENS" if step.finish_reason == "length" else "STOP"
        elif isinstance(step, CutStep):
            parts = [{"text": p} for p in _pieces(step.text, size)[:3]]
        elif isinstance(step, ToolCallsStep):
            parts = [{"text": p} for p in _pieces(step.text, size)]
            parts += [
                {"functionCall": {"name": name, "args": json.loads(arguments)}}
                for _, name, arguments in step.calls
            ]
        chunks = [self._chunk([part]) for part in parts] or [self._chunk([{"text": ""}])]
        if isinstance(step, CutStep):
            return chunks
        last = chunks[-1]["candidates"][0]
        last["finishReason"] = finish
        prompt, answer = _tokens(body.get("contents")), _tokens(parts)
        self.usage_reported.append((prompt, answer))
        chunks[-1]["usageMetadata"] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": answer,
            "totalTokenCount": prompt + answer,
        }
        return chunks

    def _chunk(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "modelVersion": self.model,
        }


def gemini_problem(body: dict[str, Any]) -> str | None:
    """What `generateContent` would refuse in this request body, or None."""
    contents = body.get("contents") or []
    if not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    calls_before = 0
    for content in contents:
        if content.get("role") not in ("user", "model"):
            return "Please use a valid role: user, model."
        parts = content.get("parts") or []
        if not parts:
            return "* GenerateContentRequest.contents.parts: contents.parts must not be empty."
        for part in parts:
            if "text" in part and not part["text"]:
                return EMPTY_TEXT
        # The proto JSON mapping takes both spellings (LiteLLM sends snake_case).
        calls = sum(1 for p in parts if "functionCall" in p or "function_call" in p)
        responses = sum(1 for p in parts if "functionResponse" in p or "function_response" in p)
        if responses and responses != calls_before:
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
        calls_before = calls
    return None


# --- Ollama ----------------------------------------------------------------------------


class OllamaServer(ScriptedPeer):
    """Ollama's `/api/chat`; `api_base` is the server root."""

    def __init__(self, *, model: str = "test-model", api_key: str | None = None) -> None:
        super().__init__(model=model)
        self.api_key = api_key

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", self._chat)

    def _error(self, step: ErrorStep) -> web.Response:
        return web.json_response({"error": step.message}, status=step.status)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        if body is None:
            return self._error(ErrorStep(400, "invalid character in request body"))
        if (
            self.api_key is not None
            and request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            return await self._refuse(request, body, 401, "unauthorized")
        if body.get("model") != self.model:
            return await self._refuse(
                request, body, 404, f'model "{body.get("model")}" not found, try pulling it first'
            )
        problem = ollama_problem(body)
        if problem is not None:
            return await self._refuse(request, body, 400, problem)
        step = await self._accept(request, body)
        if step is None:
            return self._error(ErrorStep(500, "script exhausted"))
        played = await self._play_common(request, step)
        if isinstance(played, web.StreamResponse):
            return played
        lines = self._lines(body, played)
        if body.get("stream") is False:
            message = {
                "role": "assistant",
                "content": "".join(line["message"]["content"] for line in lines),
            }
            calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
            if calls:
                message["tool_calls"] = calls
            return web.json_response({**lines[-1], "message": message})
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for line in lines:
            await response.write(json.dumps(line).encode() + b"\n")
        if isinstance(played, CutStep):
            if played.abort:
                _drop(request)
            return response
        await response.write_eof()
        return response

    def _lines(self, body: dict[str, Any], step: Step) -> list[dict[str, Any]]:
        size = getattr(step, "chunk_size", 4)
        lines: list[dict[str, Any]] = []
        reasoning = getattr(step, "reasoning", None)
        if reasoning and body.get("think"):
            lines.append(self._line({"content": "", "thinking": reasoning}))
        done_reason = "stop"
        if isinstance(step, TextStep):
            lines += [self._line({"content": p}) for p in _pieces(_visible(step), size)]
            done_reason = "length" if step.finish_reason == "length" else "stop"
        elif isinstance(step, CutStep):
            return [self._line({"content": p}) for p in _pieces(step.text, size)[:3]]
        elif isinstance(step, ToolCallsStep):
            lines += [self._line({"content": p}) for p in _pieces(step.text, size)]
            calls = [
                {"function": {"name": name, "arguments": json.loads(arguments)}}
                for _, name, arguments in step.calls
            ]
            lines.append(self._line({"content": "", "tool_calls": calls}))
        final = self._line({"content": ""})
        prompt, answer = _tokens(body.get("messages")), _tokens([line["message"] for line in lines])
        self.usage_reported.append((prompt, answer))
        final.update(
            done=True,
            done_reason=done_reason,
            total_duration=1_000_000,
            prompt_eval_count=prompt,
            eval_count=answer,
        )
        return [*lines, final]

    def _line(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.model,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "message": {"role": "assistant", **message},
            "done": False,
        }


def ollama_problem(body: dict[str, Any]) -> str | None:
    """What `/api/chat` would refuse in this request body, or None."""
    for message in body.get("messages") or []:
        if message.get("role") not in ("system", "user", "assistant", "tool"):
            return f"invalid role: {message.get('role')}"
        for call in message.get("tool_calls") or []:
            if not isinstance((call.get("function") or {}).get("arguments"), dict):
                return (
                    "json: cannot unmarshal string into Go struct field "
                    "ToolCallFunction.messages.tool_calls.function.arguments of type "
                    "api.ToolCallFunctionArguments"
                )
    return None
