"""Repositories: the only code that writes SQL. Reads open a short session; writes are ops
handed to the one writer (`Database.write` awaits the commit, `Database.defer` does not)."""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlmodel import Session, col, func, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.model.outbound import MaskMemo, mask_text, storable_thinking
from bot.model.types import Usage
from bot.store.chain import appending
from bot.store.db import Database, insert_ignoring_duplicates, inserting_values
from bot.store.tables import (
    ApprovalRow,
    MessageRow,
    SessionRow,
    ToolAuditRow,
    UsageRow,
    utcnow,
)
from bot.store.writer import Op
from bot.values import (
    AuditEntry,
    Message,
    Role,
    SessionInfo,
    thinking_from_json,
    thinking_to_json,
    tool_calls_from_json,
    tool_calls_to_json,
)


def _session_info(row: SessionRow, *, created: bool = False) -> SessionInfo:
    assert row.id is not None
    return SessionInfo(
        id=row.id,
        session_key=row.session_key,
        team_id=row.team_id,
        channel_id=row.channel_id,
        thread_ts=row.thread_ts,
        is_dm=row.is_dm,
        role=row.role,
        cluster=row.cluster,
        namespace=row.namespace,
        started_by=row.started_by,
        created=created,
    )


class SessionRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def find(self, session_key: str) -> SessionInfo | None:
        async with self._db.sessions() as session:
            row = (
                await session.exec(select(SessionRow).where(SessionRow.session_key == session_key))
            ).first()
            return _session_info(row) if row else None

    async def latest_in_channel(self, channel_id: str) -> SessionInfo | None:
        async with self._db.sessions() as session:
            row = (
                await session.exec(
                    select(SessionRow)
                    .where(SessionRow.channel_id == channel_id)
                    .order_by(col(SessionRow.id).desc())
                    .limit(1)
                )
            ).first()
            return _session_info(row) if row else None

    async def get(self, session_id: int) -> SessionInfo | None:
        async with self._db.sessions() as session:
            row = await session.get(SessionRow, session_id)
            return _session_info(row) if row else None

    async def activity_ts(self, session_id: int) -> list[str]:
        """The Slack `ts` of what the thread has seen: its people's messages (each stored
        as its turn was accepted) and its approval cards, against which a replayed request
        finds out whether it came late."""
        said = select(MessageRow.slack_ts).where(
            MessageRow.session_id == session_id, col(MessageRow.slack_ts).is_not(None)
        )
        cards = select(ApprovalRow.card_ts).where(
            ApprovalRow.session_id == session_id, col(ApprovalRow.card_ts).is_not(None)
        )
        async with self._db.sessions() as session:
            found = [*(await session.exec(said)).all(), *(await session.exec(cards)).all()]
        return [str(ts) for ts in found]

    async def get_or_create(self, template: SessionInfo) -> SessionInfo:
        """The existing session for the key, or a new row from `template` (its id ignored)."""
        existing = await self.find(template.session_key)
        if existing is not None:
            return existing
        return await self._db.write(creating_session(template))


def creating_session(template: SessionInfo) -> Op[SessionInfo]:
    """An op returning the thread's session: the existing row for the key, or a new one from
    `template` (its id ignored)."""

    def op(session: Session) -> SessionInfo:
        # Two events (or replicas) may race to create the thread's session: the first wins.
        inserted = session.exec(
            insert_ignoring_duplicates(session, SessionRow).values(
                session_key=template.session_key,
                team_id=template.team_id,
                channel_id=template.channel_id,
                thread_ts=template.thread_ts,
                is_dm=template.is_dm,
                role=template.role,
                cluster=template.cluster,
                namespace=template.namespace,
                started_by=template.started_by,
                created_at=utcnow(),
            )
        )
        row = (
            session.exec(select(SessionRow).where(SessionRow.session_key == template.session_key))
        ).one()
        return _session_info(row, created=bool(inserted.rowcount))

    return op


