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

Feedback on answers (a person's 👍/👎, a 👎's masked reason, and what the 👎'd turn read,
re-read masked: `bot.store.feedback`) goes with its thread's conversation, in the same
transaction. It holds a person's words and cluster data, and its one reader, `kelpie eval
export`, needs the conversation it rates (it refuses a thread kelpie holds no session of):
feedback kept past it is kept for nothing. A click or a reason is use of the thread as much
as a message, though: a conversation rated within `store.retention_days` is not idle, so a
👎 given on an old thread keeps it exportable for as long again. Feedback in a thread kelpie
holds no conversation of (it went before this rule existed, or the click came after) goes
once it is that old itself.

An alert group (its thread's key) goes once resolved for as long as a conversation idles:
firing again by then, it would open a new thread anyway (`alerts.reopen_s`). Incident
memories stay: a person confirmed them to be kept.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import ColumnElement, and_, delete, exists, not_, or_, tuple_, union
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from bot.store import chain
from bot.store.alerts import RESOLVED
from bot.store.db import Database
from bot.store.tables import (
    AlertGroupRow,
    ApprovalRow,
    FeedbackFixtureRow,
    FeedbackRow,
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
    feedback: int = 0  # 👍/👎 rows (a 👎's captured reads go with them, uncounted)
    alert_groups: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(
            self.sessions + other.sessions,
            self.messages + other.messages,
            self.audits + other.audits,
            self.approvals + other.approvals,
            self.deliveries + other.deliveries,
            self.feedback + other.feedback,
            self.alert_groups + other.alert_groups,
        )


class Pruner:
    """Runs a pass at start and every `every_s`; `drain` (at shutdown) stops it. Ages are
    measured from `now()`."""

    def __init__(
        self,
        db: Database,
        retention: Retention,
        *,
        batch: int = BATCH,
        pause_s: float = PAUSE_S,
        every_s: float = EVERY_S,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self._db = db
        self._retention = retention
        self._batch = batch
        self._pause_s = pause_s
        self._every_s = every_s
        self._now = now
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
                        "%d feedback row(s), %d tool audit row(s), %d approval(s), "
                        "%d resolved alert group(s) and %d Slack delivery record(s)",
                        pruned.sessions,
                        pruned.messages,
                        pruned.feedback,
                        pruned.audits,
                        pruned.approvals,
                        pruned.alert_groups,
                        pruned.deliveries,
                    )
            await self.log_head()
            await asyncio.sleep(self._every_s)

    async def log_head(self) -> None:
        """The audit chain's head, into the log (shipped out of the database's reach): an
        anchor that `kelpie audit verify --anchor` checks the chain still holds."""
        try:
            async with self._db.sessions() as read:
                head = await read.run_sync(lambda s: chain.head_anchor(s.connection()))
        except Exception:
            log.warning("retention: could not read the audit chain's head", exc_info=True)
            return
        log.info("audit chain head %s (note it: kelpie audit verify --anchor %s)", head, head)

    async def prune(self) -> Pruned:
        """One full pass, batch by batch, as of `now()`."""
        now = self._now()
        total = Pruned()
        if self._retention.audits is not None:
            cutoff = now - self._retention.audits
            total += await self._chain_start(cutoff)
            total += await self._batches(_OldToolAudits(cutoff))
            total += await self._batches(_OldApprovals(cutoff))
        conversations = now - self._retention.conversations
        total += await self._batches(_IdleConversations(conversations))
        total += await self._batches(_UnheldFeedback(conversations))
        total += await self._batches(_ResolvedAlertGroups(conversations))
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


@dataclass(frozen=True)
class _ResolvedAlertGroups:
    """Alert groups resolved before the cutoff (as old as an idle conversation): one firing
    again is long past `alerts.reopen_s` and opens a new thread anyway. A firing group stays:
    its resolve may still come."""

    cutoff: datetime

    def _old(self) -> ColumnElement[bool]:
        return and_(
            col(AlertGroupRow.status) == RESOLVED,
            col(AlertGroupRow.resolved_at) < self.cutoff,
        )

    def candidates(self) -> Any:
        return select(AlertGroupRow.key).where(self._old())

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            gone = delete(AlertGroupRow).where(col(AlertGroupRow.key).in_(ids), self._old())
            return Pruned(alert_groups=_rowcount(session.exec(gone)))

        return op


def _of_session(table: Any) -> Any:
    return exists().where(col(table.session_id) == SessionRow.id)


def _at_thread(table: Any, channel_id: Any, thread_ts: Any) -> ColumnElement[bool]:
    # Feedback names its thread, as a session does, not the session's id.
    return and_(col(table.channel_id) == channel_id, col(table.thread_ts) == thread_ts)


def _of_thread(table: Any) -> Any:
    return exists().where(_at_thread(table, SessionRow.channel_id, SessionRow.thread_ts))


def _rated_since(cutoff: datetime, channel_id: Any, thread_ts: Any) -> ColumnElement[bool]:
    """A 👍/👎 or a 👎's reason in the thread since the cutoff: someone still uses it."""
    # An alias: inside a statement on `feedback` itself it must not correlate to that row.
    rated = aliased(FeedbackRow)
    return exists().where(
        _at_thread(rated, channel_id, thread_ts),
        or_(col(rated.created_at) >= cutoff, col(rated.reason_at) >= cutoff),
    )


@dataclass(frozen=True)
class _IdleConversations:
    """Sessions idle since before the cutoff that still hold something to delete."""

    cutoff: datetime

    def _idle(self) -> ColumnElement[bool]:
        recent = exists().where(
            col(MessageRow.session_id) == SessionRow.id,
            col(MessageRow.created_at) >= self.cutoff,
        )
        rated = _rated_since(self.cutoff, SessionRow.channel_id, SessionRow.thread_ts)
        return and_(col(SessionRow.created_at) < self.cutoff, not_(recent), not_(rated))

    def candidates(self) -> Any:
        something = or_(
            _of_session(MessageRow),
            _of_session(UsageRow),
            _of_session(PayloadRow),
            _of_session(TurnRow),
            _of_session(ThreadSummaryRow),
            _of_thread(FeedbackRow),
            _of_thread(FeedbackFixtureRow),
            not_(_anchored()),
        )
        return select(SessionRow.id).where(self._idle(), something)

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        def op(session: Session) -> Pruned:
            # Re-checked here: a message or a click that arrived since the read keeps it.
            idle = select(SessionRow.id).where(col(SessionRow.id).in_(ids), self._idle())
            still = list(session.exec(idle).all())
            if not still:
                return Pruned()
            feedback = _delete_feedback(session, still)
            messages = session.exec(delete(MessageRow).where(col(MessageRow.session_id).in_(still)))
            for table in (UsageRow, PayloadRow, TurnRow, ThreadSummaryRow):
                session.exec(delete(table).where(col(table.session_id).in_(still)))
            session.exec(delete(SessionRow).where(col(SessionRow.id).in_(still), not_(_anchored())))
            return Pruned(sessions=len(still), messages=_rowcount(messages), feedback=feedback)

        return op


def _delete_feedback(session: Session, session_ids: list[Any]) -> int:
    """The feedback in these sessions' threads (before the sessions go: it is found by them);
    how many 👍/👎 rows went."""

    def of_them(table: Any) -> Any:
        in_thread = _at_thread(table, SessionRow.channel_id, SessionRow.thread_ts)
        return exists().where(col(SessionRow.id).in_(session_ids), in_thread)

    session.exec(delete(FeedbackFixtureRow).where(of_them(FeedbackFixtureRow)))
    return _rowcount(session.exec(delete(FeedbackRow).where(of_them(FeedbackRow))))


def _anchored() -> ColumnElement[bool]:
    """A kept tool audit, approval or incident memory points at the session (a memory's
    decision is audited in its session)."""
    return or_(_of_session(ToolAuditRow), _of_session(ApprovalRow), _of_session(IncidentMemoryRow))


@dataclass(frozen=True)
class _UnheldFeedback:
    """Threads (channel, thread_ts) with feedback but no conversation kelpie holds, neither
    rated nor (for a 👎's captured reads) captured since the cutoff."""

    cutoff: datetime

    def _unheld(self, table: Any) -> ColumnElement[bool]:
        channel_id, thread_ts = col(table.channel_id), col(table.thread_ts)
        held = exists().where(_at_thread(SessionRow, channel_id, thread_ts))
        return and_(not_(held), not_(_rated_since(self.cutoff, channel_id, thread_ts)))

    def _old_fixture(self) -> ColumnElement[bool]:
        captured = col(FeedbackFixtureRow.captured_at) < self.cutoff
        return and_(self._unheld(FeedbackFixtureRow), captured)

    def candidates(self) -> Any:
        fixtures = FeedbackFixtureRow
        return union(
            select(FeedbackRow.channel_id, FeedbackRow.thread_ts).where(self._unheld(FeedbackRow)),
            select(fixtures.channel_id, fixtures.thread_ts).where(self._old_fixture()),
        )

    def delete(self, ids: Sequence[Any]) -> Op[Pruned]:
        threads = [(channel_id, thread_ts) for channel_id, thread_ts in ids]

        def op(session: Session) -> Pruned:
            # Re-checked here: a conversation or a click that arrived since the read keeps it.
            fixtures = tuple_(FeedbackFixtureRow.channel_id, FeedbackFixtureRow.thread_ts)
            session.exec(
                delete(FeedbackFixtureRow).where(fixtures.in_(threads), self._old_fixture())
            )
            rated = tuple_(FeedbackRow.channel_id, FeedbackRow.thread_ts)
            unheld = self._unheld(FeedbackRow)
            result = session.exec(delete(FeedbackRow).where(rated.in_(threads), unheld))
            return Pruned(feedback=_rowcount(result))

        return op
