"""Reading the audit as a whole: `kelpie audit verify` (the chain, `bot.store.chain`) and
`kelpie audit export` (tool and write audit rows in chain order, as JSON lines or CSV)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection
from sqlalchemy import select as core_select
from sqlmodel import select

from bot.store import chain
from bot.store.db import Database
from bot.store.tables import ApprovalRow, SessionRow, aware


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"


# The columns of an export, one row per audit row (tool and write audits side by side).
COLUMNS = (
    "chain_seq",
    "kind",
    "created_at",
    "channel",
    "thread_ts",
    "turn_id",
    "tool",
    "stage",
    "decision",
    "reason",
    "person",
    "arguments",
    "approval_id",
    "phase",
    "target",
    "requested_by",
    "approved_by",
    "preview",
    "result",
    "ok",
    "row_hash",
)


@dataclass(frozen=True)
class Scope:
    """Which rows an export holds: one thread's (its session) and/or since when."""

    session_id: int | None = None
    since: datetime | None = None


async def verify(db: Database, anchors: Sequence[chain.Anchor] = ()) -> chain.Verdict:
    async with db.sessions() as session:
        return await session.run_sync(lambda s: chain.verify(s.connection(), anchors))


async def head(db: Database) -> chain.Anchor:
    """The chain's head as an anchor to note elsewhere."""
    async with db.sessions() as session:
        return await session.run_sync(lambda s: chain.head_anchor(s.connection()))


async def export_rows(db: Database, scope: Scope) -> list[dict[str, Any]]:
    async with db.sessions() as session:
        return await session.run_sync(lambda s: list(_rows(s.connection(), scope)))


def _rows(connection: Connection, scope: Scope) -> Iterator[dict[str, Any]]:
    threads = {
        row.id: row
        for row in connection.execute(core_select(SessionRow.__table__)).mappings()  # type: ignore[attr-defined]
    }
    approvals = {
        row.id: row.session_id
        for row in connection.execute(core_select(ApprovalRow.id, ApprovalRow.session_id))  # type: ignore[call-overload]
    }
    for link in chain.load_links(connection):
        if link.table == "audit_checkpoints":
            continue
        values = link.values
        session_id = values.get("session_id") or approvals.get(values.get("approval_id"))
        if scope.session_id is not None and session_id != scope.session_id:
            continue
        created = aware(values["created_at"])
        if scope.since is not None and created < scope.since:
            continue
        thread = threads.get(session_id)
        yield _flat(link, created, thread)


def _flat(link: chain.Link, created: datetime, thread: Any) -> dict[str, Any]:
    values = link.values
    tool_row = link.table == "tool_audit"
    return {
        "chain_seq": link.seq,
        "kind": "tool" if tool_row else "write",
        "created_at": created.isoformat(),
        "channel": thread["channel_id"] if thread is not None else "",
        "thread_ts": thread["thread_ts"] if thread is not None else "",
        "turn_id": values.get("turn_id", ""),
        "tool": values["tool"],
        "stage": values.get("stage", ""),
        "decision": values.get("decision", ""),
        "reason": values.get("reason", ""),
        "person": values.get("slack_user", ""),
        "arguments": values.get("arguments_json", ""),
        "approval_id": values.get("approval_id", ""),
        "phase": values.get("phase", ""),
        "target": values.get("target", ""),
        "requested_by": values.get("requested_by", ""),
        "approved_by": values.get("approved_by", ""),
        "preview": values.get("preview", ""),
        "result": values.get("result", ""),
        "ok": values.get("ok", ""),
        "row_hash": link.row_hash or "",
    }


def render(rows: list[dict[str, Any]], form: ExportFormat) -> str:
    if form is ExportFormat.JSONL:
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


# A thread's link as Slack copies it: …/archives/<channel>/p<ts without its dot>, with
# `?thread_ts=<ts>` when the link is to a reply.
_LINK = re.compile(r"/archives/(?P<channel>[A-Z0-9]+)/p(?P<digits>\d{16})(?:\?(?P<query>\S*))?")


def thread_of_link(link: str) -> tuple[str, str] | None:
    """The channel and thread ts a Slack message link points at (a reply's link: its
    thread's), or None when it is not such a link."""
    found = _LINK.search(link.strip().strip("<>").split("|")[0])
    if found is None:
        return None
    digits = found["digits"]
    ts = f"{digits[:10]}.{digits[10:]}"
    thread = re.search(r"(?:^|&)thread_ts=(\d+\.\d+)", found["query"] or "")
    return found["channel"], thread[1] if thread else ts


async def session_of_thread(db: Database, channel: str, thread_ts: str) -> int | None:
    async with db.sessions() as session:
        found = await session.exec(
            select(SessionRow.id).where(
                SessionRow.channel_id == channel, SessionRow.thread_ts == thread_ts
            )
        )
        return found.first()
