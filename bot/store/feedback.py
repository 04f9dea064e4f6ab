"""Feedback on answers in the store: a click recorded once per person per answer, a 👎's
reason added later, and what `kelpie eval export` reads of a thread (its session, its
conversation, its feedback). Does not own masking of the reason (the caller masks) or what
Slack shows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.tables import FeedbackFixtureRow, FeedbackRow, MessageRow, SessionRow
from bot.values import Feedback, FeedbackValue


@dataclass(frozen=True)
class ThreadRecord:
    """A thread as stored: its session, its conversation in order, its feedback."""

    session: SessionRow
    messages: list[MessageRow]
    feedback: list[FeedbackRow]
    fixtures: list[FeedbackFixtureRow]


class FeedbackRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, feedback: Feedback, at: datetime) -> bool:
        """Store the click; False when this person already rated this answer."""
        values = {
            "team_id": feedback.team_id,
            "channel_id": feedback.channel_id,
            "thread_ts": feedback.thread_ts,
            "turn_id": feedback.turn_id,
            "message_ts": feedback.message_ts,
            "slack_user": feedback.user,
            "value": str(feedback.value),
            "evidence_json": json.dumps(list(feedback.evidence)),
            "created_at": at,
        }

        def op(session: Session) -> bool:
            statement = insert_ignoring_duplicates(session, FeedbackRow).values(values)
            return bool(session.connection().execute(statement).rowcount)

        return await self._db.write(op)

    async def add_reason(self, turn_id: str, user: str, reason: str, at: datetime) -> bool:
        """The (masked) reason of this person's 👎 on this answer; False when there is none."""
        statement = (
            update(FeedbackRow)
            .where(
                col(FeedbackRow.turn_id) == turn_id,
                col(FeedbackRow.slack_user) == user,
                col(FeedbackRow.value) == str(FeedbackValue.NEGATIVE),
            )
            .values(reason=reason, reason_at=at)
        )
        return await self._db.write(counting(statement))

    async def find(self, turn_id: str, user: str) -> FeedbackRow | None:
        async with self._db.sessions() as session:
            query = select(FeedbackRow).where(
                FeedbackRow.turn_id == turn_id, FeedbackRow.slack_user == user
            )
            return (await session.exec(query)).first()

    async def thread(self, channel_id: str, thread_ts: str) -> ThreadRecord | None:
        """The stored thread at (channel, thread_ts), or None when kelpie has no session there."""
        async with self._db.sessions() as session:
            found = await session.exec(
                select(SessionRow).where(
                    SessionRow.channel_id == channel_id, SessionRow.thread_ts == thread_ts
                )
            )
            row = found.first()
            if row is None:
                return None
            messages = await session.exec(
                select(MessageRow)
                .where(MessageRow.session_id == row.id)
                .order_by(col(MessageRow.id))
            )
            feedback = await session.exec(
                select(FeedbackRow)
                .where(FeedbackRow.channel_id == channel_id, FeedbackRow.thread_ts == thread_ts)
                .order_by(col(FeedbackRow.id))
            )
            fixtures = await session.exec(
                select(FeedbackFixtureRow)
                .where(
                    FeedbackFixtureRow.channel_id == channel_id,
                    FeedbackFixtureRow.thread_ts == thread_ts,
                )
                .order_by(col(FeedbackFixtureRow.captured_at))
            )
            return ThreadRecord(
                row, list(messages.all()), list(feedback.all()), list(fixtures.all())
            )

    async def save_fixture(self, row: FeedbackFixtureRow) -> bool:
        """Keep a 👎'd turn's captured reads; False when one was kept for it already."""
        values = row.model_dump()

        def op(session: Session) -> bool:
            statement = insert_ignoring_duplicates(session, FeedbackFixtureRow).values(values)
            return bool(session.connection().execute(statement).rowcount)

        return await self._db.write(op)
