"""The typed boundary between the agent engine and a model provider.

The engine depends only on `ModelGateway`; the LiteLLM implementation lives in
`bot/model/gateway.py`, and unit tests use an in-process scripted gateway.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

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


class ModelError(Exception):
    """The model could not be reached or its stream broke.

    `retryable` says whether trying again may help (5xx, timeouts, cut streams);
    `user_message` is one sentence a person can act on.
    """

    def __init__(
        self, user_message: str, *, retryable: bool, detail: str = "", sent: bool = False
    ) -> None:
        super().__init__(detail or user_message)
        self.user_message = user_message
        self.retryable = retryable
        # True when the request reached the server (it answered, or its stream broke):
        # such a request is counted in usage even though it produced no reply.
        self.sent = sent


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


def chars_to_tokens(text: str) -> int:
    """The usage estimate when a provider reports none: characters / 4, rounded up."""
    return (len(text) + 3) // 4


def estimate_usage(request: ModelRequest, reply_text: str = "", calls: str = "") -> Usage:
    """Estimated usage of a request (and of what came back), marked as estimated."""
    sent = json.dumps(request.messages) + (json.dumps(request.tools) if request.tools else "")
    return Usage(chars_to_tokens(sent), chars_to_tokens(reply_text + calls), estimated=True)
