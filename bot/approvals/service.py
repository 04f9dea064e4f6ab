"""The approval flow: a write that needs a person ends its turn at a card; every decision
then enters through one path, `ApprovalService.resume(approval_id, decision)`.

`ApprovalRequests.request` (called by the tool harness) stores the approval with its plan,
requesters and expiry, posts the card and stores its ts, and returns a *pending* result:
the turn ends there and the thread's lock is released.

`resume` is used by a click (on any process sharing the database), the expiry sweeper, a
withdrawal and reconciliation (at start and at every heartbeat: an approved change whose
replica died before its outcome, once that replica's lease expired). It claims the row by
compare-and-set, so each decision happens once; an approved call then passes the whole
pipeline again (its checks under the current configuration, then the same tail as any
call: approval → execute via the write coordinator → mask → PostToolUse hooks → audit);
the outcome is recorded whatever
Slack does; the conversation learns it (a new turn answers in the thread); and the card is
updated last, best effort, with the outcome posted in the thread when it cannot be.

A write that ran (or that reconciliation finds made) is then followed for `agent.verify_s`
by the `Verification` port (`bot/approvals/verify.py`): its watch is stored before the
thread hears the outcome and started after; `reconcile` also resumes the watches a stopped
replica left.

Knows no Slack: cards go through the `ApprovalCards` port, checks through `CallCheck`.
The model can never approve: nothing the model writes reaches `resume()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from bot.approvals import copy
from bot.approvals.coordinator import WriteCoordinator
from bot.approvals.model import ApprovalCards, ApprovalStore, CallCheck, Continuation
from bot.approvals.readback import Readback
from bot.errors import Undeliverable
from bot.pipeline.decision import ToolInvocation
from bot.pipeline.flow import CallFlow
from bot.store.retry import RETRY_DELAYS, retrying
from bot.values import (
    DECISION_STATE,
    Approval,
    ApprovalDecision,
    ApprovalState,
    DecisionKind,
    Landed,
    ToolOutcome,
    ToolStatus,
    Verdict,
    WriteOutcome,
    WritePlan,
    ts_after,
)

log = logging.getLogger(__name__)

# The sweeper looks at the database at least this often (other replicas' approvals).
SWEEP_EVERY_S = 30.0

PENDING_RESULT = (
    "Not run yet: waiting for a person's approval (approval {id}). The card with the preview "
    "is in the thread; nothing has changed. This turn ends here; you will be told the decision "
    "in a later message. Do not propose this change again meanwhile."
)


def utcnow() -> datetime:
    return datetime.now(UTC)


class ExpiryBell:
    """Wakes the expiry sweeper when a new approval (a new deadline) is stored."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def ring(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()


