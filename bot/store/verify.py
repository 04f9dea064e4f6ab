"""Verification watches in the database (`bot/approvals/verify.py`'s `WatchStore` port).

A watch is leased like a turn: its `owner` renews `lease_expires_at` at every poll; one
whose lease expired (its replica died or stopped) is claimed by compare-and-set, so exactly
one replica resumes it. Ending it is a compare-and-set too (watching → done by its owner):
only the winner says the verdict, so the thread gets one message."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.tables import VerifyWatchRow, aware
from bot.store.turns import Replica

WATCHING = "watching"
DONE = "done"


class VerifyWatchRepository:
    def __init__(self, db: Database, replica: Replica) -> None:
        self._db = db
        self._replica = replica
        # The watches this process runs now: never claimed here as orphans.
        self.running: set[str] = set()

    async def create(self, approval_id: str, deadline: datetime) -> bool:
        """Stored (and leased here) before the watch starts; False when it already was."""
        now, until = self._replica.lease()
        values = {
            "approval_id": approval_id,
            "state": WATCHING,
            "deadline": deadline,
            "owner": self._replica.id,
            "lease_expires_at": until,
            "created_at": now,
        }

        def op(session: Session) -> bool:
            statement = insert_ignoring_duplicates(session, VerifyWatchRow).values(**values)
            return bool(session.exec(statement).rowcount)

        return await self._db.write(op)

    async def renew(self, approval_id: str) -> bool:
        """Push this replica's lease back; False when the watch is not its own any more."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id))
            .values(lease_expires_at=self._replica.lease()[1])
        )
        return await self._db.write(counting(statement))

    async def finish(self, approval_id: str, verdict: str) -> bool:
        """watching → done, by its owner only; True for the one caller that says it."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id))
            .values(state=DONE, verdict=verdict, lease_expires_at=None)
        )
        return await self._db.write(counting(statement))

    async def release(self, approval_id: str) -> None:
        """This process stops following it (shutdown): its lease ends now, so the next
        start, or another replica, resumes it without waiting for the lease to lapse."""
        statement = (
            update(VerifyWatchRow).where(*self._mine(approval_id)).values(lease_expires_at=None)
        )
        await self._db.write(counting(statement))

    async def orphans(self) -> list[tuple[str, datetime]]:
        """Watches no live replica follows (lease expired): (approval id, deadline)."""
        now = self._replica.clock()
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(VerifyWatchRow.approval_id, VerifyWatchRow.deadline).where(
                    col(VerifyWatchRow.state) == WATCHING,
                    or_(
                        col(VerifyWatchRow.lease_expires_at).is_(None),
                        col(VerifyWatchRow.lease_expires_at) <= now,
                    ),
                )
            )
            found = [(row[0], aware(row[1])) for row in rows.all()]
        return [(key, deadline) for key, deadline in found if key not in self.running]

    async def claim(self, approval_id: str) -> bool:
        """Take an orphaned watch over; True for exactly one replica."""
        if approval_id in self.running:
            return False
        now, until = self._replica.lease()
        statement = (
            update(VerifyWatchRow)
            .where(
                col(VerifyWatchRow.approval_id) == approval_id,
                col(VerifyWatchRow.state) == WATCHING,
                or_(
                    col(VerifyWatchRow.lease_expires_at).is_(None),
                    col(VerifyWatchRow.lease_expires_at) <= now,
                ),
            )
            .values(owner=self._replica.id, lease_expires_at=until)
        )
        return await self._db.write(counting(statement))

    async def state(self, approval_id: str) -> tuple[str, str | None] | None:
        """(state, verdict) of a watch, for the tests and `kelpie` diagnostics."""
        async with self._db.sessions() as session:
            row = await session.get(VerifyWatchRow, approval_id)
            return (row.state, row.verdict) if row is not None else None

    def _mine(self, approval_id: str) -> list[Any]:
        return [
            col(VerifyWatchRow.approval_id) == approval_id,
            col(VerifyWatchRow.state) == WATCHING,
            col(VerifyWatchRow.owner) == self._replica.id,
        ]
