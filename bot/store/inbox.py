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

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Database, counting, executing, insert_ignoring_duplicates
from bot.store.tables import InboundEventRow, utcnow
from bot.store.turns import Replica
from bot.values import OrphanDelivery

# Taken over when their replica died before handling them: what a listener turns into a
# turn, a click (Approve, Reject, Stop) and a slash command. Slack never sends them again.
TAKEN_OVER = frozenset({"app_mention", "message", "block_actions", "command"})


class Inbox:
    def __init__(self, db: Database, replica: Replica) -> None:
        self._db = db
        self._replica = replica

    async def record(self, key: str, kind: str, body_json: str) -> bool:
        """Durably record a delivery; True the first time its key is seen, False for a
        repeat. Raises when the store cannot take it (then it must not be acknowledged)."""

        now, until = self._replica.lease()
        values = {"key": key, "kind": kind, "body_json": body_json, "received_at": now}
        if kind in TAKEN_OVER:
            values |= {"owner": self._replica.id, "lease_expires_at": until}
        else:
            values["handled_at"] = now

        async def op(session: AsyncSession) -> bool:
            result = await session.exec(
                insert_ignoring_duplicates(session, InboundEventRow).values(values)
            )
            return bool(result.rowcount)

        # Ahead of other turns' queued work: Slack waits for the acknowledgement.
        return await self._db.write_ahead(op)

    async def handled(self, key: str) -> None:
        """Its listener is done with it: nobody takes it over any more."""
        statement = (
            update(InboundEventRow)
            .where(col(InboundEventRow.key) == key, col(InboundEventRow.handled_at).is_(None))
            .values(handled_at=utcnow())
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
