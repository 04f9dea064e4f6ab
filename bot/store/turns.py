"""Turns and replica leases: which replica owns which turn, and until when.

Every turn has a row (`TurnRow`) owned by the replica that accepted it, with a lease that
replica's heartbeat renews. A thread runs one turn at a time across replicas: claiming a
turn as running is a compare-and-set that fails while another turn of the thread runs (a
partial unique index settles the race between two replicas). When a replica dies its leases
expire, and another one claims its turns (compare-and-set on owner and expiry) to close them.

Knows no Slack and no agent: it stores what the agent's `TurnLedger` port asks.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Update, exists, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.repositories import adding_messages, creating_session
from bot.store.tables import (
    DROPPED_WHEN_HANDLED,
    ApprovalRow,
    InboundEventRow,
    MessageRow,
    SessionRow,
    TurnRow,
    aware,
    utcnow,
)
from bot.store.wakeups import notify
from bot.store.writer import Op
from bot.values import (
    AcceptedTurn,
    Admission,
    ApprovalState,
    Message,
    OrphanTurn,
    PendingClosing,
    RemoteTurn,
    Role,
    SessionInfo,
    TurnClaim,
    TurnInterrupt,
    TurnState,
    Wake,
)

LIVE = (TurnState.QUEUED.value, TurnState.RUNNING.value)


@dataclass
class Held:
    """What this process really runs now, in memory: the turns it accepted or claimed and
    has not ended, the approved changes it executes or reconciles. Only these leases are
    renewed (a row this process owns but no longer runs, such as a turn whose end could
    not be stored, lapses and is taken over), and its own takeover never touches them."""

    turns: dict[str, str] = field(default_factory=dict)  # turn id -> its session key
    approvals: set[str] = field(default_factory=set)
    # Turns of a dead replica taken over and not claimed to run here (being closed with a
    # note, or about to be resumed): their leases are renewed like the rest, but nothing of
    # them runs here, so an interrupt meant for them never reaches the turn of their thread
    # that does (the newer message that asked for it, queued behind them).
    taken_over: set[str] = field(default_factory=set)

    def running(self) -> dict[str, str]:
        """The turns this process runs or has queued itself (turn id -> session key)."""
        return {turn: key for turn, key in self.turns.items() if turn not in self.taken_over}

    def drop(self, turn_id: str) -> None:
        self.turns.pop(turn_id, None)
        self.taken_over.discard(turn_id)


@dataclass(frozen=True)
class Replica:
    """This process as a lease owner: host and pid for people, a random part so that a
    restarted process never mistakes its predecessor's leases for its own.

    The id is the fencing token: every act on a leased row (a turn's end, an approval's
    outcome, the approved write itself) is a compare-and-set on `owner` = this id. A row is
    only ever taken from another owner, or from this one once it no longer holds it, so an
    owner that lost a row never gets it back while its old work still runs."""

    id: str
    ttl: timedelta
    clock: Callable[[], datetime] = field(default=utcnow, compare=False)
    held: Held = field(default_factory=Held, compare=False)

    @classmethod
    def this_process(cls, ttl_s: float) -> Replica:
        name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        return cls(name, timedelta(seconds=ttl_s))

    def lease(self) -> tuple[datetime, datetime]:
        """(now, when a lease taken now expires)."""
        now = self.clock()
        return now, now + self.ttl


class TurnRepository:
    """Implements the agent's `TurnLedger` port."""

    def __init__(self, db: Database, replica: Replica) -> None:
        self._db = db
        self.replica = replica

    async def begin(
        self,
        thread: SessionInfo,
        turn_id: str,
        asker: str,
        messages: list[Message],
        event_key: str | None = None,
        *,
        claim: bool = False,
        admission: Admission | None = None,
    ) -> AcceptedTurn | None:
        """`accept` and, when asked, `claim` in one transaction, with the thread's session
        created from `thread` when it has no id yet: a person's message costs one commit
        before its turn runs. Claimed: the row goes in as running, unless another turn of
        the thread runs (on any replica), which the one-running-per-thread index says. None
        when the delivery had already been accepted (replayed after a crash)."""
        now, until = self.replica.lease()
        row = {
            "turn_id": turn_id,
            "asker": asker,
            "event_key": event_key,
            "owner": self.replica.id,
            "heartbeat_at": now,
            "lease_expires_at": until,
            "created_at": now,
            **_admitted(admission),
        }

        def op(session: Session) -> AcceptedTurn | None:
            found = thread if thread.id else creating_session(thread)(session)
            values = row | {"session_id": found.id}
            # A conflict on the running index is a claim lost: the turn is queued instead.
            # (A conflict on the delivery's key is a replay: nothing is stored.)
            states = [TurnState.RUNNING, TurnState.QUEUED] if claim else [TurnState.QUEUED]
            for state in states:
                inserted = session.exec(
                    insert_ignoring_duplicates(session, TurnRow).values(
                        values | {"state": state.value}
                    )
                )
                if inserted.rowcount:
                    break
            else:
                return None
            if messages:
                adding_messages(found.id, turn_id, messages)(session)
            if event_key is not None:
                session.exec(
                    update(InboundEventRow)
                    .where(col(InboundEventRow.key) == event_key)
                    .values(DROPPED_WHEN_HANDLED | {"handled_at": now})
                )
            return AcceptedTurn(found, state is TurnState.RUNNING)

        accepted = await self._db.write(op)
        if accepted is not None:
            self.replica.held.turns[turn_id] = accepted.session.session_key
        return accepted

    async def claim(
        self, session_id: int, turn_id: str, asker: str, admission: Admission | None = None
    ) -> TurnClaim:
        """Mark the turn running here, unless another turn of its thread runs (on any
        replica: WAIT) or it is no longer queued here (stopped while it waited, or taken
        over: GONE, it never runs). A turn with no row yet gets one (with `admission`)."""
        now, until = self.replica.lease()
        other_running = exists().where(
            col(TurnRow.session_id) == session_id,
            col(TurnRow.state) == TurnState.RUNNING.value,
            col(TurnRow.turn_id) != turn_id,
        )
        queued_here = (
            col(TurnRow.turn_id) == turn_id,
            col(TurnRow.state) == TurnState.QUEUED.value,
            col(TurnRow.owner) == self.replica.id,
        )

        keys: list[str] = []  # the thread's session key, for the turns held here

        def op(session: Session) -> TurnClaim:
            row = session.get(TurnRow, turn_id)
            if row is not None and not _queued_for(row, self.replica.id):
                return TurnClaim.GONE
            if session.exec(select(other_running)).one():
                return TurnClaim.WAIT
            thread = session.get(SessionRow, session_id)
            if thread is not None:
                keys.append(thread.session_key)
            if row is None:
                session.add(
                    TurnRow(
                        turn_id=turn_id,
                        session_id=session_id,
                        state=TurnState.RUNNING.value,
                        asker=asker,
                        owner=self.replica.id,
                        heartbeat_at=now,
                        lease_expires_at=until,
                        **_admitted(admission),
                    )
                )
                session.flush()
                return TurnClaim.RUNNING
            # Compare-and-set: a stop (or a takeover) committed since the read wins.
            claimed = session.exec(
                update(TurnRow)
                .where(*queued_here)
                .values(state=TurnState.RUNNING.value, heartbeat_at=now, lease_expires_at=until)
            )
            return TurnClaim.RUNNING if claimed.rowcount else TurnClaim.GONE

        try:
            claim = await self._db.write(op)
        except IntegrityError:
            return TurnClaim.WAIT  # another replica's claim on the thread won the race
        if claim is TurnClaim.RUNNING and keys:
            self.replica.held.turns[turn_id] = keys[-1]
            self.replica.held.taken_over.discard(turn_id)  # a resumed one: it runs here now
        elif claim is TurnClaim.GONE:
            self.replica.held.drop(turn_id)
        return claim

    async def message_opened(self, turn_id: str, ts: str) -> None:
        """The turn shows in the message at `ts` (a stream, or a progress message) until
        `message_closed`: whoever takes the turn over after a crash closes it."""
        await self._db.write(self._open_messages(turn_id, lambda ts_list: [*ts_list, ts]))

    async def message_closed(self, turn_id: str, ts: str) -> None:
        await self._db.write(
            self._open_messages(turn_id, lambda ts_list: [t for t in ts_list if t != ts])
        )

    def _open_messages(self, turn_id: str, change: Callable[[list[str]], list[str]]) -> Op[None]:
        def op(session: Session) -> None:
            row = session.get(TurnRow, turn_id)
            if row is not None and row.owner == self.replica.id:
                row.open_messages = json.dumps(change(json.loads(row.open_messages)))
                session.add(row)
                # Now, not at the batch's end: a later op's plain statement must see it.
                session.flush()

        return op

    async def finish(
        self,
        turn_id: str,
        state: TurnState,
        closed: Sequence[str] = (),
        closing: str | None = None,
    ) -> None:
        """The turn ended here (not if another replica took it over meanwhile), and the
        messages in `closed` with it, its `closing` Slack calls still to go out kept: a turn
        waiting for its thread, on any replica, is woken to claim it."""
        ended = {"state": state.value, "ended_at": utcnow()}
        statement = (
            update(TurnRow)
            .where(col(TurnRow.turn_id) == turn_id, col(TurnRow.owner) == self.replica.id)
            .values(ended if closing is None else ended | {"closing_calls": closing})
        )
        closing_messages = self._open_messages(
            turn_id, lambda ts_list: [t for t in ts_list if t not in closed]
        )
        finishing = _waking(statement, Wake.TURN_ENDED)

        def op(session: Session) -> None:
            if closed:
                closing_messages(session)
            finishing(session)

        await self._db.write(op)
        self.replica.held.drop(turn_id)

    def release(self, turn_id: str) -> None:
        """This process no longer runs the turn although its end is not stored: its lease
        is no longer renewed, and once it lapses the turn is taken over (by any replica,
        this one included) and closed in its thread with a note."""
        self.replica.held.drop(turn_id)

    def held_turns(self) -> list[TurnInterrupt]:
        """Every turn this process runs or has queued (to stop them all: its leases may
        have lapsed)."""
        running = self.replica.held.running()
        return [TurnInterrupt(key, turn_id) for turn_id, key in running.items()]

    def closing_sent(self, turn_id: str, closed: Sequence[str] = ()) -> None:
        """Slack accepted the turn's closing calls (or they were given up), which closed the
        messages in `closed`. Deferred: it rides with the next commit (a crash before then
        only sends them again, which changes nothing in Slack)."""
        statement = (
            update(TurnRow)
            .where(col(TurnRow.turn_id) == turn_id, col(TurnRow.owner) == self.replica.id)
            .values(closing_calls=None)
        )
        closing_messages = self._open_messages(
            turn_id, lambda ts_list: [t for t in ts_list if t not in closed]
        )

        def op(session: Session) -> None:
            if closed:
                closing_messages(session)
            session.exec(statement)

        self._db.defer(op)

    async def take_closings(self, limit: int = 50) -> list[PendingClosing]:
        """Claim finished turns whose closing calls are still to go out and whose owner's
        lease expired (it died, or this process before a restart); each is ours once our
        compare-and-set on its owner wins."""
        now, until = self.replica.lease()
        async with self._db.sessions() as session:
            found = (
                await session.exec(
                    select(TurnRow)
                    .where(
                        col(TurnRow.closing_calls).is_not(None),
                        col(TurnRow.lease_expires_at) < now,
                    )
                    .order_by(col(TurnRow.lease_expires_at))
                    .limit(limit)
                )
            ).all()
        return [
            PendingClosing(
                row.turn_id, row.closing_calls, aware(row.ended_at) if row.ended_at else None
            )
            for row in found
            if row.closing_calls is not None
            and await self._take(row.turn_id, row.owner, now, until)
        ]

    async def request_interrupt(self, session_id: int) -> bool:
        """Ask the replica running the thread's turn to interrupt it (a newer message came
        here); True when such a turn runs elsewhere."""
        statement = (
            update(TurnRow)
            .where(
                col(TurnRow.session_id) == session_id,
                col(TurnRow.state) == TurnState.RUNNING.value,
                col(TurnRow.owner) != self.replica.id,
            )
            .values(interrupt_requested=True)
        )
        return await self._db.write(_waking(statement, Wake.INTERRUPT))

    async def running_elsewhere(self, session_key: str) -> RemoteTurn | None:
        """The thread's turn running on another replica, if any (a stop pressed here)."""
        found = await self._thread_turns(
            session_key,
            col(TurnRow.state) == TurnState.RUNNING.value,
            col(TurnRow.owner) != self.replica.id,
        )
        return found[0] if found else None

    async def request_stop(self, turn_id: str, user: str) -> bool:
        """Ask the replica running this turn to stop it for `user`; True while it still
        runs there."""
        statement = (
            update(TurnRow)
            .where(
                col(TurnRow.turn_id) == turn_id,
                col(TurnRow.state) == TurnState.RUNNING.value,
                col(TurnRow.owner) != self.replica.id,
            )
            .values(interrupt_requested=True, stopped_by=user)
        )
        return await self._db.write(_waking(statement, Wake.INTERRUPT))

    async def queued_in(self, session_key: str) -> list[RemoteTurn]:
        """The thread's turns accepted and not running yet, on any replica (this one
        included), oldest first: a stop pressed while no turn of the thread runs."""
        return await self._thread_turns(session_key, col(TurnRow.state) == TurnState.QUEUED.value)

    async def _thread_turns(
        self, session_key: str, *conditions: ColumnElement[bool]
    ) -> list[RemoteTurn]:
        async with self._db.sessions() as session:
            found = await session.exec(
                select(TurnRow, SessionRow)
                .join(SessionRow, col(SessionRow.id) == col(TurnRow.session_id))
                .where(col(SessionRow.session_key) == session_key, *conditions)
                .order_by(col(TurnRow.created_at))
            )
            return [_remote(row, thread) for row, thread in found.all()]

    async def stop_queued(self, turn_id: str, user: str) -> bool:
        """Stop a turn before it runs, for `user`: compare-and-set on its queued state, so
        it either never runs (its replica's claim finds it gone) or, already running, is
        left to `request_stop`. True when it was still queued."""
        statement = (
            update(TurnRow)
            .where(col(TurnRow.turn_id) == turn_id, col(TurnRow.state) == TurnState.QUEUED.value)
            .values(state=TurnState.INTERRUPTED.value, stopped_by=user, ended_at=utcnow())
        )
        return await self._db.write(counting(statement))

    async def renew(self) -> list[TurnInterrupt]:
        """The heartbeat: push back the lease of every turn this process really runs (or
        has queued), of its unhandled deliveries and of the approved changes it executes.
        Returns the interrupts other replicas asked for, and the turns this process runs
        that another replica took over meanwhile (its lease lapsed): those must stop."""
        now, until = self.replica.lease()
        me = self.replica.id
        held = sorted(self.replica.held.turns)
        turns = (
            update(TurnRow)
            .where(
                col(TurnRow.owner) == me,
                col(TurnRow.state).in_(LIVE),
                col(TurnRow.turn_id).in_(held),
            )
            .values(heartbeat_at=now, lease_expires_at=until)
        )
        # Finished turns whose closing calls are still to go out: a statement of its own,
        # so each finds its rows through its own index (an OR of the two scans the table).
        closings = (
            update(TurnRow)
            .where(col(TurnRow.owner) == me, col(TurnRow.closing_calls).is_not(None))
            .values(heartbeat_at=now, lease_expires_at=until)
        )
        deliveries = (
            update(InboundEventRow)
            .where(col(InboundEventRow.owner) == me, col(InboundEventRow.handled_at).is_(None))
            .values(lease_expires_at=until)
        )
        approvals = renewing_approvals(me, until, self.replica.held.approvals)

        def op(session: Session) -> None:
            if held:
                session.exec(turns)
            session.exec(closings)
            session.exec(deliveries)
            session.exec(approvals)

        await self._db.write(op)
        return await self.lost() + await self.interrupts()

    async def lost(self) -> list[TurnInterrupt]:
        """The turns run here that another replica owns now."""
        running = sorted(self.replica.held.running())
        if not running:
            return []
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(SessionRow.session_key, TurnRow.turn_id)
                .join(TurnRow, col(TurnRow.session_id) == col(SessionRow.id))
                .where(col(TurnRow.turn_id).in_(running), col(TurnRow.owner) != self.replica.id)
            )
            found = [TurnInterrupt(*row) for row in rows.all()]
        # Only those still run here: a turn that ended meanwhile is not interrupted.
        still = self.replica.held.running()
        return [turn for turn in found if turn.turn_id in still]

    async def interrupts(self) -> list[TurnInterrupt]:
        """The running turns here that another replica asked to interrupt (not those taken
        over from a dead one: the request was the dead one's, and the takeover ends them)."""
        running = sorted(self.replica.held.running())
        if not running:
            return []
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(SessionRow.session_key, TurnRow.turn_id, TurnRow.stopped_by)
                .join(TurnRow, col(TurnRow.session_id) == col(SessionRow.id))
                .where(
                    col(TurnRow.owner) == self.replica.id,
                    col(TurnRow.state) == TurnState.RUNNING.value,
                    col(TurnRow.interrupt_requested),
                    col(TurnRow.turn_id).in_(running),
                )
            )
            return [TurnInterrupt(*row) for row in rows.all()]

    async def take_orphans(self, limit: int = 50) -> list[OrphanTurn]:
        """Claim live turns whose lease expired (their replica died); each is ours once our
        compare-and-set on its owner wins."""
        now, until = self.replica.lease()
        async with self._db.sessions() as session:
            found = (
                await session.exec(
                    select(TurnRow, SessionRow)
                    .join(SessionRow, col(SessionRow.id) == col(TurnRow.session_id))
                    .where(
                        col(TurnRow.state).in_(LIVE),
                        col(TurnRow.lease_expires_at) < now,
                        # Never this process's own live work, whatever its lease says.
                        col(TurnRow.turn_id).not_in(sorted(self.replica.held.turns)),
                    )
                    .order_by(col(TurnRow.created_at))
                    .limit(limit)
                )
            ).all()
        taken = []
        for row, thread in found:
            if row.turn_id in self.replica.held.turns:
                continue  # claimed here since the read
            if await self._take(row.turn_id, row.owner, now, until):
                self.replica.held.turns[row.turn_id] = thread.session_key
                self.replica.held.taken_over.add(row.turn_id)
                answered = await self._answered(row.turn_id)
                taken.append(
                    OrphanTurn(
                        row.turn_id,
                        row.session_id,
                        TurnState(row.state),
                        row.asker,
                        thread.team_id,
                        thread.channel_id,
                        thread.thread_ts,
                        tuple(json.loads(row.open_messages)),
                        row.stopped_by,
                        answered,
                        released=row.owner == self.replica.id,
                    )
                )
        return taken

    async def _answered(self, turn_id: str) -> bool:
        """The turn's last stored message is a complete answer (no tool calls): it died
        after its answer was committed, before its end was."""
        async with self._db.sessions() as session:
            last = (
                await session.exec(
                    select(MessageRow)
                    .where(col(MessageRow.turn_id) == turn_id)
                    .order_by(col(MessageRow.id).desc())
                    .limit(1)
                )
            ).first()
        return (
            last is not None
            and last.role == Role.ASSISTANT.value
            and last.complete
            and last.tool_calls_json is None
        )

    async def _take(self, turn_id: str, owner: str, now: datetime, until: datetime) -> bool:
        statement = (
            update(TurnRow)
            .where(
                col(TurnRow.turn_id) == turn_id,
                col(TurnRow.owner) == owner,
                col(TurnRow.lease_expires_at) < now,
            )
            .values(owner=self.replica.id, heartbeat_at=now, lease_expires_at=until)
        )
        return await self._db.write(counting(statement))

    async def admission(self, turn_id: str) -> Admission | None:
        """What the turn was admitted under; None: no such turn, or one stored before turns
        kept it."""
        async with self._db.sessions() as session:
            row = await session.get(TurnRow, turn_id)
        if row is None or row.role is None or row.cluster is None:
            return None
        return Admission(row.role, row.cluster, row.namespace, bool(row.external))