class ApprovalRequests:
    """The harness's approval port: store the proposal, post its card, end the turn."""

    def __init__(
        self,
        store: ApprovalStore,
        cards: ApprovalCards,
        bell: ExpiryBell,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._cards = cards
        self._bell = bell
        self._clock = clock

    async def request(self, call: ToolInvocation, plan: WritePlan) -> ToolOutcome:
        scope = call.scope
        reason = call.args.get("reason")
        asked = await self._store.requesters(scope.session_id)
        approval = Approval(
            id=uuid.uuid4().hex,
            session_id=scope.session_id,
            turn_id=scope.turn_id,
            tool_call_id=call.tool_call_id,
            plan=plan,
            reason=reason if isinstance(reason, str) else "",
            role=scope.role_name,
            channel_id=scope.channel_id,
            thread_ts=scope.session_key.rsplit(":", 1)[-1],
            requested_by=scope.slack_user,
            status=ApprovalState.PENDING,
            expires_at=self._clock() + timedelta(seconds=scope.role.approval.timeout_s),
            requesters=tuple(dict.fromkeys([*asked, scope.slack_user])),
        )
        if not await self.propose(approval):
            return ToolOutcome(
                ToolStatus.FAILED,
                "Not executed: the approval card could not be posted in Slack.",
                "not executed: approval card could not be posted",
            )
        # What the card warns the approver of (a GitOps controller), the model knows too.
        pending = " ".join([PENDING_RESULT.format(id=approval.id[:8]), *plan.notes])
        return ToolOutcome(ToolStatus.PENDING, pending, "waiting for approval")

    async def propose(self, approval: Approval) -> bool:
        """Store a pending approval and post its card (a model's proposal, or kelpie's own
        rollback after a change did not recover); False (cancelled) when no card could be
        posted."""
        await self._store.create(approval)
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
            return False
        self._bell.ring()
        return True

    async def _post_card(self, approval: Approval) -> None:
        card_ts = await self._cards.post(approval)
        await self._store.set_card(approval.id, card_ts)

    async def executing(self, approval: Approval) -> None:
        """The approved call passed its re-check: the card says it runs (best effort)."""
        try:
            await self._cards.update(approval, note="Executing…")
        except Exception:
            log.warning("could not show approval %s as executing", approval.id)


async def record_outcome(
    store: ApprovalStore, approval: Approval, outcome: str, delays: Sequence[float]
) -> bool:
    """The approval's outcome, retried while the store is locked; False when another
    replica owns the approval now (it took it over: it reconciles it and tells the thread,
    so nothing is said here). A failure is logged and the approval released (the outcome
    still reaches the thread; reconciliation finds the row without one)."""
    try:
        return await retrying(
            f"recording the outcome of approval {approval.id}",
            lambda: store.set_outcome(approval.id, outcome),
            delays,
        )
    except Exception:
        log.exception("the outcome of approval %s could not be recorded", approval.id)
        store.release(approval.id)
        return True


class RecordedWrites:
    """The execute stage's port for an approved write: the coordinator runs it, and the
    outcome is recorded on the approval in a `finally`, before any later stage can fail."""

    def __init__(
        self,
        coordinator: WriteCoordinator,
        store: ApprovalStore,
        delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self._coordinator = coordinator
        self._store = store
        self._delays = delays

    async def execute(self, approval: Approval) -> WriteOutcome:
        write: WriteOutcome | None = None
        recorded = False
        try:
            write = await self._coordinator.execute(approval, approval.decided_by or "?")
        finally:
            if write is not None:
                recorded = await record_outcome(self._store, approval, write.summary, self._delays)
        return write if recorded else replace(write, superseded=True)


class ApprovedCalls(Protocol):
    """The pipeline, as a resumed approval uses it: the checks again, then the tail."""

    async def run(self, call: ToolInvocation, approved: Approval | None = None) -> CallFlow: ...


class Verification(Protocol):
    """Follows an approved write's effect (`bot/approvals/verify.py`)."""

    async def store(self, approval: Approval) -> datetime | None: ...

    def start(self, approval: Approval, deadline: datetime) -> None: ...

    async def resume(self) -> None: ...

    async def close(self) -> None: ...


class NoVerification:
    async def store(self, approval: Approval) -> datetime | None:
        return None

    def start(self, approval: Approval, deadline: datetime) -> None:
        pass

    async def resume(self) -> None:
        pass

    async def close(self) -> None:
        pass


class ResumeResult(StrEnum):
    DECIDED = "decided"
    ALREADY_DECIDED = "already_decided"
    NOT_ALLOWED = "not_allowed"  # this person may not decide it (nothing was claimed)
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Resumed:
    result: ResumeResult
    approval: Approval | None = None
    why: str = ""  # for NOT_ALLOWED: one sentence for the person


@dataclass(frozen=True)
class _Ending:
    """What a decided approval leaves behind: the outcome line, the model's note, the
    sentence for the thread when Slack cannot show the card, and whether a turn answers."""

    outcome: str
    note: str
    answer: bool
    card_note: str = ""
    announce: str = ""  # said in the thread as well as on the card
    ran: bool = False  # the write ran and succeeded: its effect is followed (verify)


class ApprovalService:
    def __init__(
        self,
        store: ApprovalStore,
        cards: ApprovalCards,
        pipeline: ApprovedCalls,
        check: CallCheck,
        continuation: Continuation,
        readback: Readback,
        bell: ExpiryBell,
        clock: Callable[[], datetime] = utcnow,
        delays: Sequence[float] = RETRY_DELAYS,
        verifier: Verification | None = None,
    ) -> None:
        self._store = store
        self._cards = cards
        self._pipeline = pipeline
        self._check = check
        self._continuation = continuation
        self._readback = readback
        self._bell = bell
        self._clock = clock
        self._delays = delays
        self._verifier = verifier or NoVerification()
        self._sweeper: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[Resumed]] = set()

    # --- the one entry point ------------------------------------------------------------

    async def resume(self, approval_id: str, decision: ApprovalDecision) -> Resumed:
        """Apply a decision once. The decided part runs to its end even if the caller is
        cancelled: an approved change is never left half recorded."""
        approval = await self._store.get(approval_id)
        if approval is None or decision.channel_id not in (None, approval.channel_id):
            return Resumed(ResumeResult.UNKNOWN)
        approval = await self._adopt_card(approval, decision.card_ts)
        if decision.kind is DecisionKind.RECONCILE:
            # Only a row no live replica executes, and only by the one replica claiming it.
            if not await self._store.claim_unfinished(approval_id):
                return Resumed(ResumeResult.ALREADY_DECIDED, approval)
            return await self._shielded(self._reconcile(approval))
        if decision.kind in (DecisionKind.APPROVE, DecisionKind.REJECT):
            assert decision.by is not None
            why = await self._check.may_decide(approval, decision.by)
            if why is not None:
                return Resumed(ResumeResult.NOT_ALLOWED, approval, why)
        won = await self._store.transition(
            approval_id,
            DECISION_STATE[decision.kind],
            by=decision.by,
            now=self._clock(),
            require_unexpired=decision.kind is not DecisionKind.EXPIRE,
            require_expired=decision.kind is DecisionKind.EXPIRE,
        )
        current = await self._store.get(approval_id) or approval
        if not won:
            if current.status is ApprovalState.PENDING and current.expires_at <= self._clock():
                # Its deadline passed before the sweeper got to it: expire it now.
                await self.resume(approval_id, ApprovalDecision(DecisionKind.EXPIRE))
                current = await self._store.get(approval_id) or current
            return Resumed(ResumeResult.ALREADY_DECIDED, current)
        return await self._shielded(self._decided(current, decision))

    async def _adopt_card(self, approval: Approval, card_ts: str | None) -> Approval:
        """A card posted just before kelpie stopped has no stored ts, so nothing could
        update it: the click on it says which message it is, and it is stored now."""
        if approval.card_ts is not None or card_ts is None:
            return approval
        await self._store.set_card(approval.id, card_ts)
        return replace(approval, card_ts=card_ts)

    async def _shielded(self, work: Awaitable[Resumed]) -> Resumed:
        task = asyncio.ensure_future(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    async def _decided(self, approval: Approval, decision: ApprovalDecision) -> Resumed:
        if decision.kind is DecisionKind.APPROVE:
            ending = await self._approved(approval)
        else:
            ending = _not_run(approval, decision)
            if not await self._record_outcome(approval, ending.outcome):
                ending = None
        if ending is None:
            # Another replica owns it now (this one's lease lapsed): it tells the thread.
            log.warning("approval %s is another replica's now; its outcome is theirs", approval.id)
            return Resumed(ResumeResult.ALREADY_DECIDED, approval)
        approval = replace(approval, outcome=ending.outcome)
        # Stored before anything else is said, so a crash from here on still resumes it.
        watch = await self._verifier.store(approval) if ending.ran else None
        await self._finish(approval, ending)
        if watch is not None:
            self._verifier.start(approval, watch)
        return Resumed(ResumeResult.DECIDED, approval)

    async def _approved(self, approval: Approval) -> _Ending | None:
        """How the approved change ended; None when another replica took it over."""
        by = approval.decided_by or "?"
        call = await self._check.invocation(approval)
        flow: CallFlow | None = None
        refusal = call if isinstance(call, str) else ""
        if not isinstance(call, str):
            try:
                flow = await self._pipeline.run(call, approval)
            except Exception:
                # The pipeline never raises once a write ran, so nothing was changed.
                log.exception("approval %s failed before its write ran", approval.id)
                refusal = "an internal error stopped it before it ran (logged)"
        if flow is None or flow.write is None:
            refusal = refusal or _refusal(flow)
            outcome = f"not executed: {refusal}"
            if not await self._record_outcome(approval, outcome):
                return None
            return _Ending(
                outcome,
                f"Approval {approval.id[:8]} ({approval.plan.description}) was approved by "
                f"<@{by}>, but the change was NOT executed: {refusal}.",
                answer=True,
                card_note=f":no_entry_sign: Not executed: {refusal}.",
                announce=f"{approval.plan.description}: not executed, {refusal}.",
            )
        write = flow.write
        if write.superseded:
            return None
        note = ""
        if write.outcome_audit_failed:
            note = ":warning: The change ran, but its outcome audit could not be written."
        verb = "executed" if write.executed and write.ok else "not executed"
        if write.executed and not write.ok:
            verb = "attempted and failed"
        result = flow.outcome.content if flow.outcome is not None else write.message
        return _Ending(
            write.summary,
            f"Approval {approval.id[:8]} ({approval.plan.description}) was approved by "
            f"<@{by}>; the change was {verb}. Result: {result}",
            answer=True,
            card_note=note,
            ran=write.executed and write.ok,
        )

    async def _record_outcome(self, approval: Approval, outcome: str) -> bool:
        return await record_outcome(self._store, approval, outcome, self._delays)

    async def _finish(self, approval: Approval, ending: _Ending) -> None:
        """The conversation learns the outcome; then the card, best effort; if Slack will
        not update it, the outcome is said in the thread instead."""
        try:
            await self._continuation.record(approval, ending.note, answer=ending.answer)
        except Exception:
            log.exception("could not continue the conversation after approval %s", approval.id)
        await self._show(approval, ending)

    async def _show(self, approval: Approval, ending: _Ending) -> None:
        try:
            await retrying(
                f"updating the card of approval {approval.id}",
                lambda: self._cards.update(approval, note=ending.card_note),
                self._delays[:3],
            )
        except Exception:
            log.warning("the card of approval %s could not be updated", approval.id)
            await self._tell(approval, ending.announce or _thread_line(approval, ending))
            return
        if ending.announce:
            await self._tell(approval, ending.announce)

    # --- start-up reconciliation and expiry ----------------------------------------------

    async def _reconcile(self, approval: Approval) -> Resumed:
        """Approved, no outcome: its kelpie process stopped between the click and the
        outcome (this one before a restart, or another replica). Read the target back; never
        run the write again blindly."""
        landed = await self._readback.applied(approval.plan, approval.id)
        outcome, note = copy.RECONCILED[landed], copy.reconciled_note(approval, landed)
        if not await self._record_outcome(approval, outcome):
            return Resumed(ResumeResult.ALREADY_DECIDED, approval)
        approval = replace(approval, outcome=outcome)
        ending = _Ending(
            outcome, note, answer=False, announce=f"{approval.plan.description}: {outcome}."
        )
        # The change was made: its effect is followed like any other's.
        watch = await self._verifier.store(approval) if landed is Landed.APPLIED else None
        await self._finish(approval, ending)
        if watch is not None:
            self._verifier.start(approval, watch)
        return Resumed(ResumeResult.DECIDED, approval)

    async def _tell(self, approval: Approval, text: str) -> None:
        try:
            await retrying(
                "telling a thread", lambda: self._cards.tell(approval, text), self._delays[:3]
            )
        except Undeliverable as refused:
            log.warning(
                "the thread of approval %s refuses posts for good (%s)", approval.id, refused.code
            )
        except Exception:
            log.exception("could not post in the thread of approval %s", approval.id)

    async def start(self) -> None:
        """Reconcile approvals a crash left without an outcome, then sweep expiries (one
        that passed while kelpie was down is applied now) for as long as kelpie runs."""
        await self.reconcile()
        await self.sweep()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="approval-expiry")

    async def reconcile(self) -> None:
        """Approved changes whose replica died before their outcome (its lease expired): at
        start and at every heartbeat of a live replica (the takeover's tick)."""
        for approval in await self._store.unfinished():
            try:
                await self.resume(approval.id, ApprovalDecision(DecisionKind.RECONCILE))
            except Exception:
                log.exception("could not reconcile approval %s", approval.id)
        try:
            await self._verifier.resume()
        except Exception:
            log.exception("could not resume the verification watches")

    async def sweep(self) -> None:
        for approval in await self._store.expired(self._clock()):
            try:
                await self.resume(approval.id, ApprovalDecision(DecisionKind.EXPIRE))
            except Exception:
                log.exception("could not expire approval %s", approval.id)

    async def _sweep_forever(self) -> None:
        while True:
            upcoming = await self._store.next_expiry()
            delay = SWEEP_EVERY_S
            if upcoming is not None:
                delay = min(delay, max(0.0, (upcoming - self._clock()).total_seconds()) + 0.05)
            await self._bell.wait(delay)
            try:
                await self.sweep()
            except Exception:
                log.exception("the approval expiry sweep failed")

    async def withdraw_for(
        self, session_id: int, user: str, *, stop: bool = False, before: str | None = None
    ) -> int:
        """A requester's new message (or a permitted stop) withdraws the session's pending
        cards; anyone else's message leaves them alone. With `before` (a Slack ts: a stop
        handled late), only the cards posted before it. Returns how many were withdrawn."""
        withdrawn = 0
        for approval in await self._store.pending_in(session_id):
            if before is not None and not ts_after(before, approval.card_ts):
                continue  # posted after the click (or not yet): not what it meant
            allowed = user in approval.requesters or (
                stop and await self._check.may_withdraw(approval, user)
            )
            if not allowed:
                continue
            done = await self.resume(approval.id, ApprovalDecision(DecisionKind.WITHDRAW, user))
            withdrawn += done.result is ResumeResult.DECIDED
        return withdrawn

    async def show_decided(self, approval: Approval) -> None:
        """Show a decided approval's card as stored, with its outcome: a click replayed after
        a crash finds its own decision, and the process that applied it may have died before
        the card said so. Without an outcome yet it is in flight on a live replica, or is
        reconciled once that replica's lease expired, which shows the card then."""
        if approval.status is ApprovalState.PENDING or approval.outcome is None:
            return
        await self._show(approval, _Ending(approval.outcome, "", answer=False))

    async def pending_in(self, session_id: int) -> list[Approval]:
        return await self._store.pending_in(session_id)

    async def may_decide(self, approval: Approval, user: str) -> str | None:
        """Why `user` may not approve or reject this change now (one sentence saying who
        may); None when they may. A front end asks before offering the choice."""
        return await self._check.may_decide(approval, user)

    async def close(self) -> None:
        await self._verifier.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        if self._running:
            await asyncio.wait(set(self._running), timeout=10)


def _not_run(approval: Approval, decision: ApprovalDecision) -> _Ending:
    what = f"Approval {approval.id[:8]} ({approval.plan.description})"
    if decision.kind is DecisionKind.REJECT:
        return _Ending(
            f"not executed: rejected by <@{decision.by}>",
            f"{what}: not executed, rejected by <@{decision.by}>.",
            answer=True,
        )
    if decision.kind is DecisionKind.EXPIRE:
        return _Ending(
            "not executed: the approval expired with no decision",
            f"{what}: not executed, the approval expired with no decision.",
            answer=True,
        )
    return _Ending(
        f"not executed: withdrawn by <@{decision.by}>",
        f"{what}: not executed, withdrawn by <@{decision.by}> before anyone decided.",
        answer=False,
    )


def _refusal(flow: CallFlow | None) -> str:
    """Why the pipeline ran no write for an approved call (a check refuses it now)."""
    last = flow.trail[-1] if flow is not None and flow.trail else None
    if last is None:
        return "no policy stage is configured"
    if last.decision.verdict is Verdict.DENY:
        return f"the {last.stage} check now refuses it ({last.decision.reason})"
    return f"the pipeline stopped at its {last.stage} stage"


def _thread_line(approval: Approval, ending: _Ending) -> str:
    return f"{approval.plan.description}: {ending.outcome}"
