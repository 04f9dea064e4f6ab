"""The write coordinator: the only path from an approved write to the Kubernetes API.

reserve the target (one write per object at a time) → intent audit (nothing happens if it
cannot be written) → the fence: this replica must still own the approval (a replica whose
lease lapsed while a hook or the store held it up never writes what another one is
reconciling) → the change, bound to the previewed object's uid/resourceVersion → outcome
audit (in a `finally`). Every store step is retried while the store is locked, so a
briefly locked store delays the write rather than abandoning it. A conflict executes
nothing and tells the model to propose again. If the outcome audit still fails, the change
is not rolled back; the caller says so in the thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from bot.approvals.model import WriteAuditLog, WriteFence, WriteReservations
from bot.pipeline.harness import ToolRegistry
from bot.store.retry import RETRY_DELAYS, retrying
from bot.toolsets.spec import ToolContext, ToolFailure, WriteConflict, WriteOperation
from bot.values import Approval, WriteAudit, WriteOutcome, WritePlan

log = logging.getLogger(__name__)


STORE_DOWN = "the store stayed unavailable, so nothing was changed."
SUPERSEDED = "another kelpie replica took this approval over; it reports the outcome."


class WriteCoordinator:
    def __init__(
        self,
        registry: ToolRegistry,
        audit: WriteAuditLog,
        reservations: WriteReservations,
        fence: WriteFence,
        delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self._registry = registry
        self._audit = audit
        self._reservations = reservations
        self._fence = fence
        self._delays = delays

    async def execute(self, approval: Approval, approved_by: str) -> WriteOutcome:
        plan = approval.plan
        key = f"{plan.cluster}/{plan.target.key}"
        try:
            reserved = await retrying(
                f"reserving {key} for approval {approval.id}",
                lambda: self._reservations.reserve(key, approval.id),
                self._delays,
            )
        except Exception:
            log.exception("could not reserve %s for approval %s", key, approval.id)
            return WriteOutcome(False, False, f"Not executed: {STORE_DOWN}", STORE_DOWN)
        if not reserved:
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
            await retrying(
                f"the intent audit of approval {approval.id}",
                lambda: self._audit.record(base),
                self._delays,
            )
        except Exception:
            log.exception("intent audit for approval %s failed; nothing executed", approval.id)
            text = "the intent audit could not be written, so nothing was changed."
            return WriteOutcome(False, False, f"Not executed: {text}", text)
        fenced = await self._fenced(approval.id)
        if fenced is not None:
            await asyncio.shield(self._audit_outcome(base, fenced))
            return fenced

        context = ToolContext(plan.cluster, plan.target.namespace or None, approval_id=approval.id)
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

    async def _fenced(self, approval_id: str) -> WriteOutcome | None:
        """None while this replica still owns the approval: the write may run now."""
        try:
            held = await retrying(
                f"confirming approval {approval_id} is still held here",
                lambda: self._fence.holds(approval_id),
                self._delays,
            )
        except Exception:
            log.exception("could not confirm approval %s is held here; not executed", approval_id)
            return WriteOutcome(False, False, f"Not executed: {STORE_DOWN}", STORE_DOWN)
        if held:
            return None
        log.warning("approval %s was taken over by another replica; not executed", approval_id)
        return WriteOutcome(
            False, False, f"Not executed: {SUPERSEDED}", SUPERSEDED, superseded=True
        )

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
                self._delays,
            )
        except Exception:
            log.exception("outcome audit for approval %s failed", base.approval_id)
            return False
        return True
