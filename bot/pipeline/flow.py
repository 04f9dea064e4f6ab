"""The pipeline every tool call passes, as one ordered list of stages.

abort → provider-native skip → channel role → PreToolUse hooks → firewall → guardian →
permission, then the tail: approval → execute with timeout → mask → PostToolUse hooks →
audit.

The checks run in list order; the first decision that is not "allow" stops the call, so a
call denied at stage N never reaches stage N+1. The tail then acts on what they decided:
it asks a person, runs the call, and tells the hooks and the audit log, a denial included.
An approved write resumed after its card was clicked passes the very same list: the checks
again (the current configuration), then the tail with the person's approval attached.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from bot.pipeline.decision import Stage, ToolInvocation
from bot.pipeline.roles import namespace_allowed, tool_allowed
from bot.toolsets.spec import ToolKind, ToolScope
from bot.values import (
    Approval,
    Decision,
    Refusal,
    StageDecision,
    ToolOutcome,
    ToolStatus,
    Verdict,
    WriteOutcome,
)

log = logging.getLogger(__name__)


class AbortStage:
    name = "abort"

    async def check(self, call: ToolInvocation) -> Decision:
        if call.scope.abort.is_set():
            return Decision.deny("the turn was interrupted")
        return Decision.allow()


class ProviderNativeStage:
    """Tools the provider runs itself are not run locally. None exist today: a pass-through
    kept so the order stays the brief's when one is added."""

    name = "provider-native"

    async def check(self, call: ToolInvocation) -> Decision:
        return Decision.allow()


class RoleGateStage:
    name = "channel role"

    async def check(self, call: ToolInvocation) -> Decision:
        scope = call.scope
        tool = call.tool
        if tool.name not in scope.offered or not tool_allowed(scope.role, tool):
            return Decision.deny(f"channel role {scope.role_name} may not run {tool.pattern_name}")
        namespace = call.namespace
        if tool.scope is not ToolScope.QUERY and not namespace_allowed(scope.role, namespace):
            where = (
                "all namespaces"
                if namespace is None
                else "cluster-scoped objects"
                if namespace == ""
                else f"namespace {namespace}"
            )
            allowed = ", ".join(scope.role.namespaces) or "none"
            return Decision.deny(
                f"channel role {scope.role_name} may not touch {where} (allowed: {allowed})"
            )
        return Decision.allow()


class PermissionStage:
    """Writes need a person's approval: the harness hands them to the approval port."""

    name = "permission"

    async def check(self, call: ToolInvocation) -> Decision:
        if call.tool.kind is ToolKind.WRITE:
            return Decision.needs_approval("a write needs a person's approval")
        return Decision.allow()


@dataclass(frozen=True)
class CallFlow:
    """One call on its way through the pipeline: what each stage decided so far and, once a
    stage produced it, the outcome the model will read."""

    call: ToolInvocation
    trail: tuple[StageDecision, ...] = ()
    outcome: ToolOutcome | None = None
    # What the audit records as the last stage's decision when a tail stage produced the
    # outcome ("ok", "failed", "pending"…); None when a check decided.
    final: str | None = None
    # Set when a person approved this call (the approval's resume): the approval stage
    # passes it on and the execute stage runs the approved write.
    approved: Approval | None = None
    # What the approved write did, once the execute stage ran it.
    write: WriteOutcome | None = None
    # How many steps of the trail are already on record (the approval stage records the
    # decision to ask before the card is posted).
    audited: int = 0

    @property
    def verdict(self) -> Verdict:
        return self.trail[-1].decision.verdict if self.trail else Verdict.DENY

    def decided(self, stage: str, outcome: ToolOutcome) -> CallFlow:
        """The flow once `stage` produced the outcome."""
        step = StageDecision(stage, _decision_of(outcome))
        return replace(self, trail=(*self.trail, step), outcome=outcome, final=str(outcome.status))


class TailStage(Protocol):
    """A stage after the checks: it acts on the flow (asks, runs, tells) and passes it on."""

    name: str

    async def run(self, flow: CallFlow) -> CallFlow: ...


class Pipeline:
    def __init__(self, stages: Sequence[Stage], tail: Sequence[TailStage] = ()) -> None:
        self.stages = list(stages)
        self.tail = list(tail)

    @property
    def order(self) -> list[str]:
        """Every stage's name, in the order a call meets them."""
        return [stage.name for stage in self.stages] + [stage.name for stage in self.tail]

    async def decide(self, call: ToolInvocation) -> list[StageDecision]:
        """Each check's decision in order, up to and including the first that is not allow."""
        trail: list[StageDecision] = []
        for stage in self.stages:
            decision = await stage.check(call)
            trail.append(StageDecision(stage.name, decision))
            if decision.verdict is not Verdict.ALLOW:
                break
        return trail

    async def run(self, call: ToolInvocation, approved: Approval | None = None) -> CallFlow:
        """The call through every stage; `approved` when a person approved it (resume)."""
        trail = await self.decide(call)
        flow = CallFlow(call, tuple(trail), approved=approved)
        if not trail:
            flow = replace(flow, trail=(StageDecision("pipeline", Decision.deny("no stages")),))
        if flow.verdict is Verdict.DENY:
            last = flow.trail[-1]
            refusal = Refusal(last.stage, last.decision.reason or "not allowed")
            flow = replace(flow, outcome=refused(refusal))
        for stage in self.tail:
            flow = await self._step(stage, flow)
        return flow

    async def _step(self, stage: TailStage, flow: CallFlow) -> CallFlow:
        try:
            return await stage.run(flow)
        except Exception:
            if flow.write is None or not flow.write.executed:
                raise
            # The change was made: a later stage failing must not hide it from the person
            # who approved it (the approval's outcome is already recorded).
            log.exception("stage %s failed after an approved change ran", stage.name)
            return flow


def refused(refusal: Refusal) -> ToolOutcome:
    """The one place a refusal becomes words: what the model reads and the thread's line."""
    return ToolOutcome(
        ToolStatus.DENIED,
        f"Denied by {refusal.stage}: {refusal.reason}. The call was not run.",
        f"denied by {refusal.stage}: {refusal.reason}",
        refusal=refusal,
    )


def _decision_of(outcome: ToolOutcome) -> Decision:
    # The audit names the identity the cluster saw (a role's impersonated one, or kelpie's).
    seen = f" (as {outcome.acting_as})" if outcome.acting_as else ""
    if outcome.status is ToolStatus.OK:
        return Decision.allow(f"ok{seen}")
    return Decision.deny(f"{outcome.summary}{seen}")
