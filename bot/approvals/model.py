"""The approval's typed vocabulary and the ports the approval flow talks to."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from bot.tools.spec import FieldChange, WritePlan, WriteTarget


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Approval:
    id: str
    session_id: int
    turn_id: str
    tool_call_id: str
    plan: WritePlan
    reason: str
    role: str
    channel_id: str
    thread_ts: str
    requested_by: str
    status: ApprovalState
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    card_ts: str | None = None
    outcome: str | None = None


def plan_to_json(plan: WritePlan) -> str:
    return json.dumps(asdict(plan), sort_keys=True)


def plan_from_json(text: str) -> WritePlan:
    data: dict[str, Any] = json.loads(text)
    return WritePlan(
        tool=data["tool"],
        description=data["description"],
        cluster=data["cluster"],
        target=WriteTarget(**data["target"]),
        changes=tuple(FieldChange(**change) for change in data["changes"]),
        args=data["args"],
    )


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
    ) -> bool:
        """Compare-and-set pending → `to`; True only for the one caller that won."""
        ...

    async def set_outcome(self, approval_id: str, outcome: str) -> None: ...

    async def pending(self) -> list[Approval]: ...


@dataclass(frozen=True)
class WriteAudit:
    approval_id: str
    phase: str  # intent | outcome
    tool: str
    target: str
    target_uid: str
    requested_by: str
    approved_by: str
    preview: str
    result: str = ""
    ok: bool = True


class WriteAuditLog(Protocol):
    async def record(self, entry: WriteAudit) -> None:
        """Durable before it returns; raises if it could not be written."""
        ...


class ApprovalCards(Protocol):
    """Where people see approvals (Slack cards); knows how to render each state."""

    async def post(self, approval: Approval) -> str:
        """Post the card; returns its message ts."""
        ...

    async def update(self, approval: Approval, note: str = "") -> None: ...


class WriteReservations(Protocol):
    """One write per object at a time. Shared by every replica (the database)."""

    async def reserve(self, target: str, approval_id: str) -> bool:
        """True if this approval now holds the target; False if another write holds it."""
        ...

    async def release(self, target: str, approval_id: str) -> None: ...
