"""What a long thread's compaction reads and keeps (`bot.agent.compaction`): the newest
whole turns within a character budget, the older messages to summarize, the summaries kept,
and what kelpie recorded of the thread's decisions, verbatim. Stored messages are never
changed."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, col, select

from bot.store.db import Database, insert_ignoring_duplicates
from bot.store.record import decision_rows
from bot.store.repositories import _message, turn_starts, turns_before
from bot.store.tables import (
    ApprovalRow,
    MessageRow,
    ThreadSummaryRow,
    WriteAuditRow,
    utcnow,
)
from bot.values import Message, Role, plan_from_json

PAGE = 200  # messages read per query, newest first


@dataclass(frozen=True)
class Window:
    """The newest whole turns that fit; `first_id`: the first one kept (None: nothing
    older was left out)."""

    messages: list[Message]
    chars: int
    first_id: int | None


def _chars(row: MessageRow) -> int:
    return len(row.content or "") + len(row.tool_calls_json or "") + len(row.thinking_json or "")


class ThreadMemory:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def _rows_before(
        self, session_id: int, below: int | None, turns: list[str] | None
    ) -> list[MessageRow]:
        query = select(MessageRow).where(
            MessageRow.session_id == session_id, col(MessageRow.complete)
        )
        if below is not None:
            query = query.where(col(MessageRow.id) < below)
        if turns is not None:
            query = query.where(col(MessageRow.turn_id).in_(turns))
        async with self._db.sessions() as session:
            found = await session.exec(query.order_by(col(MessageRow.id).desc()).limit(PAGE))
            return list(found.all())

    async def _turns_before(self, session_id: int, turn_id: str) -> list[str] | None:
        async with self._db.sessions() as session:
            return turns_before(await turn_starts(session, session_id), turn_id)

    async def recent(self, session_id: int, budget_chars: int, before_turn: str | None) -> Window:
        """The newest whole turns (those that began before `before_turn`) within
        `budget_chars`, read page by page from the newest; never a turn cut in two."""
        turns = await self._turns_before(session_id, before_turn) if before_turn else None
        below: int | None = None
        kept: list[MessageRow] = []
        turn: list[MessageRow] = []
        used = 0
        while True:
            page = await self._rows_before(session_id, below, turns)
            for row in page:
                if turn and row.turn_id != turn[0].turn_id:
                    kept, turn = kept + turn, []
                turn.append(row)
                if used + _chars(row) > budget_chars:
                    # Everything from the first kept turn on is shown; the rest is older.
                    first = kept[-1].id if kept else (turn[0].id or 0) + 1
                    return self._window(kept, first_id=first)
                used += _chars(row)
            if len(page) < PAGE:
                return self._window(kept + turn, first_id=None)
            below = page[-1].id

    @staticmethod
    def _window(rows: list[MessageRow], first_id: int | None) -> Window:
        # Each turn's messages together, turns in the order they began (a turn interrupted
        # by a newer message may store its repair after that message).
        starts: dict[str, int] = {}
        for row in sorted(rows, key=lambda row: row.id or 0):
            starts.setdefault(row.turn_id, row.id or 0)
        ordered = sorted(rows, key=lambda row: (starts[row.turn_id], row.id or 0))
        messages = [_message(row) for row in ordered]
        while messages and messages[0].role is Role.TOOL:
            messages.pop(0)
        return Window(messages, sum(_chars(row) for row in ordered), first_id)

    async def older(
        self, session_id: int, after_id: int, before_id: int
    ) -> list[tuple[int, Message]]:
        """The complete messages between two ids (exclusive), oldest first."""
        async with self._db.sessions() as session:
            found = await session.exec(
                select(MessageRow)
                .where(
                    MessageRow.session_id == session_id,
                    col(MessageRow.complete),
                    col(MessageRow.id) > after_id,
                    col(MessageRow.id) < before_id,
                )
                .order_by(col(MessageRow.id))
            )
            return [(row.id or 0, _message(row)) for row in found.all()]

    async def summary(self, session_id: int) -> tuple[int, str] | None:
        """The latest kept summary: through which message, and its text."""
        async with self._db.sessions() as session:
            found = await session.exec(
                select(ThreadSummaryRow)
                .where(ThreadSummaryRow.session_id == session_id)
                .order_by(col(ThreadSummaryRow.through_message_id).desc())
                .limit(1)
            )
            row = found.first()
            return (row.through_message_id, row.text) if row else None

    async def keep_summary(self, session_id: int, through_id: int, text: str, model: str) -> None:
        def op(session: Session) -> None:
            statement = insert_ignoring_duplicates(session, ThreadSummaryRow).values(
                session_id=session_id,
                through_message_id=through_id,
                text=text,
                model=model,
                created_at=utcnow(),
            )
            session.connection().execute(statement)

        await self._db.write(op)

    async def decisions(self, session_id: int) -> list[str]:
        """Every approval of the thread as kelpie recorded it: what was proposed, who asked,
        who decided what and when, the write's outcome and its verification."""
        async with self._db.sessions() as session:
            approvals, writes, watches = await decision_rows(session, session_id)
        outcomes = {w.approval_id: w for w in writes if w.phase == "outcome"}
        verdicts = {w.approval_id: w.verdict for w in watches if w.verdict}
        return [_decision_line(a, outcomes.get(a.id), verdicts.get(a.id)) for a in approvals]

    async def evidence(self, session_id: int, before_id: int) -> list[str]:
        """The evidence references older rounds cited, with the read each names (turn by
        turn: references start again with each turn)."""
        async with self._db.sessions() as session:
            found = await session.exec(
                select(MessageRow.turn_id, MessageRow.tool_name, MessageRow.content)
                .where(
                    MessageRow.session_id == session_id,
                    MessageRow.role == str(Role.TOOL),
                    col(MessageRow.id) < before_id,
                    col(MessageRow.content).like("[E%"),
                )
                .order_by(col(MessageRow.id))
            )
            rows = found.all()
        turns: dict[str, int] = {}
        lines = []
        for turn_id, tool, content in rows:
            number = turns.setdefault(turn_id, len(turns) + 1)
            ref = (content or "").split("]", 1)[0] + "]"
            lines.append(f"earlier turn {number}: {ref} {tool}")
        return lines


def _decision_line(
    approval: ApprovalRow, outcome: WriteAuditRow | None, verdict: str | None
) -> str:
    plan = plan_from_json(approval.plan_json)
    at = approval.created_at.strftime("%Y-%m-%d %H:%M UTC")
    line = (
        f"{at} approval {approval.id[:8]}: {plan.description} (asked by "
        f"<@{approval.requested_by}>, reason: {approval.reason or '-'}): {approval.status}"
    )
    if approval.decided_by and approval.decided_at is not None:
        line += f" by <@{approval.decided_by}> at {approval.decided_at.strftime('%H:%M UTC')}"
    if outcome is not None:
        line += f"; write {'done' if outcome.ok else 'failed'}: {outcome.result or outcome.preview}"
    if verdict:
        line += f"; verification: {verdict}"
    return line
