"""Alert groups in the store: the unique key that makes one group one thread across
replicas, the thread's state, and the investigations each channel had in the last hour."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, text, update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, executing, insert_ignoring_duplicates
from bot.store.tables import AlertGroupRow

RESOLVED = "resolved"  # a group's status once all its alerts resolved (else "firing")


class AlertGroups:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def find(self, key: str) -> AlertGroupRow | None:
        async with self._db.sessions() as session:
            return await session.get(AlertGroupRow, key)

    async def claim(self, row: AlertGroupRow) -> bool:
        """Insert the group; True for the one replica (or delivery) that inserted it."""
        values = row.model_dump()

        def op(session: Session) -> bool:
            statement = insert_ignoring_duplicates(session, AlertGroupRow).values(values)
            return bool(session.connection().execute(statement).rowcount)

        return await self._db.write(op)

    async def posted(self, key: str, thread_ts: str) -> bool:
        """The header is in Slack; False when another delivery recorded its own first."""
        statement = (
            update(AlertGroupRow)
            .where(col(AlertGroupRow.key) == key, col(AlertGroupRow.thread_ts).is_(None))
            .values(thread_ts=thread_ts)
        )
        return await self._db.write(counting(statement))

    async def save(self, key: str, **values: object) -> None:
        statement = update(AlertGroupRow).where(col(AlertGroupRow.key) == key).values(values)
        await self._db.write(executing(statement))

    async def take_investigation(self, key: str, channel: str, now: datetime, limit: int) -> bool:
        """Count this group's investigation against its channel's hour, when the channel has
        had fewer than `limit` in the hour before `now` (checked and marked in one write)."""
        since = now - timedelta(hours=1)

        def op(session: Session) -> bool:
            if session.connection().dialect.name == "postgresql":
                # Replicas count one channel in turn: the count and the mark are one step.
                session.connection().execute(
                    text("SELECT pg_advisory_xact_lock(hashtext(:channel))"), {"channel": channel}
                )
            count = session.exec(
                select(func.count())
                .select_from(AlertGroupRow)
                .where(
                    col(AlertGroupRow.channel_id) == channel,
                    col(AlertGroupRow.investigated_at) >= since,
                )
            ).one()
            if count >= limit:
                return False
            statement = (
                update(AlertGroupRow)
                .where(col(AlertGroupRow.key) == key)
                .values(investigated_at=now)
            )
            session.connection().execute(statement)
            return True

        return await self._db.write(op)
