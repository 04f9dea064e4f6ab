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

from bot.model.types import FinishReason, ModelError, ModelReply, ModelRequest, TextSink, Usage
from bot.values import ToolCallRequest

NO_USAGE = Usage(0, 0)  # what a provider that reports no usage amounts to

CallSpec = tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str]


@dataclass
class Step:
    text: str = ""
    # (name, arguments) or (name, arguments, call_id); "" as the id sends none.
    calls: list[CallSpec] = field(default_factory=list)
    error: ModelError | None = None
    hang: bool = False
    usage: Usage = field(default_factory=lambda: Usage(10, 5))
    # Awaited before answering (e.g. to hold a round until a test lets it go).
    wait: asyncio.Event | None = None
    # Set when the step is served (e.g. to let a held step elsewhere go).
    release: asyncio.Event | None = None


def text(value: str, *, usage: Usage | None = None) -> Step:
    return Step(text=value, usage=usage or Usage(10, 5))


def calls(*items: CallSpec, say: str = "", usage: Usage | None = None) -> Step:
    return Step(text=say, calls=list(items), usage=usage or Usage(10, 5))


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
        if step.release is not None:
            step.release.set()
        if step.hang:
            await asyncio.Event().wait()
        if step.wait is not None:
            await step.wait.wait()
        if step.error is not None:
            raise step.error
        for start in range(0, len(step.text), 7):
            await on_text(step.text[start : start + 7])
        tool_calls = []
        for spec in step.calls:
            name, args = spec[0], spec[1]
            self._counter += 1
            call_id = spec[2] if len(spec) > 2 else f"call_{self._counter}"
            raw = args if isinstance(args, str) else json.dumps(args)
            tool_calls.append(ToolCallRequest(call_id, name, raw))
        return ModelReply(
            text=step.text,
            tool_calls=tool_calls,
            finish_reason=FinishReason.TOOL_CALLS if tool_calls else FinishReason.STOP,
            usage=step.usage,
            model=self.model_name,
        )

    def assert_consumed(self) -> None:
        assert not self.steps, f"{len(self.steps)} scripted steps were not used"


class RoutingGateway:
    """Sends each request to one of two scripted gateways, e.g. background investigations
    (whose system prompt carries a marker) to their own script."""

    model_name = "scripted-model"

    def __init__(self, main: ScriptedGateway, side: ScriptedGateway, marker: str) -> None:
        self.main = main
        self.side = side
        self._marker = marker

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        system = str(request.messages[0].get("content", "")) if request.messages else ""
        target = self.side if self._marker in system else self.main
        return await target.complete(request, on_text)
