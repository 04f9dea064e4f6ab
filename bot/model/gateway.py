"""The LiteLLM implementation of `ModelGateway`: one streamed HTTP request per call.

This is the only module that imports litellm. It imports it lazily (the import costs
seconds and hundreds of MB) and never lets LiteLLM or the openai client retry on their
own: the engine owns the retry policy. It owns turning a stream of deltas into a
`ModelReply` and provider failures into a `ModelError` a person can act on. It does not
mask or size-limit what is sent (that is `outbound.py`) and it does not choose models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from bot.config import AuthMethod
from bot.model.nocredential import PLACEHOLDER_KEY, no_credential_client
from bot.model.types import (
    FinishReason,
    ModelCapabilities,
    ModelError,
    ModelReply,
    ModelRequest,
    TextSink,
    Usage,
    estimate_usage,
)
from bot.values import ThinkingBlock, ToolCallRequest

log = logging.getLogger(__name__)

# Providers whose models run on the operator's own machines (LiteLLM prefixes).
_LOCAL_PROVIDERS = frozenset({"ollama", "ollama_chat"})
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def _import_litellm() -> ModuleType:
    # Without this, `import litellm` fetches the model cost map from GitHub first.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    # kelpie never asks LiteLLM for a cost or a token count; its usage is the provider's
    # or kelpie's own estimate. Otherwise each request loads a tokenizer (tens of MB, once)
    # and selects it again to price the response, even when the provider reported usage.
    litellm.disable_token_counter = True
    return litellm


async def warm_up(model: str) -> None:
    """Import LiteLLM (seconds, and most of kelpie's memory) off the event loop and resolve
    the model's provider, then rehearse a streamed request, so the first question does not
    pay for any of it."""

    def load() -> None:
        litellm = _import_litellm()
        with contextlib.suppress(Exception):  # an unknown provider fails on first use instead
            litellm.get_llm_provider(model)

    await asyncio.to_thread(load)
    await _rehearse(model)


async def _rehearse(model: str) -> None:
    """One streamed completion that never leaves the process (LiteLLM's `mock_response`):
    LiteLLM imports about 60 more modules on its first request (its stream wrapper, logging
    and proxy types, anyio) and builds their pydantic types, about a second of the first
    answer on 2 cores. Run on the loop that will serve the turns, before Slack connects."""
    litellm = _import_litellm()
    try:
        stream = await litellm.acompletion(
            model=model,
            messages=[{"role": "user", "content": "warm-up"}],
            stream=True,
            stream_options={"include_usage": True},
            mock_response="ok",
        )
        async for _ in stream:
            pass
    except Exception:  # a warm start is a nicety: the first question pays instead
        log.info("the model library's warm-up request failed", exc_info=True)


class LiteLLMGateway:
    """Talks to one model through LiteLLM; built from plain configuration values."""

    def __init__(
        self,
        *,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_s: float = 120.0,
        extra: dict[str, Any] | None = None,
        profile: str = "default",
        auth: AuthMethod = AuthMethod.PROVIDER_DEFAULT,
    ) -> None:
        if auth is AuthMethod.ENVIRONMENT and not api_key:
            # Never fall back to LiteLLM's own lookup when the named variable is missing.
            raise ValueError(f"profile {profile}: auth environment needs its key")
        self._auth = auth
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s
        self._extra = dict(extra or {})
        self._profile = profile
        self._client: Any = None  # `auth: none` only

    def __repr__(self) -> str:  # never show the key
        return f"LiteLLMGateway(model={self._model!r}, api_base={self._api_base!r})"

    @property
    def model_name(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        litellm = _import_litellm()
        kwargs = self._call_options(stream=True)
        kwargs["messages"] = request.messages
        if request.tools:
            kwargs["tools"] = request.tools
        kwargs["stream_options"] = {"include_usage": True}
        if self._max_tokens is not None:
            kwargs["max_tokens"] = self._max_tokens
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
            # Reasoning models refuse a temperature (Anthropic with thinking: only 1).
            kwargs.pop("temperature", None)

        try:
            stream = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise self._model_error(exc, litellm) from exc

        assembly = _Assembly()
        think = ThinkFilter()
        try:
            iterator = stream.__aiter__()
            while True:
                try:
                    chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._model_error(exc, litellm, midway=True) from exc
                # on_text runs outside the try: its failures are not the model's.
                visible = think.feed(assembly.take(chunk))
                if visible:
                    await on_text(visible)
            tail = think.finish()
            if tail:
                await on_text(tail)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # closing a broken stream may fail again; nothing to add
                    log.debug("closing the model stream failed", exc_info=True)

        if assembly.finish_reason is None:
            raise ModelError(
                "The model's answer broke off before it finished.",
                retryable=True,
                detail="stream ended without a finish_reason",
                sent=True,
            )
        return ModelReply(
            text=think.text,
            tool_calls=assembly.tool_calls(),
            finish_reason=assembly.finish(),
            usage=self._usage(request, assembly),
            model=self._model,
            thinking=assembly.thinking_blocks(),
        )

    async def ping(self) -> None:
        """One non-streamed, one-token request: proves the address, the key and the model."""
        litellm = _import_litellm()
        kwargs = self._call_options(stream=False)
        kwargs["messages"] = [{"role": "user", "content": "Reply with OK."}]
        kwargs["max_tokens"] = 1
        try:
            await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise self._model_error(exc, litellm) from exc

    # internals

    def _call_options(self, *, stream: bool) -> dict[str, Any]:
        # drop_params: local servers reject options they do not know; `extra` may say otherwise.
        options: dict[str, Any] = {"drop_params": True, **self._extra}
        options.update(
            model=self._model,
            stream=stream,
            timeout=self._timeout_s,
            max_retries=0,  # the openai client would retry 5xx and 429 twice
            num_retries=0,  # and LiteLLM has its own retry loop
        )
        if self._api_base:
            options["api_base"] = self._api_base
        if self._auth is AuthMethod.NONE:
            # A placeholder stops LiteLLM's environment lookup; the client strips it.
            options["api_key"] = PLACEHOLDER_KEY
            options["client"] = self._no_credential_client()
        elif self._api_key:
            # environment: exactly the named variable; provider-default may still name one.
            options["api_key"] = self._api_key
        if self._temperature is not None:
            options["temperature"] = self._temperature
        if self._model.split("/", 1)[0] in _LOCAL_PROVIDERS:
            # A local model costs nothing; saying so also keeps LiteLLM from asking the
            # server for the model's price with a blocking request on the event loop.
            options.setdefault("input_cost_per_token", 0.0)
            options.setdefault("output_cost_per_token", 0.0)
        return options

    async def close(self) -> None:
        """Close the `auth: none` HTTP client and its connections, if one was made (the
        other methods' clients are LiteLLM's own, cached and shared)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _no_credential_client(self) -> Any:
        if self._client is None:
            provider = _import_litellm().get_llm_provider(self._model)[1]
            self._client = no_credential_client(
                provider, api_base=self._api_base, timeout_s=self._timeout_s
            )
        return self._client

    @staticmethod
    def _usage(request: ModelRequest, assembly: _Assembly) -> Usage:
        """The usage of LiteLLM's final stream chunk (`stream_options.include_usage`, its
        documented way): the provider's own figures. When the provider sent none, that chunk
        holds zeros (LiteLLM's token counter is off) and kelpie estimates."""
        reported = assembly.usage
        input_tokens = int(getattr(reported, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(reported, "completion_tokens", 0) or 0)
        if input_tokens or output_tokens:
            return Usage(input_tokens, output_tokens)
        calls = "".join(c.arguments for c in assembly.tool_calls())
        return estimate_usage(request, assembly.raw_text, calls)

    def _model_error(self, exc: Exception, litellm: Any, *, midway: bool = False) -> ModelError:
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        log.warning("model call to %s failed: %s", self._model, detail)
        status = getattr(exc, "status_code", None)
        where = f"models.profiles.{self._profile}"

        # The server saw the request when it answered with a status or its stream broke.
        sent = midway or isinstance(status, int) or isinstance(exc, litellm.Timeout)

        def err(message: str, retryable: bool) -> ModelError:
            return ModelError(message, retryable=retryable, detail=detail, sent=sent)

        if isinstance(exc, litellm.Timeout):
            return err(f"The model server did not answer within {self._timeout_s:g} s.", True)
        if isinstance(exc, litellm.RateLimitError):
            return err("The model server is rate limiting requests (HTTP 429).", True)
        if isinstance(exc, litellm.AuthenticationError):
            return err(f"The model rejected the API key: check {where}.auth.", False)
        if isinstance(exc, litellm.PermissionDeniedError):
            return err(f"The model server refused access (HTTP 403): check {where}.auth.", False)
        if isinstance(exc, litellm.NotFoundError):
            return err(
                f"The model server does not know model {self._model!r} (HTTP 404): "
                f"check {where}.model and api_base.",
                False,
            )
        if isinstance(exc, litellm.ContextWindowExceededError):
            return err(
                "The conversation no longer fits the model's context window: start a new thread.",
                False,
            )
        if midway:
            return err("The model's answer broke off before it finished.", True)
        if isinstance(exc, litellm.BadRequestError) or status in (400, 422):
            return err(
                f"The model server rejected the request (HTTP {status or 400}): "
                f"check {where}.model and its options.",
                False,
            )
        # LiteLLM reports a refused connection as InternalServerError (500): look underneath.
        if _caused_by_os_error(exc) or (
            isinstance(exc, litellm.APIConnectionError) and status is None
        ):
            return err(f"The model server could not be reached: check {where}.api_base.", True)
        if isinstance(status, int) and status >= 500:
            return err(f"The model server did not answer (HTTP {status}).", True)
        if isinstance(status, int) and 400 <= status < 500:
            return err(f"The model server refused the request (HTTP {status}).", False)
        return err("The model server could not be reached.", True)

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text


@dataclass
class _ToolCallParts:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _ThinkingParts:
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted_data: str | None = None


def _field(item: Any, name: str) -> Any:
    """A field of a delta part, whether LiteLLM gives it as a dict or an object."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


@dataclass
class _Assembly:
    """Accumulates streamed deltas: content, tool-call fragments by index, thinking blocks
    by index, finish_reason."""

    raw_text: str = ""
    calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    thinking: dict[int, _ThinkingParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any | None = None

    def take(self, chunk: Any) -> str:
        """Record one chunk; return its content delta."""
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""
        choice = choices[0]
        if getattr(choice, "finish_reason", None):
            self.finish_reason = choice.finish_reason
        delta = getattr(choice, "delta", None)
        if delta is None:
            return ""
        for fragment in getattr(delta, "tool_calls", None) or []:
            self._take_tool_fragment(fragment)
        for block in getattr(delta, "thinking_blocks", None) or []:
            self._take_thinking(block)
        content = getattr(delta, "content", None) or ""
        self.raw_text += content
        return content

    def _take_tool_fragment(self, fragment: Any) -> None:
        index = getattr(fragment, "index", None)
        if index is None:  # some servers omit it: a fragment with an id starts a new call
            if getattr(fragment, "id", None) or not self.calls:
                index = len(self.calls)
            else:
                index = max(self.calls)
        parts = self.calls.setdefault(index, _ToolCallParts())
        if getattr(fragment, "id", None) and parts.id is None:
            parts.id = fragment.id
        function = getattr(fragment, "function", None)
        if function is not None:
            if getattr(function, "name", None) and parts.name is None:
                parts.name = function.name
            if getattr(function, "arguments", None):
                parts.arguments.append(function.arguments)

    def _take_thinking(self, block: Any) -> None:
        index = _field(block, "index")
        if not isinstance(index, int):
            index = max(self.thinking, default=0)
        parts = self.thinking.setdefault(index, _ThinkingParts())
        if _field(block, "type") == "redacted_thinking":
            parts.redacted_data = (parts.redacted_data or "") + str(_field(block, "data") or "")
            return
        if _field(block, "thinking"):
            parts.thinking.append(str(_field(block, "thinking")))
        if _field(block, "signature"):
            parts.signature = str(_field(block, "signature"))

    def thinking_blocks(self) -> tuple[ThinkingBlock, ...]:
        return tuple(
            ThinkingBlock("".join(p.thinking), p.signature, p.redacted_data)
            for _, p in sorted(self.thinking.items())
        )

    def tool_calls(self) -> list[ToolCallRequest]:
        return [
            ToolCallRequest(
                # A missing id stays empty: the engine reports it to the model rather than
                # inventing one silently.
                id=parts.id or "",
                name=parts.name or "",
                arguments="".join(parts.arguments),
            )
            for index, parts in sorted(self.calls.items())
        ]

    def finish(self) -> FinishReason:
        if self.finish_reason == "length":
            return FinishReason.LENGTH
        if self.calls or self.finish_reason in ("tool_calls", "function_call"):
            return FinishReason.TOOL_CALLS
        return FinishReason.STOP


class ThinkFilter:
    """Removes `<think>...</think>` blocks from streamed text, whatever the delta boundaries.

    Text that could be the start of a tag is held back until the next delta decides; a
    block still open when the stream ends is dropped.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._inside = False
        self._after_block = False
        self.text = ""

    def feed(self, delta: str) -> str:
        self._pending += delta
        out: list[str] = []
        while self._pending:
            if self._inside:
                end = self._pending.find(THINK_CLOSE)
                if end < 0:
                    keep = _partial_tag(self._pending, THINK_CLOSE)
                    self._pending = self._pending[len(self._pending) - keep :]
                    break
                self._pending = self._pending[end + len(THINK_CLOSE) :]
                self._inside = False
                self._after_block = True
                continue
            if self._after_block:  # the answer after a thought usually starts with blank lines
                self._pending = self._pending.lstrip()
                if not self._pending:
                    break
                self._after_block = False
            start = self._pending.find(THINK_OPEN)
            if start >= 0:
                out.append(self._pending[:start])
                self._pending = self._pending[start + len(THINK_OPEN) :]
                self._inside = True
                continue
            keep = _partial_tag(self._pending, THINK_OPEN)
            out.append(self._pending[: len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep :]
            break
        visible = "".join(out)
        self.text += visible
        return visible

    def finish(self) -> str:
        """Flush held-back text at the end of the stream; an unclosed block is dropped."""
        visible = "" if self._inside else self._pending
        self._pending = ""
        self.text += visible
        return visible


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def _caused_by_os_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def probe_capabilities(model: str) -> ModelCapabilities:
    """What LiteLLM's model map says about `model` (parallel tool calls, reasoning).

    Unknown models answer False for both; the router then keeps the conservative rules.
    """
    litellm = _import_litellm()

    def flag(check: Any) -> bool:
        try:
            return bool(check(model=model))
        except Exception:  # LiteLLM raises for models it cannot map
            return False

    return ModelCapabilities(
        parallel_tool_calls=flag(litellm.supports_parallel_function_calling),
        reasoning=flag(litellm.supports_reasoning),
    )
