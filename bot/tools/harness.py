"""The tool harness: turns a model's tool call into a result the model can read.

It parses and looks up the call, passes it through the policy pipeline (the ordered stages
live in `bot/policy/pipeline.py`), runs the handler with a timeout and maps every failure to
one sentence for the model. It never raises for problems the model can fix.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any, Protocol

from bot.model.outbound import mask_value, mask_value_async
from bot.policy.decision import CallScope, ToolInvocation
from bot.tools.spec import REASON_ARG, Tool, ToolArgumentError, ToolFailure, ToolKind
from bot.values import (
    AuditEntry,
    Decision,
    StageDecision,
    ToolCallRequest,
    ToolOutcome,
    ToolStatus,
    Verdict,
    WritePlan,
)

log = logging.getLogger(__name__)


class Gate(Protocol):
    """The pipeline before execution: the first non-allow decision wins."""

    async def decide(self, call: ToolInvocation) -> list[StageDecision]: ...

    async def after(self, call: ToolInvocation, outcome: ToolOutcome) -> None: ...


class AuditLog(Protocol):
    async def record(self, entries: list[AuditEntry]) -> None:
        """Append the entries durably (committed) before returning."""
        ...

    def stage(self, entries: list[AuditEntry]) -> None:
        """Queue the entries: they are committed with the turn's next durable write."""
        ...


class ApprovalPort(Protocol):
    """Asks a person to approve a prepared write: stores it and posts its card.

    Returns a PENDING outcome (the turn ends at the card; the decision arrives later through
    the approval service's `resume`), or FAILED when no card could be posted. Only a
    person's click can lead to execution.
    """

    async def request(self, call: ToolInvocation, plan: WritePlan) -> ToolOutcome: ...


