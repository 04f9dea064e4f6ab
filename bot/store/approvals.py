"""Approvals and write audits in the database. Decisions are compare-and-set updates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, update
from sqlmodel import Session, col, select

from bot.store.chain import appending
from bot.store.db import (
    Database,
    counting,
    executing,
    insert_ignoring_duplicates,
    inserting,
)
from bot.store.tables import (
    ApprovalRow,
    MessageRow,
    WriteAuditRow,
    WriteReservationRow,
    aware,
    utcnow,
)
from bot.store.turns import Replica, renewing_approvals
from bot.values import Approval, ApprovalState, WriteAudit, plan_from_json, plan_to_json


def _approval(row: ApprovalRow) -> Approval:
    return Approval(
        id=row.id,
        session_id=row.session_id,
        turn_id=row.turn_id,
        tool_call_id=row.tool_call_id,
        plan=plan_from_json(row.plan_json),
        reason=row.reason,
        role=row.role,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        requested_by=row.requested_by,
        status=ApprovalState(row.status),
        expires_at=aware(row.expires_at),
        decided_by=row.decided_by,
        decided_at=aware(row.decided_at) if row.decided_at else None,
        card_ts=row.card_ts,
        outcome=row.outcome,
        requesters=tuple(json.loads(row.requesters_json or "[]")),
    )


class ApprovalRepository:
    """An approved change is leased to the replica that approved it (`owner`, renewed by its
    heartbeat, `TurnRepository.renew`) until its outcome is recorded; only a row whose lease
    has expired is reconciled elsewhere, claimed by compare-and-set."""

    def __init__(self, db: Database, replica: Replica | None = None) -> None:
        self._db = db
        # Without one (a reader, `kelpie chat`): a lease of the default length.
        self._replica = replica or Replica.this_process(15.0)

    async def create(self, approval: Approval) -> None:
        row = ApprovalRow(
            id=approval.id,
            session_id=approval.session_id,
            turn_id=approval.turn_id,
            tool_call_id=approval.tool_call_id,
            tool=approval.plan.tool,
            plan_json=plan_to_json(approval.plan),
            reason=approval.reason,
            role=approval.role,
            cluster=approval.plan.cluster,
            channel_id=approval.channel_id,
            thread_ts=approval.thread_ts,
            requested_by=approval.requested_by,
            requesters_json=json.dumps(list(approval.requesters)),
            status=str(approval.status),
            expires_at=approval.expires_at,
        )
        await self._db.write(inserting(row))

    async def get(self, approval_id: str) -> Approval | None:
        async with self._db.sessions() as session:
            row = await session.get(ApprovalRow, approval_id)
            return _approval(row) if row else None

    async def set_card(self, approval_id: str, card_ts: str) -> None:
        await self._update(approval_id, card_ts=card_ts)

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
        conditions = [
            col(ApprovalRow.id) == approval_id,
            col(ApprovalRow.status) == str(ApprovalState.PENDING),
        ]
        if require_unexpired:
            conditions.append(col(ApprovalRow.expires_at) > now)
        if require_expired:
            conditions.append(col(ApprovalRow.expires_at) <= now)
        values: dict[str, object] = {"status": str(to), "decided_by": by, "decided_at": now}
        if to is ApprovalState.APPROVED:
            # The change runs here now: leased to this replica until its outcome.
            values |= {"owner": self._replica.id, "lease_expires_at": self._replica.lease()[1]}
        statement = update(ApprovalRow).where(*conditions).values(**values)

        def op(session: Session) -> bool:
            return bool(session.exec(statement).rowcount)

        won = await self._db.write(op)
        if won and to is ApprovalState.APPROVED:
            self._replica.held.approvals.add(approval_id)
        return won

    async def renew_leases(self) -> None:
        """The heartbeat of a process that holds no turn leases (`kelpie chat`): the
        approved changes executing here stay its own while it lives (`kelpie run` renews
        them with its turns, `TurnRepository.renew`)."""
        until = self._replica.lease()[1]
        held = self._replica.held.approvals
        await self._db.write(executing(renewing_approvals(self._replica.id, until, held)))

    async def holds(self, approval_id: str) -> bool:
        """The fencing check right before an approved write: True when this replica still
        owns the approval (no outcome yet), its lease pushed back in the same compare-and-set,
        so no other replica can take it from here on; False when another one took it."""
        statement = (
            update(ApprovalRow)
            .where(
                col(ApprovalRow.id) == approval_id,
                col(ApprovalRow.owner) == self._replica.id,
                col(ApprovalRow.status) == str(ApprovalState.APPROVED),
                col(ApprovalRow.outcome).is_(None),
            )
            .values(lease_expires_at=self._replica.lease()[1])
        )
        return await self._db.write(counting(statement))

    async def set_outcome(self, approval_id: str, outcome: str) -> bool:
        """The first outcome, by the replica that owns the approval (a decision that runs
        nothing has no owner); False when another one owns it or recorded one first."""
        statement = (
            update(ApprovalRow)
            .where(
                col(ApprovalRow.id) == approval_id,
                col(ApprovalRow.outcome).is_(None),
                or_(col(ApprovalRow.owner).is_(None), col(ApprovalRow.owner) == self._replica.id),
            )
            .values(outcome=outcome)
        )
        recorded = await self._db.write(counting(statement))
        self._replica.held.approvals.discard(approval_id)
        return recorded

    def release(self, approval_id: str) -> None:
        """Its outcome could not be stored: no longer renewed here, so it is reconciled."""
        self._replica.held.approvals.discard(approval_id)

    async def _update(self, approval_id: str, **values: object) -> None:
        statement = update(ApprovalRow).where(col(ApprovalRow.id) == approval_id)
        await self._db.write(executing(statement.values(**values)))

    async def pending(self) -> list[Approval]:
        return await self._select(col(ApprovalRow.status) == str(ApprovalState.PENDING))

    async def pending_in(self, session_id: int) -> list[Approval]:
        return await self._select(
            col(ApprovalRow.status) == str(ApprovalState.PENDING),
            col(ApprovalRow.session_id) == session_id,
        )

    async def expired(self, now: datetime) -> list[Approval]:
        return await self._select(
            col(ApprovalRow.status) == str(ApprovalState.PENDING),
            col(ApprovalRow.expires_at) <= now,
        )

    async def unfinished(self) -> list[Approval]:
        """Approved, no outcome, and no live replica executing it (its lease expired, or it
        has none: a row from before the leases)."""
        found = await self._select(*_orphaned(self._replica.clock()))
        return [approval for approval in found if approval.id not in self._replica.held.approvals]

    async def claim_unfinished(self, approval_id: str) -> bool:
        """Take an orphaned approved row to reconcile it here; True for exactly one caller.
        Never one this process still executes, whatever its lease says."""
        if approval_id in self._replica.held.approvals:
            return False
        now, until = self._replica.lease()
        statement = (
            update(ApprovalRow)
            .where(col(ApprovalRow.id) == approval_id, *_orphaned(now))
            .values(owner=self._replica.id, lease_expires_at=until)
        )

        def op(session: Session) -> bool:
            return bool(session.exec(statement).rowcount)

        claimed = await self._db.write(op)
        if claimed:
            self._replica.held.approvals.add(approval_id)
        return claimed

    async def next_expiry(self) -> datetime | None:
        async with self._db.sessions() as session:
            value = (
                await session.exec(
                    select(func.min(ApprovalRow.expires_at)).where(
                        col(ApprovalRow.status) == str(ApprovalState.PENDING)
                    )
                )
            ).one()
        return aware(value) if value is not None else None

    async def requesters(self, session_id: int) -> list[str]:
        async with self._db.sessions() as session:
            last = (
                await session.exec(
                    select(func.max(ApprovalRow.decided_at)).where(
                        col(ApprovalRow.session_id) == session_id,
                        col(ApprovalRow.status) != str(ApprovalState.PENDING),
                    )
                )
            ).one()
            query = select(MessageRow.slack_user).where(
                col(MessageRow.session_id) == session_id,
                col(MessageRow.role) == "user",
                col(MessageRow.slack_user).is_not(None),
            )
            if last is not None:
                query = query.where(col(MessageRow.created_at) > last)
            users = (await session.exec(query.order_by(col(MessageRow.id)))).all()
        return list(dict.fromkeys(user for user in users if user))

    async def _select(self, *conditions: Any) -> list[Approval]:
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(ApprovalRow).where(*conditions).order_by(col(ApprovalRow.created_at))
            )
            return [_approval(row) for row in rows.all()]


def _orphaned(now: datetime) -> list[Any]:
    return [
        col(ApprovalRow.status) == str(ApprovalState.APPROVED),
        col(ApprovalRow.outcome).is_(None),
        or_(col(ApprovalRow.owner).is_(None), col(ApprovalRow.lease_expires_at) <= now),
    ]


class WriteAuditRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, entry: WriteAudit) -> None:
        """Durable before it returns: a write's intent is on record before the change."""
        row = {
            "approval_id": entry.approval_id,
            "phase": entry.phase,
            "tool": entry.tool,
            "target": entry.target,
            "target_uid": entry.target_uid,
            "requested_by": entry.requested_by,
            "approved_by": entry.approved_by,
            "preview": entry.preview,
            "result": entry.result,
            "ok": entry.ok,
            "created_at": utcnow(),
        }
        await self._db.write(appending(WriteAuditRow, [row]))  # on the audit chain

    async def for_approval(self, approval_id: str) -> list[WriteAuditRow]:
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(WriteAuditRow)
                .where(WriteAuditRow.approval_id == approval_id)
                .order_by(col(WriteAuditRow.id))
            )
            return list(rows.all())

    async def all(self) -> list[WriteAuditRow]:
        async with self._db.sessions() as session:
            rows = await session.exec(select(WriteAuditRow).order_by(col(WriteAuditRow.id)))
            return list(rows.all())


class WriteReservationRepository:
    """Implements WriteReservations with a row per target. A reservation left by a crashed
    process is taken over after `stale_after` (longer than any write takes)."""

    def __init__(self, db: Database, stale_after: timedelta = timedelta(minutes=10)) -> None:
        self._db = db
        self._stale_after = stale_after

    async def reserve(self, target: str, approval_id: str) -> bool:
        stale = datetime.now(UTC) - self._stale_after

        def op(session: Session) -> bool:
            session.exec(
                delete(WriteReservationRow).where(
                    col(WriteReservationRow.target) == target,
                    col(WriteReservationRow.created_at) < stale,
                )
            )
            result = session.exec(
                insert_ignoring_duplicates(session, WriteReservationRow).values(
                    target=target, approval_id=approval_id, created_at=utcnow()
                )
            )
            return bool(result.rowcount)

        return await self._db.write(op)

    async def release(self, target: str, approval_id: str) -> None:
        await self._db.write(
            executing(
                delete(WriteReservationRow).where(
                    col(WriteReservationRow.target) == target,
                    col(WriteReservationRow.approval_id) == approval_id,
                )
            )
        )
