"""The payload log: the last masked request sent to the model, per session.

Implements the request gateway's `PayloadSink` port and answers `/kelpie payload`.

A request's payload grows with the conversation, so serialising and storing it in every
round made a turn's cost grow with the square of its length. `keep` only remembers the
payload (the hot path does no JSON and no database write); a task stores the latest one
per session `delay_s` later, all waiting sessions in one write through the store's writer,
so a turn's rounds coalesce into one or two writes; `drain` stores what is still waiting at
shutdown. `last_for_session` answers from memory first, so a request is visible to
`/kelpie payload` as soon as it is sent. The JSON is stored compact and indented only when
someone asks for it.
"""

from __future__ import annotations

import asyncio
import json
import logging

from sqlalchemy import delete
from sqlmodel import Session, col

from bot.model.outbound import SentPayload
from bot.store.db import Database, inserting
from bot.store.tables import PayloadRow, utcnow

log = logging.getLogger(__name__)

WRITE_DELAY_S = 2.0


class PayloadLog:
    def __init__(self, db: Database, *, delay_s: float = WRITE_DELAY_S) -> None:
        self._db = db
        self._delay_s = delay_s
        self._waiting: dict[int, SentPayload] = {}
        self._writer: asyncio.Task[None] | None = None

    async def keep(self, payload: SentPayload) -> None:
        """Remember the session's last payload; requests without a session tag are skipped."""
        tag = payload.tag
        if tag is None:
            return
        self._waiting[tag.session_id] = payload
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_soon())

    async def last_for_session(self, session_id: int) -> str | None:
        """The JSON text of the last (masked) payload sent for the session, or None."""
        waiting = self._waiting.get(session_id)
        if waiting is not None:
            return waiting.to_json()
        async with self._db.sessions() as session:
            row = await session.get(PayloadRow, session_id)
            if row is None:
                return None
            return json.dumps(json.loads(row.payload_json), indent=2, ensure_ascii=False)

    async def drain(self) -> None:
        """Store every payload still waiting (at shutdown)."""
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        await self._write_waiting()

    async def _write_soon(self) -> None:
        while self._waiting:  # payloads kept during a write wait for the next pass
            await asyncio.sleep(self._delay_s)
            await self._write_waiting()

    async def _write_waiting(self) -> None:
        taken = dict(self._waiting)
        if not taken:
            return
        rows = [_row(session_id, payload) for session_id, payload in taken.items()]
        replace = delete(PayloadRow).where(col(PayloadRow.session_id).in_(list(taken)))

        def op(session: Session) -> None:
            session.exec(replace)
            inserting(*rows)(session)

        try:
            await self._db.write(op)
        except Exception:  # the payload log is a record, not a reason to fail anything
            log.exception("could not store the payloads of %d session(s)", len(taken))
        for session_id, payload in taken.items():
            # A newer payload that arrived meanwhile stays waiting for the next pass.
            if self._waiting.get(session_id) is payload:
                del self._waiting[session_id]


def _row(session_id: int, payload: SentPayload) -> PayloadRow:
    tag = payload.tag
    assert tag is not None  # only tagged payloads are kept
    return PayloadRow(
        session_id=session_id,
        turn_id=tag.turn_id,
        round_index=tag.round_index,
        model=payload.model,
        payload_json=payload.to_json(indent=None),
        masked_count=len(payload.maskings),
        created_at=utcnow(),
    )
