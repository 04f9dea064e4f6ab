"""What an incident record is made of (`/kelpie record`, the Record button): one thread's
stored conversation, audits, approvals, writes and verifications, read in one go. The
record's words are the Slack surface's (`bot.slack.record`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Database
from bot.store.tables import (
    ApprovalRow,
    MessageRow,
    SessionRow,
    ToolAuditRow,
    VerifyWatchRow,
    WriteAuditRow,
    aware,
)


@dataclass(frozen=True)
class ThreadRows:
    """One thread's rows, each list in the order it was written."""

    thread: SessionRow
    messages: tuple[MessageRow, ...]
    audits: tuple[ToolAuditRow, ...]
    approvals: tuple[ApprovalRow, ...]
    writes: tuple[WriteAuditRow, ...]
    watches: tuple[VerifyWatchRow, ...]


async def thread_rows(db: Database, session_id: int) -> ThreadRows | None:
    async with db.sessions() as session:
        thread = await session.get(SessionRow, session_id)
        if thread is None:
            return None
        messages = await session.exec(
            select(MessageRow)
            .where(MessageRow.session_id == session_id)
            .order_by(col(MessageRow.id))
        )
        audits = await session.exec(
            select(ToolAuditRow)
            .where(ToolAuditRow.session_id == session_id)
            .order_by(col(ToolAuditRow.id))
        )
        approvals, writes, watches = await decision_rows(session, session_id)
        return ThreadRows(
            thread, tuple(messages.all()), tuple(audits.all()), approvals, writes, watches
        )


async def decision_rows(
    session: AsyncSession, session_id: int
) -> tuple[tuple[ApprovalRow, ...], tuple[WriteAuditRow, ...], tuple[VerifyWatchRow, ...]]:
    """The thread's approvals (as they were created), the writes they made (in order) and
    their verification watches."""
    approvals = (
        await session.exec(
            select(ApprovalRow)
            .where(ApprovalRow.session_id == session_id)
            .order_by(col(ApprovalRow.created_at))
        )
    ).all()
    ids = [approval.id for approval in approvals]
    writes = await session.exec(
        select(WriteAuditRow)
        .where(col(WriteAuditRow.approval_id).in_(ids))
        .order_by(col(WriteAuditRow.id))
    )
    watches = await session.exec(
        select(VerifyWatchRow).where(col(VerifyWatchRow.approval_id).in_(ids))
    )
    return tuple(approvals), tuple(writes.all()), tuple(watches.all())


async def latest_thread_of(db: Database, channel_id: str, user: str) -> int | None:
    """The session of the person's latest thread with kelpie in the channel: the last one
    they wrote in (or started)."""
    async with db.sessions() as session:
        said = await session.exec(
            select(MessageRow.session_id, MessageRow.id)
            .join(SessionRow, col(SessionRow.id) == col(MessageRow.session_id))
            .where(SessionRow.channel_id == channel_id, MessageRow.slack_user == user)
            .order_by(col(MessageRow.id).desc())
            .limit(1)
        )
        found = said.first()
        if found is not None:
            return int(found[0])
        started = await session.exec(
            select(SessionRow.id)
            .where(SessionRow.channel_id == channel_id, SessionRow.started_by == user)
            .order_by(col(SessionRow.id).desc())
            .limit(1)
        )
        return started.first()


def when(value: datetime | None) -> str:
    """A stored time as the record shows it (UTC, to the second)."""
    if value is None:
        return "-"
    return aware(value).strftime("%Y-%m-%d %H:%M:%S UTC")
