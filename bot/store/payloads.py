"""The payload log: the last masked request sent to the model, per session.

Implements the request gateway's `PayloadSink` port and answers `/kelpie payload`.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.model.outbound import SentPayload
from bot.store.db import Database, inserting
from bot.store.tables import PayloadRow, utcnow


class PayloadLog:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def keep(self, payload: SentPayload) -> None:
        """Replace the session's last payload; requests without a session tag are skipped."""
        tag = payload.tag
        if tag is None:
            return
        row = PayloadRow(
            session_id=tag.session_id,
            turn_id=tag.turn_id,
            round_index=tag.round_index,
            model=payload.model,
            payload_json=payload.to_json(),
            masked_count=len(payload.maskings),
            created_at=utcnow(),
        )
        replace = delete(PayloadRow).where(col(PayloadRow.session_id) == tag.session_id)

        async def op(session: AsyncSession) -> None:
            await session.exec(replace)
            await inserting(row)(session)

        # A snapshot for `/kelpie payload`, not a hot-path commit: it rides with the round's.
        self._db.defer(op)

    async def last_for_session(self, session_id: int) -> str | None:
        """The JSON text of the last (masked) payload sent for the session, or None."""
        async with self._db.sessions() as session:
            row = await session.get(PayloadRow, session_id)
            return row.payload_json if row is not None else None
