"""An in-process ModelGateway that plays queued steps and records what it was asked.

For unit tests of the engine: no HTTP, no LiteLLM. End-to-end tests use the real LiteLLM
gateway against tests/peers/model_server.py instead.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from bot.model.types import (
    FinishReason,
    ModelError,
    ModelReply,
    ModelRequest,
    TextSink,
    ToolCallRequest,
    Usage,
)


@dataclass
class Step:
    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    error: ModelError | None = None
    hang: bool = False


def text(value: str) -> Step:
    return Step(text=value)


def calls(*items: tuple[str, dict[str, Any] | str], say: str = "") -> Step:
    return Step(text=say, calls=list(items))


def error(
    message: str = "The model server did not answer (HTTP 500).", retryable: bool = True
) -> Step:
    return Step(error=ModelError(message, retryable=retryable))


def hang() -> Step:
    return Step(hang=True)


class ScriptedGateway:
    model_name = "scripted-model"

    def __init__(self, *steps: Step) -> None:
        self.steps: deque[Step] = deque(steps)
        self.requests: list[ModelRequest] = []
        self._counter = 0

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError("the scripted gateway ran out of steps")
        step = self.steps.popleft()
        if step.hang:
            await asyncio.Event().wait()
        if step.error is not None:
            raise step.error
        for start in range(0, len(step.text), 7):
            await on_text(step.text[start : start + 7])
        tool_calls = []
        for name, args in step.calls:
            self._counter += 1
            raw = args if isinstance(args, str) else json.dumps(args)
            tool_calls.append(ToolCallRequest(f"call_{self._counter}", name, raw))
        return ModelReply(
            text=step.text,
            tool_calls=tool_calls,
            finish_reason=FinishReason.TOOL_CALLS if tool_calls else FinishReason.STOP,
            usage=Usage(10, 5),
            model=self.model_name,
        )

    def assert_consumed(self) -> None:
        assert not self.steps, f"{len(self.steps)} scripted steps were not used"