def _admitted(admission: Admission | None) -> dict[str, Any]:
    """A turn row's admission columns."""
    if admission is None:
        return {}
    return {
        "role": admission.role,
        "cluster": admission.cluster,
        "namespace": admission.namespace,
        "external": admission.external,
    }


def renewing_approvals(replica_id: str, until: datetime, held: Collection[str]) -> Update:
    """An approved change executing on this replica (no outcome yet) is not another's to
    reconcile: its lease is pushed back with the replica's others (only while this process
    really executes it: `held`)."""
    return (
        update(ApprovalRow)
        .where(
            col(ApprovalRow.id).in_(sorted(held)),
            col(ApprovalRow.owner) == replica_id,
            col(ApprovalRow.status) == ApprovalState.APPROVED.value,
            col(ApprovalRow.outcome).is_(None),
        )
        .values(lease_expires_at=until)
    )


def _queued_for(row: TurnRow, replica_id: str) -> bool:
    return row.state == TurnState.QUEUED.value and row.owner == replica_id


def _remote(row: TurnRow, thread: SessionRow) -> RemoteTurn:
    return RemoteTurn(
        row.turn_id,
        thread.session_key,
        row.asker,
        thread.role,
        thread.team_id,
        thread.channel_id,
        thread.thread_ts,
    )


def _waking(statement: Update, wake: Wake) -> Op[bool]:
    """`counting`, and when the statement changed a row, a wake-up for the other replicas
    (sent as the write commits)."""

    def op(session: Session) -> bool:
        changed = counting(statement)(session)
        if changed:
            notify(session, wake)
        return changed

    return op
