"""The LiteLLM implementation of `ModelGateway`: one streamed HTTP request per call.

This is the only module that imports litellm (`nocredential.py` aside, on its behalf). It
imports it lazily (the import costs seconds and hundreds of MB), calls it only on a thread
of its own (`loop_thread.py`) and never lets LiteLLM or the openai client retry on their
own: the engine owns the retry policy. It maps LiteLLM's
exceptions to a `Failure` (`failures.py` words them) and feeds its chunks to the shared
`StreamAssembly` (`streaming.py`). It does not mask or size-limit what is sent (that is
`outbound.py`) and it does not choose models.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from bot.config import AuthMethod
from bot.model.failures import Failure, ModelCall, failure_of_status
from bot.model.loop_thread import Emit, LoopThread
from bot.model.nocredential import PLACEHOLDER_KEY, no_credential_client
from bot.model.streaming import StreamAssembly, assembled_reply, relay
from bot.model.types import (
    ModelCapabilities,
    ModelError,
    ModelReply,
    ModelRequest,
    ProviderSettings,
    TextSink,
)

log = logging.getLogger(__name__)

# Providers whose models run on the operator's own machines (LiteLLM prefixes).
_LOCAL_PROVIDERS = frozenset({"ollama", "ollama_chat"})


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


async def warm_up(model: str, thread: LoopThread) -> None:
    """Import LiteLLM (seconds, and most of kelpie's memory) and resolve the model's provider
    on `thread`, the one its gateways call from, then rehearse a streamed request there, so
    the first question does not pay for any of it and LiteLLM's cached clients are made on
    the loop that will use them."""
    await thread.run(lambda _: _warm(model))


async def _warm(model: str) -> None:
    litellm = _import_litellm()
    with contextlib.suppress(Exception):  # an unknown provider fails on first use instead
        litellm.get_llm_provider(model)
    await _rehearse()


# A streamed answer in the OpenAI wire format: two deltas and the usage, as a server sends.
_REHEARSAL_CHUNKS = (
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
)
_REHEARSAL_HEAD = {"id": "warm-up", "object": "chat.completion.chunk", "created": 0}
_REHEARSAL_BASE = "http://warm-up.invalid/v1"  # never resolved: the transport is in memory


async def _rehearse() -> None:
    """One streamed completion through LiteLLM's OpenAI provider and the openai SDK, over
    an HTTP transport that answers from memory: nothing leaves the process. A first real
    request imports more modules (LiteLLM's stream wrapper and logging, the service logger
    that times each call and its prometheus types) and builds the SDK's pydantic types:
    tens of ms of the first answer. No model is named: every provider shares LiteLLM's
    part, and OpenAI-compatible servers take exactly this path."""
    litellm = _import_litellm()
    try:
        async with _rehearsal_client() as client:
            stream = await litellm.acompletion(
                model="openai/warm-up",
                messages=[{"role": "user", "content": "warm-up"}],
                stream=True,
                stream_options={"include_usage": True},
                client=client,
                api_key=PLACEHOLDER_KEY,
                api_base=_REHEARSAL_BASE,
                max_retries=0,
                num_retries=0,
            )
            async for _ in stream:
                pass
    except Exception:  # a warm start is a nicety: the first question pays instead
        log.info("the model library's warm-up request failed", exc_info=True)


def _rehearsal_client() -> Any:
    """An openai SDK client whose transport (the SDK's httpx2) answers every request with
    `_REHEARSAL_CHUNKS`, streamed."""
    import httpx2
    import openai

    events = [f"data: {json.dumps({**_REHEARSAL_HEAD, **c})}\n\n" for c in _REHEARSAL_CHUNKS]
    body = "".join(events) + "data: [DONE]\n\n"

    def answer(_request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return openai.AsyncOpenAI(
        api_key=PLACEHOLDER_KEY,
        base_url=_REHEARSAL_BASE,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)),
    )


class LiteLLMGateway:
    """Talks to one model through LiteLLM; built from plain configuration values.

    Every LiteLLM call runs on `thread` (`LoopThread`), never on the caller's loop: its
    per-request and per-chunk CPU would hold up everything else there. The profiles share
    the composition root's thread; a gateway given none makes its own and joins it at
    `close`.
    """

    def __init__(self, settings: ProviderSettings, thread: LoopThread | None = None) -> None:
        self._settings = settings
        self._model = settings.model
        self._call = ModelCall.of(settings)
        self._client: Any = None  # `auth: none` only; made and closed on the thread
        self._owns_thread = thread is None
        self._thread = thread or LoopThread("kelpie-litellm")

    def __repr__(self) -> str:  # never show the key
        return f"LiteLLMGateway(model={self._model!r}, api_base={self._settings.api_base!r})"

    @property
    def model_name(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        return await self._thread.run(lambda emit: self._complete(request, emit), on_text)

    async def _complete(self, request: ModelRequest, emit: Emit) -> ModelReply:
        """On the LiteLLM thread: the request, the stream's assembly and the `<think>`
        filter; only the visible text crosses to the caller (`emit`)."""
        litellm = _import_litellm()
        kwargs = self._call_options(stream=True)
        kwargs["messages"] = request.messages
        if request.tools:
            kwargs["tools"] = request.tools
        kwargs["stream_options"] = {"include_usage": True}
        if self._settings.max_tokens is not None:
            kwargs["max_tokens"] = self._settings.max_tokens
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
            # Reasoning models refuse a temperature (Anthropic with thinking: only 1).
            kwargs.pop("temperature", None)

        try:
            stream = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise self._model_error(exc, litellm) from exc

        async def sink(text: str) -> None:
            emit(text)

        assembly = StreamAssembly()
        try:
            text = await relay(self._chunks(stream, litellm), assembly, sink)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # closing a broken stream may fail again; nothing to add
                    log.debug("closing the model stream failed", exc_info=True)
        return assembled_reply(request, assembly, text, self._model)

    async def _chunks(self, stream: Any, litellm: Any) -> AsyncIterator[Any]:
        """LiteLLM's chunks, its failures midway turned into a ModelError."""
        iterator = stream.__aiter__()
        while True:
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:
                raise self._model_error(exc, litellm, midway=True) from exc
            yield chunk

    async def ping(self) -> None:
        """One non-streamed, one-token request: proves the address, the key and the model."""
        await self._thread.run(lambda _: self._ping())

    async def _ping(self) -> None:
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
        options: dict[str, Any] = {"drop_params": True, **self._settings.options}
        options.update(
            model=self._model,
            stream=stream,
            timeout=self._settings.timeout_s,
            max_retries=0,  # the openai client would retry 5xx and 429 twice
            num_retries=0,  # and LiteLLM has its own retry loop
        )
        if self._settings.api_base:
            options["api_base"] = self._settings.api_base
        if self._settings.auth is AuthMethod.NONE:
            # A placeholder stops LiteLLM's environment lookup; the client strips it.
            options["api_key"] = PLACEHOLDER_KEY
            options["client"] = self._no_credential_client()
        elif self._settings.api_key:
            # environment: exactly the named variable; provider-default may still name one.
            options["api_key"] = self._settings.api_key
        if self._settings.temperature is not None:
            options["temperature"] = self._settings.temperature
        if self._model.split("/", 1)[0] in _LOCAL_PROVIDERS:
            # A local model costs nothing; saying so also keeps LiteLLM from asking the
            # server for the model's price with a blocking request on the event loop.
            options.setdefault("input_cost_per_token", 0.0)
            options.setdefault("output_cost_per_token", 0.0)
        return options

    async def close(self) -> None:
        """Close the `auth: none` HTTP client and its connections, if one was made (the
        other methods' clients are LiteLLM's own, cached and shared), on the loop it was
        made on; then join the thread if it is this gateway's own."""
        client, self._client = self._client, None
        if client is not None:
            await self._thread.run(lambda _: client.close())
        if self._owns_thread:
            await self._thread.close()

    def _no_credential_client(self) -> Any:
        if self._client is None:
            provider = _import_litellm().get_llm_provider(self._model)[1]
            self._client = no_credential_client(
                provider, api_base=self._settings.api_base, timeout_s=self._settings.timeout_s
            )
        return self._client

    def _model_error(self, exc: Exception, litellm: Any, *, midway: bool = False) -> ModelError:
        status = getattr(exc, "status_code", None)
        if _no_key(exc):  # LiteLLM calls it a 500; no request left kelpie
            failure, status, sent = Failure.BAD_KEY, None, False
        else:
            failure = _failure(exc, litellm, status, midway=midway)
            # The server saw the request when it answered with a status or its stream
            # broke; not when unreachable (LiteLLM gives a refused connection a 500 too).
            sent = failure is not Failure.UNREACHABLE and (
                midway or isinstance(status, int) or isinstance(exc, litellm.Timeout)
            )
        return self._call.error(
            failure,
            detail=self._redact(f"{type(exc).__name__}: {exc}"),
            sent=sent,
            status=status if isinstance(status, int) else None,
        )

    def _redact(self, text: str) -> str:
        if self._settings.api_key:
            text = text.replace(self._settings.api_key, "***")
        return text


def _caused_by_os_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


# What the openai SDK says (through LiteLLM) when it has no key to send: it sends nothing.
_NO_KEY_MESSAGES = ("Missing credentials", "api_key client option must be set")


def _no_key(exc: Exception) -> bool:
    return any(message in str(exc) for message in _NO_KEY_MESSAGES)


def _failure(exc: Exception, litellm: Any, status: Any, *, midway: bool) -> Failure:
    """Which failure a LiteLLM exception is (its types first, then the status under it)."""
    by_type = (
        (litellm.Timeout, Failure.TIMEOUT),
        (litellm.RateLimitError, Failure.RATE_LIMITED),
        (litellm.AuthenticationError, Failure.BAD_KEY),
        (litellm.PermissionDeniedError, Failure.FORBIDDEN),
        (litellm.NotFoundError, Failure.UNKNOWN_MODEL),
        (litellm.ContextWindowExceededError, Failure.CONTEXT_WINDOW),
    )
    for kind, failure in by_type:
        if isinstance(exc, kind):
            return failure
    if midway:
        return Failure.BROKE_OFF
    if isinstance(exc, litellm.BadRequestError) or status in (400, 422):
        return Failure.BAD_REQUEST
    # LiteLLM reports a refused connection as InternalServerError (500): look underneath.
    if _caused_by_os_error(exc) or (isinstance(exc, litellm.APIConnectionError) and status is None):
        return Failure.UNREACHABLE
    if isinstance(status, int):
        return failure_of_status(status)
    return Failure.UNKNOWN


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