class MessageRepository:
    """Implements the agent's ConversationStore port. With the model gateway's `memo`, a
    text the request masked already (a round's tool results) is not masked again here."""

    def __init__(self, db: Database, memo: MaskMemo | None = None) -> None:
        self._db = db
        self._mask = memo.keep if memo is not None else _masked

    async def append(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        if messages:
            await self._db.write(adding_messages(session_id, turn_id, messages, self._mask))

    def stage(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        """Queue messages to be committed with the turn's next durable write (a round's tool
        results ride along with the next round's commit). Order is kept."""
        if messages:
            self._db.defer(adding_messages(session_id, turn_id, messages, self._mask))

    async def history(
        self, session_id: int, limit: int, before_turn: str | None = None
    ) -> list[Message]:
        async with self._db.sessions() as session:
            starts = await turn_starts(session, session_id)
            query = select(MessageRow).where(
                MessageRow.session_id == session_id, col(MessageRow.complete)
            )
            earlier = turns_before(starts, before_turn) if before_turn is not None else None
            if earlier is not None:
                query = query.where(col(MessageRow.turn_id).in_(earlier))
            rows = (
                await session.exec(query.order_by(col(MessageRow.id).desc()).limit(limit))
            ).all()
        ordered = sorted(rows, key=lambda row: (starts.get(row.turn_id, 0), row.id))
        messages = [_message(row) for row in ordered]
        # A cut at the limit may start with tool results whose call was cut off: drop them.
        while messages and messages[0].role is Role.TOOL:
            messages.pop(0)
        return messages

    async def recent_messages(self, session_id: int) -> list[Message]:
        """The last user/assistant texts of a session, for the guardian's review (which
        tells the person's from kelpie's own by their Slack user)."""
        messages = await self.history(session_id, 20)
        return [
            message
            for message in messages
            if message.role in (Role.USER, Role.ASSISTANT) and message.content
        ]

    async def all_for_session(self, session_id: int) -> list[Message]:
        async with self._db.sessions() as session:
            rows = (
                await session.exec(
                    select(MessageRow)
                    .where(MessageRow.session_id == session_id)
                    .order_by(col(MessageRow.id))
                )
            ).all()
        return [_message(row) for row in rows]

    async def record_usage(
        self, session_id: int, turn_id: str, round_index: int, model: str, usage: Usage
    ) -> None:
        """Queued, not awaited: usage rides along with the round's commit."""
        row = {
            "session_id": session_id,
            "turn_id": turn_id,
            "round_index": round_index,
            "model": model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "estimated": usage.estimated,
            "created_at": utcnow(),
        }
        self._db.defer(inserting_values(UsageRow, [row]))


async def turn_starts(session: AsyncSession, session_id: int) -> dict[str, int]:
    """Each turn of the session and the id of its first stored message."""
    found = await session.exec(
        select(MessageRow.turn_id, func.min(MessageRow.id))
        .where(MessageRow.session_id == session_id)
        .group_by(col(MessageRow.turn_id))
    )
    return {turn: first for turn, first in found.all() if first is not None}


def turns_before(starts: dict[str, int], turn_id: str) -> list[str] | None:
    """The turns that began before `turn_id` (None: it stored nothing yet). Whole turns:
    a turn still running when a queued question arrived stores its answer after that
    question, and the queued turn must see that answer."""
    cutoff = starts.get(turn_id)
    if cutoff is None:
        return None
    return [turn for turn, first in starts.items() if first < cutoff]


def _masked(text: str) -> str:
    return mask_text(text)[0]


def adding_messages(
    session_id: int,
    turn_id: str,
    messages: list[Message],
    mask: Callable[[str], str] = _masked,
) -> Op[None]:
    # Nothing is kept unmasked: a person's words and tool calls pass the same masker
    # (tool results were masked in the harness; masking twice changes nothing).
    def kept(text: str | None) -> str | None:
        return mask(text) if text else text

    now = utcnow()
    return inserting_values(
        MessageRow,
        [
            {
                "session_id": session_id,
                "turn_id": turn_id,
                "role": str(message.role),
                "content": kept(message.content),
                "tool_calls_json": kept(tool_calls_to_json(message.tool_calls)),
                # Verbatim, or not at all: a masked block could not be sent back.
                "thinking_json": thinking_to_json(storable_thinking(message.thinking)),
                "tool_call_id": message.tool_call_id,
                "tool_name": message.tool_name,
                "slack_user": message.slack_user,
                "slack_ts": message.slack_ts,
                "complete": message.complete,
                "created_at": now,
            }
            for message in messages
        ],
    )


def _message(row: MessageRow) -> Message:
    return Message(
        role=Role(row.role),
        content=row.content,
        tool_calls=tool_calls_from_json(row.tool_calls_json),
        thinking=thinking_from_json(row.thinking_json),
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        slack_user=row.slack_user,
        slack_ts=row.slack_ts,
        complete=row.complete,
    )


class ToolAuditRepository:
    """Implements the harness's AuditLog port; append-only."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, entries: list[AuditEntry]) -> None:
        """Committed before it returns (writes and denials; the harness says why)."""
        if entries:
            await self._db.write(_audit_rows(entries))

    def stage(self, entries: list[AuditEntry]) -> None:
        """Queued, not awaited: allowed reads ride along with the round's commit."""
        if entries:
            self._db.defer(_audit_rows(entries))

    async def for_session(self, session_id: int) -> list[ToolAuditRow]:
        async with self._db.sessions() as session:
            rows = await session.exec(
                select(ToolAuditRow)
                .where(ToolAuditRow.session_id == session_id)
                .order_by(col(ToolAuditRow.id))
            )
            return list(rows.all())


def _audit_rows(entries: list[AuditEntry]) -> Op[None]:
    now = utcnow()
    return appending(  # on the audit chain (`bot.store.chain`)
        ToolAuditRow,
        [
            {
                "session_id": entry.session_id,
                "turn_id": entry.turn_id,
                "tool_call_id": entry.tool_call_id,
                "tool": entry.tool,
                "arguments_json": json.dumps(entry.arguments, sort_keys=True),
                "stage": entry.stage,
                "decision": entry.decision,
                "reason": entry.reason,
                "slack_user": entry.slack_user,
                "created_at": now,
            }
            for entry in entries
        ],
    )
