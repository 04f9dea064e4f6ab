"""Queries about a session's conversation that the history window alone cannot answer."""

from __future__ import annotations

from sqlmodel import col, select

from bot.store.db import Database
from bot.store.tables import MessageRow
from bot.values import Message, Role


class SessionOpenings:
    """The first user message of a session: history trimming always keeps it."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def first_user_message(self, session_id: int) -> Message | None:
        async with self._db.sessions() as session:
            row = (
                await session.exec(
                    select(MessageRow)
                    .where(
                        MessageRow.session_id == session_id,
                        MessageRow.role == str(Role.USER),
                        col(MessageRow.slack_user).is_not(None),
                        col(MessageRow.complete),
                    )
                    .order_by(col(MessageRow.id))
                    .limit(1)
                )
            ).first()
        if row is None:
            return None
        return Message(
            Role.USER,
            row.content,
            slack_user=row.slack_user,
            slack_ts=row.slack_ts,
        )
