"""The typed boundary between the agent engine and a model provider.

The engine depends only on `ModelGateway`; the LiteLLM implementation lives in
`bot/model/gateway.py`, the direct OpenAI-wire one in `bot/model/openai_wire.py`, and unit
tests use an in-process scripted gateway.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from bot.config import AuthMethod
from bot.errors import KelpieError
from bot.values import ThinkingBlock, ToolCallRequest


class FinishReason(StrEnum):
    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    estimated: bool = False


@dataclass(frozen=True)
class ModelCapabilities:
    """What LiteLLM's model map says about a model (unknown models: all False)."""

    parallel_tool_calls: bool = False
    reasoning: bool = False
    # The tier ("low" / "high") the provider recommends for the model, when it says one.
    recommended_tier: str | None = None


@dataclass(frozen=True)
class ProviderSettings:
    """One model profile as a provider client needs it: plain values from the config."""

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never shown
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 120.0
    # More request settings, passed on as they are (`options` in the profile).
    options: dict[str, Any] = field(default_factory=dict)
    profile: str = "default"
    auth: AuthMethod = AuthMethod.PROVIDER_DEFAULT

    def __post_init__(self) -> None:
        if self.auth is AuthMethod.ENVIRONMENT and not self.api_key:
            # Never fall back to a provider's own lookup when the named variable is missing.
            raise ValueError(f"profile {self.profile}: auth environment needs its key")


@dataclass(frozen=True)
class RequestTag:
    """Where a request comes from, for the payload log; never sent to the provider."""

    session_id: int
    turn_id: str
    round_index: int


@dataclass(frozen=True)
class ModelRequest:
    """What the engine asks for: OpenAI-format messages and tool schemas."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    # The provider's reasoning setting (LiteLLM `reasoning_effort`); None sends nothing.
    reasoning_effort: str | None = None
    tag: RequestTag | None = None


@dataclass(frozen=True)
class ModelReply:
    """A response whose stream ended normally, assembled."""

    text: str
    tool_calls: list[ToolCallRequest]
    finish_reason: FinishReason
    usage: Usage
    model: str
    # The provider's signed reasoning, to be sent back with this turn (empty for most).
    thinking: tuple[ThinkingBlock, ...] = ()


class ModelError(KelpieError):
    """The model could not be reached or its stream broke.

    `retryable` says whether trying again may help (5xx, timeouts, cut streams);
    `user_message` is one sentence a person can act on; `str(error)` is the detail the log
    gets (the sentence when there is none).
    """

    def __init__(
        self, user_message: str, *, retryable: bool, detail: str = "", sent: bool = False
    ) -> None:
        super().__init__(detail or user_message)
        self._user_message = user_message
        self.retryable = retryable
        # True when the request reached the server (it answered, or its stream broke):
        # such a request is counted in usage even though it produced no reply.
        self.sent = sent

    @property
    def user_message(self) -> str:
        return self._user_message


TextSink = Callable[[str], Awaitable[None]]


class ModelGateway(Protocol):
    @property
    def model_name(self) -> str: ...

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        """Stream one completion, calling `on_text` for each text delta as it arrives.

        Returns only when the stream ended normally; raises ModelError otherwise. Makes
        exactly one HTTP request (no hidden retries: the engine owns the retry policy).
        """
        ...


class ProviderGateway(ModelGateway, Protocol):
    """A provider client as the composition root holds it: one per model profile."""

    async def ping(self) -> None:
        """One tiny request that proves the address, the key and the model."""
        ...

    async def close(self) -> None:
        """Release the client's connections."""
        ...


def chars_to_tokens(text: str) -> int:
    """The usage estimate when a provider reports none: characters / 4, rounded up."""
    return (len(text) + 3) // 4


def estimate_usage(request: ModelRequest, reply_text: str = "", calls: str = "") -> Usage:
    """Estimated usage of a request (and of what came back), marked as estimated."""
    sent = json.dumps(request.messages) + (json.dumps(request.tools) if request.tools else "")
    return Usage(chars_to_tokens(sent), chars_to_tokens(reply_text + calls), estimated=True)
