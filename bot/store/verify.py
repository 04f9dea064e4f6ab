"""Verification watches in the database (`bot/approvals/verify.py`'s `WatchStore` port).

A watch is leased like a turn: its `owner` renews `lease_expires_at` at every poll; one
whose lease expired (its replica died or stopped) is claimed by compare-and-set, so exactly
one replica resumes it. Ending it takes three steps, each by its owner: the verdict is
stored first (watching → concluded, a compare-and-set: only the winner says it), then
said (the message's ts stored), then the watch is done. A replica that dies between them
leaves a concluded watch: whoever takes it over says the stored verdict, unless its ts
shows it was said already, so the verdict survives kill -9 and is said once. A verdict the
thread refuses for good (its channel archived, say) ends the watch `undeliverable` instead,
with the surface's reason: it is never tried again."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.tables import VerifyWatchRow, aware
from bot.store.turns import Replica


class WatchState(StrEnum):
    WATCHING = "watching"
    CONCLUDED = "concluded"  # the verdict stored, maybe not said yet
    DONE = "done"
    # Concluded, and the thread refused the verdict for good: ended unsaid.
    UNDELIVERABLE = "undeliverable"


OPEN = (WatchState.WATCHING, WatchState.CONCLUDED)


@dataclass(frozen=True)
class LeftWatch:
    """A watch no live replica follows: still watching (verdict None), or concluded with a
    verdict that may not have been said (said_ts None) when its replica died."""

    approval_id: str
    deadline: datetime
    verdict: str | None = None
    said_ts: str | None = None


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
            "state": WatchState.WATCHING,
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

    async def conclude(self, approval_id: str, verdict: str) -> bool:
        """watching → concluded with the verdict to say, by its owner only; True for the
        one caller that says it."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id))
            .values(state=WatchState.CONCLUDED, verdict=verdict)
        )
        return await self._db.write(counting(statement))

    async def said(self, approval_id: str, ts: str | None) -> None:
        """The concluded verdict is in the thread (its ts, when the surface gave one)."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id, WatchState.CONCLUDED))
            .values(verdict_ts=ts or "")
        )
        await self._db.write(counting(statement))

    async def finish(self, approval_id: str) -> bool:
        """concluded → done, by its owner only."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id, WatchState.CONCLUDED))
            .values(state=WatchState.DONE, lease_expires_at=None)
        )
        return await self._db.write(counting(statement))

    async def undeliverable(self, approval_id: str, error: str) -> bool:
        """concluded → undeliverable, by its owner only: the thread refused the verdict for
        good (`error`, the surface's reason), so no replica tries to say it again."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id, WatchState.CONCLUDED))
            .values(state=WatchState.UNDELIVERABLE, verdict_error=error, lease_expires_at=None)
        )
        return await self._db.write(counting(statement))

    async def release(self, approval_id: str) -> None:
        """This process stops following it (shutdown): its lease ends now, so the next
        start, or another replica, resumes it without waiting for the lease to lapse."""
        statement = (
            update(VerifyWatchRow)
            .where(*self._mine(approval_id, *OPEN))
            .values(lease_expires_at=None)
        )
        await self._db.write(counting(statement))

    async def orphans(self) -> list[LeftWatch]:
        """Watches no live replica follows (lease expired), watching or concluded."""
        async with self._db.sessions() as session:
            rows = await session.exec(select(VerifyWatchRow).where(*self._lapsed()))
            found = [
                LeftWatch(row.approval_id, aware(row.deadline), row.verdict, row.verdict_ts)
                for row in rows.all()
            ]
        return [watch for watch in found if watch.approval_id not in self.running]

    async def claim(self, approval_id: str) -> bool:
        """Take an orphaned watch over; True for exactly one replica."""
        if approval_id in self.running:
            return False
        now, until = self._replica.lease()
        statement = (
            update(VerifyWatchRow)
            .where(col(VerifyWatchRow.approval_id) == approval_id, *self._lapsed(now))
            .values(owner=self._replica.id, lease_expires_at=until)
        )
        return await self._db.write(counting(statement))

    async def state(self, approval_id: str) -> tuple[str, str | None] | None:
        """(state, verdict) of a watch, for the tests and `kelpie` diagnostics."""
        async with self._db.sessions() as session:
            row = await session.get(VerifyWatchRow, approval_id)
            return (row.state, row.verdict) if row is not None else None

    def _mine(self, approval_id: str, *states: str) -> list[Any]:
        return [
            col(VerifyWatchRow.approval_id) == approval_id,
            col(VerifyWatchRow.state).in_(states or (WatchState.WATCHING,)),
            col(VerifyWatchRow.owner) == self._replica.id,
        ]

    def _lapsed(self, now: datetime | None = None) -> list[Any]:
        """Open, and its lease expired (or handed back)."""
        return [
            col(VerifyWatchRow.state).in_(OPEN),
            or_(
                col(VerifyWatchRow.lease_expires_at).is_(None),
                col(VerifyWatchRow.lease_expires_at) <= (now or self._replica.clock()),
            ),
        ]
