"""The inbox: every request Slack sends is recorded (key and content) before it is
acknowledged, and its unique key makes a retried delivery, on any replica, a no-op."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Database, insert_ignoring_duplicates
from bot.store.tables import InboundEventRow, utcnow


class Inbox:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, key: str, kind: str, body_json: str) -> bool:
        """Durably record a delivery; True the first time its key is seen, False for a
        repeat. Raises when the store cannot take it (then it must not be acknowledged)."""

        async def op(session: AsyncSession) -> bool:
            result = await session.exec(
                insert_ignoring_duplicates(session, InboundEventRow).values(
                    key=key, kind=kind, body_json=body_json, received_at=utcnow()
                )
            )
            return bool(result.rowcount)

        return await self._db.write(op)

    async def claim(self, key: str) -> bool:
        """Record a bare key (e.g. a request signature, against replays); True the first time."""
        return await self.record(key, "key", "")

    async def forget_before(self, cutoff: datetime) -> int:
        """Drop deliveries older than `cutoff`: Slack retries within minutes, so a day of
        memory is plenty, and the table does not grow forever."""

        async def op(session: AsyncSession) -> int:
            result = await session.exec(
                delete(InboundEventRow).where(col(InboundEventRow.received_at) < cutoff)
            )
            return int(result.rowcount or 0)

        return await self._db.write(op)
