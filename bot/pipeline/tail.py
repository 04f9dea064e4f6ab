"""The pipeline's tail: approval → execute with timeout → mask → PostToolUse hooks → audit.

Each is a stage of the one ordered list (`bot/pipeline/flow.py`), so a call the model just
made and an approved write resumed after a click pass the same code after the checks. The
stages never raise for problems the model can fix: they map them to one sentence for it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Protocol

from bot.model.outbound import mask_value, mask_value_async
from bot.pipeline.decision import ToolInvocation
from bot.pipeline.flow import CallFlow, refused
from bot.pipeline.targets import ResolvedTargets
from bot.store.retry import retrying
from bot.toolsets.spec import (
    REASON_ARG,
    TargetRefused,
    ToolArgumentError,
    ToolFailure,
    ToolKind,
)
from bot.values import (
    Approval,
    AuditEntry,
    Decision,
    Refusal,
    StageDecision,
    ToolOutcome,
    ToolStatus,
    Verdict,
    WriteOutcome,
    WritePlan,
)

log = logging.getLogger(__name__)


class ApprovalPort(Protocol):
    """Asks a person to approve a prepared write: stores it and posts its card.

    `request` returns a PENDING outcome (the turn ends at the card; the decision arrives
    later through the approval service's `resume`), or FAILED when no card could be posted.
    Only a person's click can lead to execution; `executing` shows that it now runs.
    """

    async def request(self, call: ToolInvocation, plan: WritePlan) -> ToolOutcome: ...

    async def executing(self, approval: Approval) -> None: ...


class ApprovedWrites(Protocol):
    """Runs a write a person approved (the write coordinator) and records its outcome."""

    async def execute(self, approval: Approval) -> WriteOutcome: ...


class PostHook(Protocol):
    async def fire(self, call: ToolInvocation, outcome: ToolOutcome) -> None: ...


class AuditLog(Protocol):
    async def record(self, entries: list[AuditEntry]) -> None:
        """Append the entries durably (committed) before returning."""
        ...

    def stage(self, entries: list[AuditEntry]) -> None:
        """Queue the entries: they are committed with the turn's next durable write."""
        ...


class ApprovalStage:
    """A call the checks sent to a person: prepare the write (RBAC check, target read,
    dry-run preview) and post its card; on resume, the person's approval lets it on."""

    name = "approval"

    def __init__(self, approvals: ApprovalPort, audit: AuditLog, timeout_s: float) -> None:
        self._approvals = approvals
        self._audit = audit
        self._timeout_s = timeout_s

    async def run(self, flow: CallFlow) -> CallFlow:
        if flow.outcome is not None or flow.verdict is not Verdict.NEEDS_APPROVAL:
            return flow
        approval = flow.approved
        if approval is not None:
            approved = Decision.allow(f"approved by {approval.decided_by}")
            flow = replace(flow, trail=(*flow.trail, StageDecision(self.name, approved)))
            # The re-check and the approval are on record before the write runs (retried
            # while the store is locked: a locked store delays the write, never drops it).
            flow = await retrying("recording an approved call", lambda: self._on_record(flow))
            await self._approvals.executing(approval)
            return flow
        # The decision to ask is on record before the approval card is posted.
        flow = await self._on_record(flow)
        return flow.decided(self.name, await self._ask(flow.call))

    async def _on_record(self, flow: CallFlow) -> CallFlow:
        await self._audit.record(audit_entries(flow))
        return replace(flow, audited=len(flow.trail))

    async def _ask(self, call: ToolInvocation) -> ToolOutcome:
        operation = call.tool.write
        if operation is None:
            return failed(f"{call.tool.name} is not a write tool; it cannot be approved.")
        # The stated reason is for the approver's card, not an argument of the change.
        args = {key: value for key, value in call.args.items() if key != REASON_ARG}
        try:
            # The plan names who asked (a silence's comment does).
            context = replace(call.scope.tool_context, requester=call.scope.slack_user)
            plan = await asyncio.wait_for(operation.prepare(args, context), self._timeout_s)
        except ToolArgumentError as error:
            return failed(f"{call.tool.name}: invalid arguments: {error}")
        except ToolFailure as error:
            return failed(f"{call.tool.name} cannot be prepared: {error}")
        except TimeoutError:
            return failed(f"{call.tool.name} preview timed out after {self._timeout_s:g} s.")
        return await self._approvals.request(call, plan)


class ExecuteStage:
    """Runs an allowed call's handler with a timeout, or the write a person approved."""

    name = "execute"

    def __init__(
        self, writes: ApprovedWrites, timeout_s: float, targets: ResolvedTargets | None = None
    ) -> None:
        self._writes = writes
        self._timeout_s = timeout_s
        # The checks a tool asks again once it knows what it will touch (bot/pipeline/targets.py).
        self._targets = targets

    async def run(self, flow: CallFlow) -> CallFlow:
        if flow.outcome is not None or flow.verdict is Verdict.DENY:
            return flow
        if flow.approved is not None and flow.trail[-1].stage == ApprovalStage.name:
            # No timeout around a write: cancelled half way, its result would be unknown.
            # The coordinator records the outcome whatever happens.
            write = await self._writes.execute(flow.approved)
            status = ToolStatus.OK if write.executed and write.ok else ToolStatus.FAILED
            outcome = ToolOutcome(status, write.message, write.summary)
            return replace(flow.decided(self.name, outcome), write=write)
        if flow.verdict is not Verdict.ALLOW or flow.approved is not None:
            return flow  # only a person's approval, passed on by the approval stage, runs a write
        return flow.decided(self.name, await self._execute(flow.call))

    async def _execute(self, call: ToolInvocation) -> ToolOutcome:
        name = call.tool.name
        context = call.scope.tool_context
        if self._targets is not None:
            context = replace(context, gate=self._targets.bind(call))
        try:
            result = await asyncio.wait_for(call.tool.handler(call.args, context), self._timeout_s)
        except TargetRefused as refusal:
            return refused(Refusal(refusal.stage, refusal.reason))
        except ToolArgumentError as error:
            return failed(f"{name}: invalid arguments: {error}")
        except ToolFailure as error:
            return replace(failed(f"{name} failed: {error}"), acting_as=error.acting_as)
        except TimeoutError:
            return failed(f"{name} timed out after {self._timeout_s:g} s.")
        except Exception:
            log.exception("tool %s crashed", name)
            return failed(f"{name} failed with an internal error (logged).")
        return ToolOutcome(
            ToolStatus.OK,
            result.text,
            result.summary,
            result.attachment,
            end_turn=result.end_turn,
            acting_as=result.acting_as,
            evidence=result.evidence,
            picture=result.picture,
        )


class MaskStage:
    """Masks every secret in a produced result once, before it reaches the database, the
    hooks, Slack or the model."""

    name = "mask"

    async def run(self, flow: CallFlow) -> CallFlow:
        if flow.outcome is None or flow.final is None:
            return flow
        return replace(flow, outcome=await masked_outcome(flow.outcome))


class PostHookStage:
    """Tells the PostToolUse hooks what a call that was not denied produced."""

    name = "post-tool-use hook"

    def __init__(self, hooks: list[PostHook]) -> None:
        self._hooks = hooks

    async def run(self, flow: CallFlow) -> CallFlow:
        if flow.outcome is not None and flow.final is not None:
            for hook in self._hooks:
                await hook.fire(flow.call, flow.outcome)
        return flow


class AuditStage:
    """Records every stage's decision on the call, the last one as its outcome."""

    name = "audit"

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit

    async def run(self, flow: CallFlow) -> CallFlow:
        entries = audit_entries(flow)
        # What changed, or asked to change, a cluster and every denial are on record before
        # anyone hears of them (the approval card, the thread, the model): written durably.
        # An allowed read changed nothing: its audit rides with the round's results, which
        # are committed with the next round's calls or with the answer, itself stored before
        # the thread shows it. A SIGKILL within the writer's linger (0.5 s) loses that read's
        # audit with the rest of its round, before any answer built on it was shown.
        denied = any(step.decision.verdict is Verdict.DENY for step in flow.trail)
        if flow.call.tool.kind is ToolKind.WRITE or denied:
            await self._audit.record(entries)
        else:
            self._audit.stage(entries)
        return replace(flow, audited=len(flow.trail))


def audit_entries(flow: CallFlow) -> list[AuditEntry]:
    """The trail's steps not yet on record; the last one as the outcome when a tail stage
    produced it."""
    call = flow.call
    arguments, _ = mask_value(call.args)
    last = len(flow.trail) - 1
    return [
        AuditEntry(
            session_id=call.scope.session_id,
            turn_id=call.scope.turn_id,
            tool_call_id=call.tool_call_id,
            tool=call.tool.pattern_name,
            arguments=arguments,
            stage=step.stage,
            decision=(
                flow.final
                if flow.final is not None and index == last
                else str(step.decision.verdict)
            ),
            reason=step.decision.reason,
            slack_user=call.scope.slack_user,
        )
        for index, step in enumerate(flow.trail)
        if index >= flow.audited
    ]


async def masked_outcome(outcome: ToolOutcome) -> ToolOutcome:
    """The outcome with every secret in its content, summary, attachment, evidence and
    picture caption masked."""
    caption = outcome.picture.caption if outcome.picture is not None else None
    (content, summary, attachment, evidence, caption), found = await mask_value_async(
        [outcome.content, outcome.summary, outcome.attachment, outcome.evidence, caption]
    )
    if not found:
        return outcome
    log.info("masked %d secret(s) in a tool result", len(found))
    picture = outcome.picture
    if picture is not None and caption is not None:
        picture = replace(picture, caption=caption)
    return replace(
        outcome,
        content=content,
        summary=summary,
        attachment=attachment,
        evidence=evidence,
        picture=picture,
    )


def failed(message: str) -> ToolOutcome:
    summary = message if len(message) <= 120 else message[:119] + "…"
    return ToolOutcome(ToolStatus.FAILED, f"Error: {message}", summary)
