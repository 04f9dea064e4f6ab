"""The tool harness: turns a model's tool call into a result the model can read.

It parses and looks up the call and passes it through the pipeline (the ordered stages,
checks and tail, live in `bot/pipeline/flow.py` and `bot/pipeline/tail.py`). A call too
malformed to enter the pipeline is refused here, with one sentence for the model and an
audit entry. It never raises for problems the model can fix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from bot.model.outbound import mask_value
from bot.pipeline.decision import CallScope, ToolInvocation
from bot.pipeline.flow import CallFlow
from bot.pipeline.tail import AuditLog, failed
from bot.toolsets.spec import Tool, ToolArgumentError, ToolSource
from bot.values import AuditEntry, ToolCallRequest, ToolOutcome, ToolStatus


class Calls(Protocol):
    """The pipeline, as the harness uses it."""

    async def run(self, call: ToolInvocation) -> CallFlow: ...


class ToolRegistry:
    """The tools of this build, and those of `sources` as they are now (an MCP server's
    tools come and go: a source's tool never shadows a built-in one)."""

    def __init__(self, tools: list[Tool], sources: Sequence[ToolSource] = ()) -> None:
        self._tools = {tool.name: tool for tool in tools}
        if len(self._tools) != len(tools):
            raise ValueError("tool names must be unique")
        self._sources = list(sources)

    def get(self, name: str) -> Tool | None:
        found = self._tools.get(name)
        if found is not None:
            return found
        return next((tool for tool in self._sourced() if tool.name == name), None)

    def all(self) -> list[Tool]:
        return [*self._tools.values(), *self._sourced()]

    def _sourced(self) -> list[Tool]:
        return [
            tool
            for source in self._sources
            for tool in source.tools()
            if tool.name not in self._tools
        ]


def summarize_args(args: dict[str, Any], limit: int = 80) -> str:
    parts = []
    for key, value in args.items():
        short = {"namespace": "ns", "label_selector": "labels"}.get(key, key)
        parts.append(f"{short}={value}")
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as error:
        raise ToolArgumentError(f"arguments are not valid JSON ({error.msg}).") from None
    if not isinstance(value, dict):
        raise ToolArgumentError("arguments must be a JSON object.")
    return value


class ToolHarness:
    def __init__(self, registry: ToolRegistry, pipeline: Calls, audit: AuditLog) -> None:
        self._registry = registry
        self._pipeline = pipeline
        self._audit = audit

    def knows(self, name: str) -> bool:
        """Whether a tool of that name exists at all (offered to this turn or not)."""
        return self._registry.get(name) is not None

    async def dispatch(self, call: ToolCallRequest, scope: CallScope) -> ToolOutcome:
        tool = self._registry.get(call.name)
        try:
            if tool is None:
                raise ToolArgumentError(f'unknown tool "{call.name}"; use one of the tools offered')
            args = parse_arguments(call.arguments)
        except ToolArgumentError as error:
            outcome = failed(f"{call.name}: {error}")
            await self.refuse(call, scope, outcome.summary)
            return outcome
        flow = await self._pipeline.run(ToolInvocation(call.id, tool, args, scope))
        assert flow.outcome is not None, "the pipeline ended without an outcome"
        return flow.outcome

    async def refuse(self, call: ToolCallRequest, scope: CallScope, reason: str) -> None:
        """Audit a call that was not run because it was malformed (unknown tool, bad or
        duplicate id, arguments that are not a JSON object, over the round's limit): a
        refusal is a decision too."""
        raw, _ = mask_value(call.arguments)
        await self._audit.record(  # a refusal: durable (see `tail.AuditStage`)
            [
                AuditEntry(
                    session_id=scope.session_id,
                    turn_id=scope.turn_id,
                    tool_call_id=call.id,
                    tool=call.name,
                    arguments={"raw": raw},
                    stage="validate",
                    decision=str(ToolStatus.FAILED),
                    reason=reason,
                    slack_user=scope.slack_user,
                )
            ]
        )


__all__ = ["CallScope", "Tool", "ToolHarness", "ToolRegistry"]
