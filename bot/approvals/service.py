"""The approval service: request a person's decision on a prepared write, decide by
compare-and-set, expire, cancel, and carry on after a restart. Knows no Slack: cards go
through the `ApprovalCards` port, clicks arrive as `decide()` calls from a verified
`block_actions` payload whose clicker the caller has checked against the role.

The model can never approve: nothing the model writes reaches `decide()`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from bot.agent.events import ToolStatus
from bot.approvals.coordinator import WriteCoordinator
from bot.approvals.model import Approval, ApprovalCards, ApprovalState, ApprovalStore
from bot.policy.decision import ToolInvocation
from bot.tools.harness import ToolOutcome
from bot.tools.spec import WritePlan

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


class OrphanedOutcomes(Protocol):
    """Takes a decided approval's outcome when no turn is waiting for it (kelpie restarted
    or the turn was interrupted): records it as the tool result and, if asked, continues the
    turn from the stored conversation."""

    async def deliver(self, approval: Approval, outcome: ToolOutcome, *, resume: bool) -> None: ...


class DecideResult(StrEnum):
    DECIDED = "decided"
    ALREADY_DECIDED = "already_decided"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Decided:
    result: DecideResult
    approval: Approval | None


def _outcome(status: ToolStatus, content: str, summary: str) -> ToolOutcome:
    return ToolOutcome(status, content, summary, stage="approval")


class ApprovalService:
    def __init__(
        self,
        store: ApprovalStore,
        cards: ApprovalCards,
        coordinator: WriteCoordinator,
        orphans: OrphanedOutcomes,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._cards = cards
        self._coordinator = coordinator
        self._orphans = orphans
        self._clock = clock
        self._waiters: dict[str, asyncio.Future[ToolOutcome]] = {}
        self._timers: set[asyncio.Task[None]] = set()
        # Approvals whose turn was interrupted after a decision: the engine already recorded
        # the call as interrupted, so their outcome only goes to the card and the audit.
        self._abandoned: set[str] = set()

    async def request(self, call: ToolInvocation, plan: WritePlan) -> ToolOutcome:
        settings = call.scope.role.approval
        reason = call.args.get("reason")
        approval = Approval(
            id=uuid.uuid4().hex,
            session_id=call.scope.session_id,
            turn_id=call.scope.turn_id,
            tool_call_id=call.tool_call_id,
            plan=plan,
            reason=reason if isinstance(reason, str) else "",
            role=call.scope.role_name,
            channel_id=call.scope.channel_id,
            thread_ts=call.scope.session_key.rsplit(":", 1)[-1],
            requested_by=call.scope.slack_user,
            status=ApprovalState.PENDING,
            expires_at=self._clock() + timedelta(seconds=settings.timeout_s),
        )
        await self._store.create(approval)
        waiter: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        self._waiters[approval.id] = waiter
        try:
            try:
                # Shielded: a card in Slack whose ts is not stored could never be updated.
                await asyncio.shield(self._post_card(approval))
            except Exception:
                log.exception("could not post the approval card for %s", approval.id)
                await self._store.transition(
                    approval.id,
                    ApprovalState.CANCELLED,
                    by=None,
                    now=self._clock(),
                    require_unexpired=False,
                )
                return _outcome(
                    ToolStatus.FAILED,
                    "Not executed: the approval card could not be posted in Slack.",
                    "not executed: approval card could not be posted",
                )
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), settings.timeout_s)
            except TimeoutError:
                expired = await self._expire(approval.id)
                if expired is not None:
                    return expired
                return await waiter  # a decision won the race; its outcome is on its way
        except asyncio.CancelledError:
            # Only a person's interruption (abort set) cancels the approval. On shutdown the
            # card stays pending: a click after the restart still executes and resumes.
            if call.scope.abort.is_set() and not await asyncio.shield(self._cancel(approval.id)):
                self._abandoned.add(approval.id)
            raise
        finally:
            self._waiters.pop(approval.id, None)

    async def _post_card(self, approval: Approval) -> None:
        card_ts = await self._cards.post(approval)
        await self._store.set_card(approval.id, card_ts)

    async def decide(self, approval_id: str, user: str, approve: bool) -> Decided:
        """Apply a verified person's click. Exactly one concurrent click wins."""
        state = ApprovalState.APPROVED if approve else ApprovalState.REJECTED
        won = await self._store.transition(
            approval_id, state, by=user, now=self._clock(), require_unexpired=True
        )
        approval = await self._store.get(approval_id)
        if approval is None:
            return Decided(DecideResult.UNKNOWN, None)
        if not won:
            if approval.status is ApprovalState.PENDING:
                # The deadline passed but no timer has expired it yet (e.g. after a restart).
                expired = await self._expire(approval_id)
                if expired is not None:
                    approval = await self._store.get(approval_id) or approval
            return Decided(DecideResult.ALREADY_DECIDED, approval)
        if not approve:
            await self._cards.update(approval)
            outcome = _outcome(
                ToolStatus.DENIED,
                f"Not executed: rejected by <@{user}>.",
                f"rejected by <@{user}>",
            )
            await self._finish(approval, outcome)
            return Decided(DecideResult.DECIDED, approval)

        await self._cards.update(approval, note="Executing…")
        write = await self._coordinator.execute(approval, user)
        await self._store.set_outcome(approval_id, write.summary)
        approval = replace(approval, outcome=write.summary)
        note = (
            ":warning: The change ran, but its outcome audit could not be written."
            if write.outcome_audit_failed
            else ""
        )
        await self._cards.update(approval, note=note)
        status = ToolStatus.OK if write.ok else ToolStatus.FAILED
        await self._finish(approval, _outcome(status, write.message, write.summary))
        return Decided(DecideResult.DECIDED, approval)

    async def recover(self) -> None:
        """At start: expire approvals whose time ran out while kelpie was down (the card says
        so), and arm expiry timers for the others, whose clicks still work."""
        for approval in await self._store.pending():
            if approval.expires_at <= self._clock():
                await self._expire(approval.id)
            else:
                self._arm_timer(approval)

    async def close(self) -> None:
        for task in list(self._timers):
            task.cancel()
        if self._timers:
            await asyncio.wait(set(self._timers), timeout=5)

    def _arm_timer(self, approval: Approval) -> None:
        async def expire_later() -> None:
            delay = (approval.expires_at - self._clock()).total_seconds()
            await asyncio.sleep(max(0.0, delay))
            await self._expire(approval.id)

        task = asyncio.create_task(expire_later())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def _expire(self, approval_id: str) -> ToolOutcome | None:
        if not await self._store.transition(
            approval_id, ApprovalState.EXPIRED, by=None, now=self._clock(), require_unexpired=False
        ):
            return None
        approval = await self._store.get(approval_id)
        assert approval is not None
        await self._safe_card_update(approval)
        outcome = _outcome(
            ToolStatus.DENIED,
            "Not executed: the approval expired with no decision.",
            "approval expired",
        )
        if approval_id not in self._waiters and approval_id not in self._abandoned:
            await self._orphans.deliver(approval, outcome, resume=False)
        return outcome

    async def _cancel(self, approval_id: str) -> bool:
        """Cancel a pending approval; False when a decision got there first."""
        if not await self._store.transition(
            approval_id,
            ApprovalState.CANCELLED,
            by=None,
            now=self._clock(),
            require_unexpired=False,
        ):
            return False
        approval = await self._store.get(approval_id)
        if approval is not None:
            await self._safe_card_update(approval)
        return True

    async def _finish(self, approval: Approval, outcome: ToolOutcome) -> None:
        waiter = self._waiters.get(approval.id)
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)
            return
        if approval.id in self._abandoned:
            self._abandoned.discard(approval.id)
            log.info("approval %s decided after its turn was interrupted", approval.id)
            return
        # Nobody waits: kelpie restarted since the card was posted. Continue that turn.
        await self._orphans.deliver(approval, outcome, resume=True)

    async def _safe_card_update(self, approval: Approval) -> None:
        try:
            await self._cards.update(approval)
        except Exception:
            log.exception("could not update the approval card %s", approval.id)
