"""The write coordinator: the only path from an approved write to the Kubernetes API.

reserve the target (one write per object at a time) → intent audit (nothing happens if it
cannot be written) → the change, bound to the previewed object's uid/resourceVersion →
outcome audit (in a `finally`, retried while the store is locked). A conflict executes
nothing and tells the model to propose again. If the outcome audit still fails, the change
is not rolled back; the caller says so in the thread.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from bot.approvals.model import WriteAuditLog, WriteReservations
from bot.approvals.retry import retrying
from bot.tools.harness import ToolRegistry
from bot.tools.spec import ToolContext, ToolFailure, WriteConflict, WriteOperation
from bot.values import Approval, WriteAudit, WriteOutcome, WritePlan

log = logging.getLogger(__name__)


class WriteCoordinator:
    def __init__(
        self, registry: ToolRegistry, audit: WriteAuditLog, reservations: WriteReservations
    ) -> None:
        self._registry = registry
        self._audit = audit
        self._reservations = reservations

    async def execute(self, approval: Approval, approved_by: str) -> WriteOutcome:
        plan = approval.plan
        key = f"{plan.cluster}/{plan.target.key}"
        if not await self._reservations.reserve(key, approval.id):
            text = f"another write to {plan.target.key} is in progress; not executed."
            return WriteOutcome(False, False, f"Not executed: {text}", text)
        try:
            return await self._execute(approval, approved_by)
        finally:
            try:
                await asyncio.shield(self._reservations.release(key, approval.id))
            except Exception:
                # Never hides the outcome; a stale reservation is taken over later.
                log.exception("could not release the write reservation on %s", key)

    async def _execute(self, approval: Approval, approved_by: str) -> WriteOutcome:
        plan = approval.plan
        tool = self._registry.get(plan.tool)
        if tool is None or tool.write is None:
            text = f"{plan.tool} is not an available write tool; not executed."
            return WriteOutcome(False, False, f"Not executed: {text}", text)
        preview = "; ".join(change.render() for change in plan.changes) or plan.description
        base = WriteAudit(
            approval_id=approval.id,
            phase="intent",
            tool=plan.tool,
            target=plan.target.key,
            target_uid=plan.target.uid,
            requested_by=approval.requested_by,
            approved_by=approved_by,
            preview=preview,
        )
        try:
            await self._audit.record(base)
        except Exception:
            log.exception("intent audit for approval %s failed; nothing executed", approval.id)
            text = "the intent audit could not be written, so nothing was changed."
            return WriteOutcome(False, False, f"Not executed: {text}", text)

        context = ToolContext(plan.cluster, plan.target.namespace or None)
        # Whatever happens to the change (even a cancellation), its outcome audit is tried.
        outcome = WriteOutcome(
            True, False, "The write was interrupted; its result is unknown.", "result unknown"
        )
        try:
            outcome = await self._change(tool.write, plan, context, approval.id)
        finally:
            audited = await asyncio.shield(self._audit_outcome(base, outcome))
        if not audited:
            return replace(outcome, outcome_audit_failed=True)
        return outcome

    async def _change(
        self, write: WriteOperation, plan: WritePlan, context: ToolContext, approval_id: str
    ) -> WriteOutcome:
        try:
            result = await write.execute(plan, context)
            return WriteOutcome(True, True, result.text, result.summary)
        except WriteConflict as error:
            return WriteOutcome(False, False, f"Not executed: {error}", f"conflict: {error}")
        except ToolFailure as error:
            return WriteOutcome(True, False, f"The write failed: {error}", f"failed: {error}")
        except Exception:
            log.exception("write %s for approval %s crashed", plan.tool, approval_id)
            text = "the write failed with an internal error (logged)."
            return WriteOutcome(True, False, f"The write failed: {text}", text)

    async def _audit_outcome(self, base: WriteAudit, outcome: WriteOutcome) -> bool:
        entry = replace(base, phase="outcome", result=outcome.summary, ok=outcome.ok)
        try:
            await retrying(
                f"the outcome audit of approval {base.approval_id}",
                lambda: self._audit.record(entry),
            )
        except Exception:
            log.exception("outcome audit for approval %s failed", base.approval_id)
            return False
        return True