class ToolRegistry:
    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        if len(self._tools) != len(tools):
            raise ValueError("tool names must be unique")

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def all(self) -> list[Tool]:
        return list(self._tools.values())


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
    def __init__(
        self,
        registry: ToolRegistry,
        gate: Gate,
        audit: AuditLog,
        approvals: ApprovalPort,
        timeout_s: float,
    ) -> None:
        self._registry = registry
        self._gate = gate
        self._audit = audit
        self._approvals = approvals
        self._timeout_s = timeout_s

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
            outcome = _failed(f"{call.name}: {error}")
            await self.refuse(call, scope, outcome.summary)
            return outcome
        invocation = ToolInvocation(call.id, tool, args, scope)
        trail = await self._gate.decide(invocation)
        final = trail[-1] if trail else StageDecision("pipeline", Decision.deny("no stages"))
        if final.decision.verdict is Verdict.DENY:
            reason = final.decision.reason or "not allowed"
            await self._record(invocation, trail)
            return ToolOutcome(
                ToolStatus.DENIED,
                f"Denied by {final.stage}: {reason}. The call was not run.",
                f"denied by {final.stage}: {reason}",
                stage=final.stage,
            )
        if final.decision.verdict is Verdict.NEEDS_APPROVAL:
            # The decision to ask is on record before the approval card is posted.
            await self._record(invocation, trail)
            stage, trail = "approval", []
            outcome = await self._approve_and_write(invocation)
        else:
            stage, outcome = "execute", await self._execute(invocation)
        # Masked once here, before the result reaches the database, hooks, Slack or the model.
        outcome = await masked_outcome(outcome)
        await self._record(
            invocation,
            [*trail, StageDecision(stage, _decision_of(outcome))],
            final_verdict=str(outcome.status),
        )
        await self._gate.after(invocation, outcome)
        return outcome

    async def refuse(self, call: ToolCallRequest, scope: CallScope, reason: str) -> None:
        """Audit a call that was not run because it was malformed (unknown tool, bad or
        duplicate id, arguments that are not a JSON object, over the round's limit): a
        refusal is a decision too."""
        raw, _ = mask_value(call.arguments)
        await self._audit.record(  # a refusal: durable (see `_record`)
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

    async def _approve_and_write(self, call: ToolInvocation) -> ToolOutcome:
        """Prepare (RBAC check, target read, dry-run preview), then ask a person."""
        operation = call.tool.write
        if operation is None:
            return _failed(f"{call.tool.name} is not a write tool; it cannot be approved.")
        # The stated reason is for the approver's card, not an argument of the change.
        args = {key: value for key, value in call.args.items() if key != REASON_ARG}
        try:
            plan = await asyncio.wait_for(
                operation.prepare(args, call.scope.tool_context), self._timeout_s
            )
        except ToolArgumentError as error:
            return _failed(f"{call.tool.name}: invalid arguments: {error}")
        except ToolFailure as error:
            return _failed(f"{call.tool.name} cannot be prepared: {error}")
        except TimeoutError:
            return _failed(f"{call.tool.name} preview timed out after {self._timeout_s:g} s.")
        return await self._approvals.request(call, plan)

    async def _record(
        self, call: ToolInvocation, trail: list[StageDecision], final_verdict: str | None = None
    ) -> None:
        arguments, _ = mask_value(call.args)
        entries = [
            AuditEntry(
                session_id=call.scope.session_id,
                turn_id=call.scope.turn_id,
                tool_call_id=call.tool_call_id,
                tool=call.tool.pattern_name,
                arguments=arguments,
                stage=step.stage,
                decision=(
                    final_verdict
                    if final_verdict is not None and index == len(trail) - 1
                    else str(step.decision.verdict)
                ),
                reason=step.decision.reason,
                slack_user=call.scope.slack_user,
            )
            for index, step in enumerate(trail)
        ]
        # What changed, or asked to change, a cluster and every denial are on record before
        # anyone hears of them (the approval card, the thread, the model): written durably.
        # An allowed read changed nothing: its audit rides with the round's results, which
        # are committed with the next round's calls or with the answer, itself stored before
        # the thread shows it. A SIGKILL within the writer's linger (0.5 s) loses that read's
        # audit with the rest of its round, before any answer built on it was shown.
        denied = any(step.decision.verdict is Verdict.DENY for step in trail)
        if call.tool.kind is ToolKind.WRITE or denied:
            await self._audit.record(entries)
        else:
            self._audit.stage(entries)

    async def _execute(self, call: ToolInvocation) -> ToolOutcome:
        name = call.tool.name
        try:
            result = await asyncio.wait_for(
                call.tool.handler(call.args, call.scope.tool_context), self._timeout_s
            )
        except ToolArgumentError as error:
            return _failed(f"{name}: invalid arguments: {error}")
        except ToolFailure as error:
            return replace(_failed(f"{name} failed: {error}"), acting_as=error.acting_as)
        except TimeoutError:
            return _failed(f"{name} timed out after {self._timeout_s:g} s.")
        except Exception:
            log.exception("tool %s crashed", name)
            return _failed(f"{name} failed with an internal error (logged).")
        return ToolOutcome(
            ToolStatus.OK,
            result.text,
            result.summary,
            result.attachment,
            end_turn=result.end_turn,
            acting_as=result.acting_as,
        )


async def masked_outcome(outcome: ToolOutcome) -> ToolOutcome:
    """The outcome with every secret in its content, summary and attachment masked."""
    (content, summary, attachment), found = await mask_value_async(
        [outcome.content, outcome.summary, outcome.attachment]
    )
    if not found:
        return outcome
    log.info("masked %d secret(s) in a tool result", len(found))
    return replace(outcome, content=content, summary=summary, attachment=attachment)


def _decision_of(outcome: ToolOutcome) -> Decision:
    # The audit names the identity the cluster saw (a role's impersonated one, or kelpie's).
    seen = f" (as {outcome.acting_as})" if outcome.acting_as else ""
    if outcome.status is ToolStatus.OK:
        return Decision.allow(f"ok{seen}")
    return Decision.deny(f"{outcome.summary}{seen}")


def _failed(message: str) -> ToolOutcome:
    summary = message if len(message) <= 120 else message[:119] + "…"
    return ToolOutcome(ToolStatus.FAILED, f"Error: {message}", summary)


__all__ = ["CallScope", "ToolHarness", "ToolRegistry"]
