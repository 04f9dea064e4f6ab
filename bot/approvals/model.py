"""The ports the approval flow talks to (its values live in `bot/values.py`).

An approval is data, not a parked future: the turn that proposed the write has ended, and
whatever happens next (a click, the expiry, a withdrawal, start-up reconciliation) enters
through `ApprovalService.resume(approval_id, decision)`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from bot.pipeline.decision import ToolInvocation
from bot.values import Approval, ApprovalState, WriteAudit


class ApprovalStore(Protocol):
    async def create(self, approval: Approval) -> None: ...

    async def get(self, approval_id: str) -> Approval | None: ...

    async def set_card(self, approval_id: str, card_ts: str) -> None: ...

    async def transition(
        self,
        approval_id: str,
        to: ApprovalState,
        *,
        by: str | None,
        now: datetime,
        require_unexpired: bool,
        require_expired: bool = False,
    ) -> bool:
        """Compare-and-set pending → `to`; True only for the one caller that won."""
        ...

    async def set_outcome(self, approval_id: str, outcome: str) -> bool:
        """Compare-and-set: the first outcome, by the replica that owns the approval; False
        when another replica took it over (it reconciles and tells the thread)."""
        ...

    def release(self, approval_id: str) -> None:
        """Its outcome could not be stored: this process stops holding it."""
        ...

    async def pending(self) -> list[Approval]: ...

    async def pending_in(self, session_id: int) -> list[Approval]: ...

    async def expired(self, now: datetime) -> list[Approval]:
        """Pending approvals whose deadline has passed (the sweeper's work)."""
        ...

    async def next_expiry(self) -> datetime | None: ...

    async def unfinished(self) -> list[Approval]:
        """Approved, with no outcome recorded, and the lease of the replica executing it
        expired: it died between the click and the outcome."""
        ...

    async def claim_unfinished(self, approval_id: str) -> bool:
        """Compare-and-set such a row to this replica; True only for the one that won."""
        ...

    async def requesters(self, session_id: int) -> list[str]:
        """Everyone who wrote in the session since its last decided approval."""
        ...


class WriteAuditLog(Protocol):
    async def record(self, entry: WriteAudit) -> None:
        """Durable before it returns; raises if it could not be written."""
        ...


class ApprovalCards(Protocol):
    """Where people see approvals (Slack cards); knows how to render each state. A post the
    surface refuses for good (its channel archived, say) raises `bot.errors.Undeliverable`:
    retrying it is pointless, unlike any other failure."""

    async def post(self, approval: Approval) -> str:
        """Post the card; returns its message ts."""
        ...

    async def update(self, approval: Approval, note: str = "") -> None: ...

    async def tell(self, approval: Approval, text: str) -> str | None:
        """Say something in the approval's thread (an outcome the card could not show);
        the message's ts, where the surface has one."""
        ...


class CallCheck(Protocol):
    """The proposed call under the *current* configuration, and who may decide it now
    (approvers, four eyes). A card is a request, not a capability."""

    async def invocation(self, approval: Approval) -> ToolInvocation | str:
        """The call as the channel would make it now, for the pipeline to judge again; or
        why it cannot be made at all (kelpie disabled here, another cluster, tool gone)."""
        ...

    async def may_decide(self, approval: Approval, user: str) -> str | None:
        """Why `user` may not approve or reject it now; None when they may."""
        ...

    async def may_withdraw(self, approval: Approval, user: str) -> bool: ...


class Continuation(Protocol):
    """After a decision: the outcome goes into the conversation and, when asked, a new turn
    of the agent answers in the thread."""

    async def record(self, approval: Approval, note: str, *, answer: bool) -> None: ...


class WriteReservations(Protocol):
    """One write per object at a time. Shared by every replica (the database)."""

    async def reserve(self, target: str, approval_id: str) -> bool:
        """True if this approval now holds the target; False if another write holds it."""
        ...

    async def release(self, target: str, approval_id: str) -> None: ...


class WriteFence(Protocol):
    """Whether this replica still owns an approved change, asked right before its write."""

    async def holds(self, approval_id: str) -> bool:
        """True when it does (and keeps it from here on); False when another took it."""
        ...
