"""The inbox: every request Slack sends is recorded (key and content) before it is
acknowledged, and its unique key makes a retried delivery, on any replica, a no-op.

A message, mention, click or slash command is held by the replica that acknowledged it (a
lease its heartbeat renews) until its listener has handled it; if that replica dies first,
another one takes the delivery over and handles it (`take_orphans`), so an acknowledged
request is never lost. Its effects are claimed in the store whoever runs it (a turn is
accepted once, an approval decided once by compare-and-set), so handling it again after a
crash does nothing twice. Handled deliveries are forgotten by the retention pass
(`retention.py`) a day later.
"""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy import update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, executing, insert_ignoring_duplicates
from bot.store.tables import DROPPED_WHEN_HANDLED, InboundEventRow, utcnow
from bot.store.turns import Replica
from bot.values import OrphanDelivery

# Taken over when their replica died before handling them: what a listener turns into a
# turn, a click (Approve, Reject, Stop), a slash command and an alert notification. Their
# senders never send them again.
TAKEN_OVER = frozenset({"app_mention", "message", "block_actions", "command", "alert"})


# Columns of a record, each given in every row: one multi-row INSERT needs the same ones.
_COLUMNS = ("key", "kind", "body_json", "received_at", "owner", "lease_expires_at", "handled_at")
# Rows per INSERT: far below SQLite's bound-parameter limit (7 columns each).
_ROWS_PER_INSERT = 200


class _Group:
    """Records that arrived together: stored by one multi-row INSERT in one transaction.
    Open (taking more records) until the writer starts applying it, on its own thread on
    SQLite: the lock makes a record either join the rows it inserts or find it closed."""

    def __init__(self) -> None:
        self._rows: list[dict[str, object]] = []
        self._keys: set[object] = set()
        self._open = True
        self._lock = threading.Lock()

    def join(self, row: dict[str, object]) -> bool | None:
        """Add `row` while the group is open (None once closed); True when its key is the
        first of that key in the group."""
        with self._lock:
            if not self._open:
                return None
            first = row["key"] not in self._keys
            self._keys.add(row["key"])
            self._rows.append(row)
            return first

    def store(self, session: Session) -> set[str]:
        """The op: insert every row, ignoring keys already stored; returns the keys new."""
        with self._lock:
            self._open = False
        new: set[str] = set()
        for start in range(0, len(self._rows), _ROWS_PER_INSERT):
            chunk = self._rows[start : start + _ROWS_PER_INSERT]
            statement = (
                insert_ignoring_duplicates(session, InboundEventRow)
                .values(chunk)
                .returning(col(InboundEventRow.key))
            )
            new.update(session.connection().execute(statement).scalars())
        return new


class Inbox:
    def __init__(self, db: Database, replica: Replica) -> None:
        self._db = db
        self._replica = replica
        # The group taking records now, and its write (the keys it stored new, once committed).
        self._latest: tuple[_Group, asyncio.Future[set[str]]] | None = None

    async def record(self, key: str, kind: str, body_json: str) -> bool:
        """Durably record a delivery; True the first time its key is seen, False for a
        repeat. Raises when the store cannot take it (then it must not be acknowledged)."""
        now, until = self._replica.lease()
        row: dict[str, object] = dict.fromkeys(_COLUMNS)
        row |= {"key": key, "kind": kind, "body_json": body_json, "received_at": now}
        if kind in TAKEN_OVER:
            row |= {"owner": self._replica.id, "lease_expires_at": until}
        else:
            row["handled_at"] = now
        latest = self._latest
        # A group whose write is over (one that failed before its op ran is still open)
        # takes no more records.
        first = latest[0].join(row) if latest is not None and not latest[1].done() else None
        if latest is None or first is None:
            # A new group, handed to the writer ahead of other turns' queued work: Slack
            # waits for the acknowledgement.
            group = _Group()
            first = group.join(row)
            latest = (group, asyncio.ensure_future(self._db.write_ahead(group.store)))
            self._latest = latest
        stored = latest[1]
        # Returns once the whole group is committed, this record with it: a burst of
        # deliveries costs one statement and one commit, not three hops each.
        return bool(first) and key in await asyncio.shield(stored)

    async def handled(self, key: str) -> None:
        """Its listener is done with it: nobody takes it over any more, and nothing of its
        content is kept (only its key, against a repeat, until the retention pass)."""
        statement = (
            update(InboundEventRow)
            .where(col(InboundEventRow.key) == key, col(InboundEventRow.handled_at).is_(None))
            .values(DROPPED_WHEN_HANDLED | {"handled_at": utcnow()})
        )
        await self._db.write(executing(statement))

    async def take_orphans(self, limit: int = 50) -> list[OrphanDelivery]:
        """Claim unhandled deliveries whose replica died (lease expired), oldest first;
        each is ours once the compare-and-set on its owner wins."""
        now, until = self._replica.lease()
        async with self._db.sessions() as session:
            found = (
                await session.exec(
                    select(InboundEventRow)
                    .where(
                        col(InboundEventRow.handled_at).is_(None),
                        col(InboundEventRow.lease_expires_at) < now,
                    )
                    .order_by(col(InboundEventRow.received_at))
                    .limit(limit)
                )
            ).all()
        taken = []
        for row in found:
            statement = (
                update(InboundEventRow)
                .where(
                    col(InboundEventRow.key) == row.key,
                    col(InboundEventRow.handled_at).is_(None),
                    col(InboundEventRow.lease_expires_at) < now,
                )
                .values(owner=self._replica.id, lease_expires_at=until)
            )
            if await self._db.write(counting(statement)):
                taken.append(OrphanDelivery(row.key, row.kind, row.body_json))
        return taken

    async def claim(self, key: str) -> bool:
        """Record a bare key (e.g. a request signature, against replays); True the first time."""
        return await self.record(key, "key", "")
