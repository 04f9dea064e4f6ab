"""Retention: old conversations and (when asked) old audits are pruned, off the hot path.

A conversation (a session with its messages and tool results, usage and payload log) goes
once it has been idle for `store.retention_days`: a thread still in use keeps its whole
history, so a tool call never loses its result and the agent never reads a conversation cut
in the middle. Approvals, their write audits and the tool audit are the record of who did
what to a cluster: they go only after `store.audit_retention_days`, and by default never.
A session row that a kept audit or approval points at stays (it says which thread, role and
cluster the audit belongs to); only its conversation goes. Audit rows are on a hash chain
(`bot.store.chain`): only its start goes, checked first and behind a checkpoint row, and an
approval goes once its chained write audits went with it.

Slack deliveries (the inbox) go once handled and a day old: their keys answer a retried
delivery as a repeat within Slack's retry window (minutes), and their content is a person's
message. A delivery not handled yet stays, however old: a replica still owes it an answer.

A pass works in small batches: the candidates are found on a read connection, then one short
op through the one writer deletes them (re-checking, inside its transaction, that nothing
new arrived meanwhile), then a pause. A turn's writes therefore wait behind one batch at
most, and a pass that finds nothing costs no write at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import ColumnElement, and_, delete, exists, not_, or_
from sqlmodel import Session, col, select

from bot.store import chain
from bot.store.db import Database
from bot.store.tables import (
    ApprovalRow,
    InboundEventRow,
    IncidentMemoryRow,
    MessageRow,
    PayloadRow,
    SessionRow,
    ThreadSummaryRow,
    ToolAuditRow,
    TurnRow,
    UsageRow,
    VerifyWatchRow,
    WriteAuditRow,
    utcnow,
)
from bot.store.writer import Op
from bot.values import ApprovalState

log = logging.getLogger(__name__)

BATCH = 200  # rows (or sessions) per write: a few milliseconds of the writer
PAUSE_S = 0.1  # between batches, so turns' writes go first
EVERY_S = 6 * 3600.0
# How long a handled delivery's key is remembered: Slack retries within minutes, and a
# retried delivery must find its key.
DELIVERY_MEMORY = timedelta(days=1)


@dataclass(frozen=True)
class Retention:
    conversations: timedelta
    audits: timedelta | None  # None: approvals and audits are kept
    deliveries: timedelta = DELIVERY_MEMORY


@dataclass(frozen=True)
class Pruned:
    sessions: int = 0
    messages: int = 0
    audits: int = 0
    approvals: int = 0
    deliveries: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(
            self.sessions + other.sessions,
            self.messages + other.messages,
            self.audits + other.audits,
            self.approvals + other.approvals,
            self.deliveries + other.deliveries,
        )


class Pruner:
    """Runs a pass at start and every `every_s`; `drain` (at shutdown) stops it."""

    def __init__(
        self,
        db: Database,
        retention: Retention,
        *,
        batch: int = BATCH,
        pause_s: float = PAUSE_S,
        every_s: float = EVERY_S,
    ) -> None:
        self._db = db
        self._retention = retention
        self._batch = batch
        self._pause_s = pause_s
        self._every_s = every_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kelpie-retention")

    async def drain(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                pruned = await self.prune()
            except Exception:  # an outage: the next pass tries again; nothing depends on it
                log.exception("retention: could not prune the store; trying again later")
            else:
                if pruned != Pruned():
                    log.info(
                        "retention: removed %d idle conversation(s) (%d message(s)), "
                        "%d tool audit row(s), %d approval(s) and %d Slack delivery record(s)",
                        pruned.sessions,
                        pruned.messages,
                        pruned.audits,
                        pruned.approvals,
                        pruned.deliveries,
                    )
            await asyncio.sleep(self._every_s)

    async def prune(self) -> Pruned:
        """One full pass, batch by batch, as of now."""
        now = utcnow()
        total = Pruned()
        if self._retention.audits is not None:
            cutoff = now - self._retention.audits
            total += await self._chain_start(cutoff)
            total += await self._batches(_OldToolAudits(cutoff))
            total += await self._batches(_OldApprovals(cutoff))
        total += await self._batches(_IdleConversations(now - self._retention.conversations))
        total += await self._batches(_OldDeliveries(now - self._retention.deliveries))
        return total

    async def _chain_start(self, cutoff: datetime) -> Pruned:
        """The audit chain's old start, batch by batch, each behind a checkpoint row
        (`bot.store.chain.pruning`); a start that does not verify is kept and logged."""
        total = Pruned()
        while True:
            async with self._db.sessions() as read:
                oldest = await read.run_sync(lambda s: chain.oldest_before(s.connection(), cutoff))
            if oldest is None:
                return total
            result = await self._db.write(chain.pruning(cutoff, self._batch))
            total += Pruned(audits=result.rows)
            if result.refused is not None:
                log.error(
                    "retention: the audit chain's start does not verify (%s: %s); its rows are"
                    " kept until `kelpie audit verify` is intact",
                    result.refused.kind,
                    result.refused.sentence,
                )
                return total
            if result.rows < self._batch:
                return total
            await asyncio.sleep(self._pause_s)

    async def _batches(self, kind: _Kind) -> Pruned:
        total = Pruned()
        while True:
            async with self._db.sessions() as read:
                ids = list((await read.exec(kind.candidates().limit(self._batch))).all())
            if not ids:
                return total
            pruned = await self._db.write(kind.delete(ids))
            total += pruned
            # A batch that removed nothing (everything in it turned recent) ends the pass.
            if len(ids) < self._batch or pruned == Pruned():
                return total
            await asyncio.sleep(self._pause_s)


class _Kind(Protocol):
    """What one kind of prune selects (a query of ids) and how it deletes a batch of them."""

    def candidates(self) -> Any: ...

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]: ...


def _rowcount(result: Any) -> int:
    return int(result.rowcount or 0)


@dataclass(frozen=True)
class _OldToolAudits:
    cutoff: datetime

    def candidates(self) -> Any:
        # Rows on the audit chain go with its start (`_chain_start`); these are not on it.
        return select(ToolAuditRow.id).where(
            col(ToolAuditRow.created_at) < self.cutoff, col(ToolAuditRow.chain_seq).is_(None)
        )

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            result = session.exec(delete(ToolAuditRow).where(col(ToolAuditRow.id).in_(ids)))
            return Pruned(audits=_rowcount(result))

        return op


@dataclass(frozen=True)
class _OldApprovals:
    """Decided approvals older than the cutoff, with their write audits (a pending one is
    still someone's card)."""

    cutoff: datetime

    def _old(self) -> ColumnElement[bool]:
        # Its write audits on the chain go with the chain's start first.
        chained = exists().where(
            col(WriteAuditRow.approval_id) == ApprovalRow.id,
            col(WriteAuditRow.chain_seq).is_not(None),
        )
        return and_(
            col(ApprovalRow.created_at) < self.cutoff,
            col(ApprovalRow.status) != str(ApprovalState.PENDING),
            not_(chained),
        )

    def candidates(self) -> Any:
        return select(ApprovalRow.id).where(self._old())

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            session.exec(delete(WriteAuditRow).where(col(WriteAuditRow.approval_id).in_(ids)))
            session.exec(delete(VerifyWatchRow).where(col(VerifyWatchRow.approval_id).in_(ids)))
            result = session.exec(
                delete(ApprovalRow).where(col(ApprovalRow.id).in_(ids), self._old())
            )
            return Pruned(approvals=_rowcount(result))

        return op


@dataclass(frozen=True)
class _OldDeliveries:
    """Handled deliveries received before the cutoff (an unhandled one is still owed)."""

    cutoff: datetime

    def _old(self) -> ColumnElement[bool]:
        return and_(
            col(InboundEventRow.received_at) < self.cutoff,
            col(InboundEventRow.handled_at).is_not(None),
        )

    def candidates(self) -> Any:
        return select(InboundEventRow.key).where(self._old())

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            result = session.exec(
                delete(InboundEventRow).where(col(InboundEventRow.key).in_(ids), self._old())
            )
            return Pruned(deliveries=_rowcount(result))

        return op


def _of_session(table: Any) -> Any:
    return exists().where(col(table.session_id) == SessionRow.id)


@dataclass(frozen=True)
class _IdleConversations:
    """Sessions idle since before the cutoff that still hold something to delete."""

    cutoff: datetime

    def _idle(self) -> ColumnElement[bool]:
        recent = exists().where(
            col(MessageRow.session_id) == SessionRow.id,
            col(MessageRow.created_at) >= self.cutoff,
        )
        return and_(col(SessionRow.created_at) < self.cutoff, not_(recent))

    def candidates(self) -> Any:
        something = or_(
            _of_session(MessageRow),
            _of_session(UsageRow),
            _of_session(PayloadRow),
            _of_session(TurnRow),
            _of_session(ThreadSummaryRow),
            not_(_anchored()),
        )
        return select(SessionRow.id).where(self._idle(), something)

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            # Re-checked here: a message that arrived since the read keeps its session.
            idle = select(SessionRow.id).where(col(SessionRow.id).in_(ids), self._idle())
            still = list(session.exec(idle).all())
            if not still:
                return Pruned()
            messages = session.exec(delete(MessageRow).where(col(MessageRow.session_id).in_(still)))
            for table in (UsageRow, PayloadRow, TurnRow, ThreadSummaryRow):
                session.exec(delete(table).where(col(table.session_id).in_(still)))
            session.exec(delete(SessionRow).where(col(SessionRow.id).in_(still), not_(_anchored())))
            return Pruned(sessions=len(still), messages=_rowcount(messages))

        return op


def _anchored() -> ColumnElement[bool]:
    """A kept tool audit, approval or incident memory points at the session (a memory's
    decision is audited in its session)."""
    return or_(_of_session(ToolAuditRow), _of_session(ApprovalRow), _of_session(IncidentMemoryRow))
