"""Incident memories in the store: an offer per resolution, stored before any model call
(its unique key makes a resolution seen twice, or a double click, one offer), then the low
tier's proposal and its card; the one decision a person makes of it (compare-and-set: a
double click or two replicas decide once), appended to the audit chain in the same
transaction; and the full-text search over remembered ones (SQLite FTS5, PostgreSQL
tsvector) limited by namespace patterns.

An offer is held by the replica completing it until `claimed_until`; one left unfinished
(the replica died during the model call, or before its card was posted) is claimed by
another once that has passed.

It knows no Slack and no model: `bot/slack/memory.py` proposes and asks."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import Connection, or_, text, update
from sqlmodel import Session, col, select

from bot.store.chain import appending
from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.tables import IncidentMemoryRow, ToolAuditRow, utcnow

FTS_TABLE = "incident_memory_fts"
SEARCH_INDEX = "ix_incident_memories_search"  # PostgreSQL's GIN over to_tsvector
_TERM = re.compile(r"[a-z0-9]+")
# Rows read per search before the namespace patterns are applied.
_SCAN = 200
# How a person's decision on a memory shows in the audit (`tool_audit`).
MEMORY_AUDIT_TOOL = "memory/decide"
MEMORY_AUDIT_STAGE = "person"


class MemoryStatus(StrEnum):
    OFFERING = "offering"
    PROPOSED = "proposed"
    REMEMBERED = "remembered"
    DISCARDED = "discarded"


class ResolutionTrigger(StrEnum):
    ALERT_RESOLVED = "alert_resolved"
    VERIFIED_WRITE = "verified_write"
    MARKED_RESOLVED = "marked_resolved"


@dataclass(frozen=True)
class Resolution:
    """A thread that ended with a resolution: where, what resolved it (`ref` tells this
    resolution from another of the thread: the answer's or the verdict's ts, the alert
    group), who or what (`by`) and the evidence its trigger already has."""

    channel_id: str
    thread_ts: str
    trigger: ResolutionTrigger
    ref: str
    by: str
    session_key: str | None = None
    session_id: int | None = None
    evidence: str = ""

    @property
    def key(self) -> str:
        return f"{self.channel_id}:{self.thread_ts}:{self.trigger}:{self.ref}"


@dataclass(frozen=True)
class ProposedMemory:
    symptom: str
    cause: str
    fix: str
    evidence: tuple[str, ...]
    namespace: str
    workloads: tuple[str, ...]
    alerts: tuple[str, ...]

    @property
    def title(self) -> str:
        where = "/".join(p for p in (self.namespace, " ".join(self.workloads[:2])) if p)
        head = " ".join(self.symptom.split())[:100]
        return f"{head} ({where})" if where else head

    def search_text(self) -> str:
        keys = [self.namespace, *self.workloads, *self.alerts]
        return " ".join([*keys, self.symptom, self.cause, self.fix])


def memory_of(row: IncidentMemoryRow) -> ProposedMemory:
    """A stored proposal as the value it was made from (its card is drawn from it)."""
    return ProposedMemory(
        symptom=row.symptom,
        cause=row.cause,
        fix=row.fix,
        evidence=tuple(e for e in row.evidence.split(", ") if e),
        namespace=row.namespace,
        workloads=tuple(row.workloads.split()),
        alerts=tuple(row.alerts.split()),
    )


def terms(words: Sequence[str]) -> list[str]:
    """Search terms: lower-case letters and digits only, so no query syntax gets through."""
    found: list[str] = []
    for word in words:
        found += _TERM.findall(word.lower())
    return list(dict.fromkeys(found))[:32]


class IncidentMemories:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def reserve(self, resolution: Resolution, session_id: int, until: datetime) -> int | None:
        """Store the offer before anything is asked of the model, held until `until`; its
        id, or None when this resolution was offered before."""
        row = IncidentMemoryRow(
            key=resolution.key,
            channel_id=resolution.channel_id,
            thread_ts=resolution.thread_ts,
            trigger=resolution.trigger.value,
            status=MemoryStatus.OFFERING.value,
            proposed_by=resolution.by,
            session_id=session_id,
            resolution=resolution.evidence,
            claimed_until=until,
            created_at=utcnow(),
        )
        values = row.model_dump(exclude={"id"})

        def op(session: Session) -> int | None:
            statement = insert_ignoring_duplicates(session, IncidentMemoryRow).values(values)
            if not session.connection().execute(statement).rowcount:
                return None
            found = session.exec(
                select(IncidentMemoryRow.id).where(col(IncidentMemoryRow.key) == resolution.key)
            ).one()
            return int(found) if found is not None else None

        return await self._db.write(op)

    async def proposed(self, memory_id: int, memory: ProposedMemory) -> None:
        """The low tier's proposal filled in (once: an offer taken over twice keeps the
        first)."""
        statement = (
            update(IncidentMemoryRow)
            .where(
                col(IncidentMemoryRow.id) == memory_id,
                col(IncidentMemoryRow.status) == MemoryStatus.OFFERING.value,
            )
            .values(
                status=MemoryStatus.PROPOSED.value,
                title=memory.title,
                symptom=memory.symptom,
                cause=memory.cause,
                fix=memory.fix,
                evidence=", ".join(memory.evidence),
                namespace=memory.namespace,
                workloads=" ".join(memory.workloads),
                alerts=" ".join(memory.alerts),
                search_text=memory.search_text(),
            )
        )
        await self._db.write(counting(statement))

    async def carded(self, memory_id: int, card_ts: str) -> None:
        statement = (
            update(IncidentMemoryRow)
            .where(col(IncidentMemoryRow.id) == memory_id)
            .values(card_ts=card_ts, claimed_until=None)
        )
        await self._db.write(counting(statement))

    async def unfinished(self, now: datetime, limit: int = 20) -> list[int]:
        """Offers nobody holds any more that still lack their proposal or their card."""
        async with self._db.sessions() as session:
            found = await session.exec(
                select(IncidentMemoryRow.id)
                .where(_unfinished(), col(IncidentMemoryRow.claimed_until) < now)
                .order_by(col(IncidentMemoryRow.id))
                .limit(limit)
            )
            return [int(i) for i in found.all() if i is not None]

    async def claim(self, memory_id: int, now: datetime, until: datetime) -> bool:
        """Take over an unfinished offer whose holder's time ran out (compare-and-set:
        one replica wins)."""
        statement = (
            update(IncidentMemoryRow)
            .where(
                col(IncidentMemoryRow.id) == memory_id,
                _unfinished(),
                col(IncidentMemoryRow.claimed_until) < now,
            )
            .values(claimed_until=until)
        )
        return bool(await self._db.write(counting(statement)))

    async def get(self, memory_id: int) -> IncidentMemoryRow | None:
        async with self._db.sessions() as session:
            return await session.get(IncidentMemoryRow, memory_id)

    async def decide(self, memory_id: int, remember: bool, by: str, now: datetime) -> bool:
        """Remember or discard a proposal, once; True for the decision that counted. A
        remembered one enters the full-text index, and the decision the audit chain, in the
        same transaction."""
        status = MemoryStatus.REMEMBERED if remember else MemoryStatus.DISCARDED

        def op(session: Session) -> bool:
            statement = (
                update(IncidentMemoryRow)
                .where(
                    col(IncidentMemoryRow.id) == memory_id,
                    col(IncidentMemoryRow.status) == MemoryStatus.PROPOSED.value,
                )
                .values(status=status.value, decided_by=by, decided_at=now)
            )
            connection = session.connection()
            if not connection.execute(statement).rowcount:
                return False
            if remember and connection.dialect.name != "postgresql":
                connection.execute(
                    text(
                        f"INSERT INTO {FTS_TABLE} (rowid, search_text) "
                        "SELECT id, search_text FROM incident_memories WHERE id = :id"
                    ),
                    {"id": memory_id},
                )
            _audit_decision(session, memory_id, status)
            return True

        return await self._db.write(op)

    async def search(
        self,
        namespaces: Sequence[str],
        words: Sequence[str] = (),
        namespace: str | None = None,
        limit: int = 5,
        denied: Sequence[str] = (),
    ) -> list[IncidentMemoryRow]:
        """Remembered incidents matching any of `words` (all when none), in `namespace`
        when given, in a namespace one of `namespaces` (patterns) admits and none of
        `denied` (the firewall's) matches; best first."""
        wanted = terms(words)
        async with self._db.sessions() as session:
            connection = await session.connection()
            ids = await connection.run_sync(lambda c: _matching_ids(c, wanted, namespace))
            if not ids:
                return []
            found = await session.exec(
                select(IncidentMemoryRow).where(col(IncidentMemoryRow.id).in_(ids))
            )
            by_id = {row.id: row for row in found.all()}
        ranked = (by_id[i] for i in ids if i in by_id)  # in the search's order
        return [row for row in ranked if _admitted(row.namespace, namespaces, denied)][:limit]


def _unfinished() -> Any:
    return or_(
        col(IncidentMemoryRow.status) == MemoryStatus.OFFERING.value,
        (col(IncidentMemoryRow.status) == MemoryStatus.PROPOSED.value)
        & col(IncidentMemoryRow.card_ts).is_(None),
    )


def _audit_decision(session: Session, memory_id: int, status: MemoryStatus) -> None:
    """The decision as a row of the audit chain, in the session of the memory's thread:
    who decided (`slack_user`), what (`decision`) and of which memory."""
    # Columns, not the row object: a row loaded earlier in the same write batch would be
    # read from the session's identity map, without the decision just made.
    session_id, title, decided_by, decided_at = session.exec(
        select(
            IncidentMemoryRow.session_id,
            IncidentMemoryRow.title,
            IncidentMemoryRow.decided_by,
            IncidentMemoryRow.decided_at,
        ).where(col(IncidentMemoryRow.id) == memory_id)
    ).one()
    if session_id is None:
        return  # stored before its session was kept (migration 0025 found none)
    value = {
        "session_id": session_id,
        "turn_id": f"memory-{memory_id}",
        "tool_call_id": f"memory-{memory_id}",
        "tool": MEMORY_AUDIT_TOOL,
        "arguments_json": json.dumps({"memory_id": memory_id}),
        "stage": MEMORY_AUDIT_STAGE,
        "decision": status.value,
        "reason": title,
        "slack_user": decided_by,
        "created_at": decided_at,
    }
    appending(ToolAuditRow, [value])(session)


def _admitted(namespace: str, patterns: Sequence[str], denied: Sequence[str]) -> bool:
    if not namespace or any(fnmatchcase(namespace, d) for d in denied):
        return False
    return any(fnmatchcase(namespace, p) for p in patterns)


def _matching_ids(connection: Connection, wanted: list[str], namespace: str | None) -> list[int]:
    where = "m.status = 'remembered'" + (" AND m.namespace = :namespace" if namespace else "")
    params: dict[str, object] = {"namespace": namespace, "scan": _SCAN}
    if not wanted:
        sql = f"SELECT m.id FROM incident_memories m WHERE {where} ORDER BY m.decided_at DESC"
    elif connection.dialect.name == "postgresql":
        params["query"] = " | ".join(wanted)
        sql = (
            "SELECT m.id FROM incident_memories m WHERE " + where + " AND "
            "to_tsvector('simple', m.search_text) @@ to_tsquery('simple', :query) "
            "ORDER BY ts_rank(to_tsvector('simple', m.search_text), "
            "to_tsquery('simple', :query)) DESC, m.id DESC"
        )
    else:
        params["query"] = " OR ".join(f'"{term}"' for term in wanted)
        sql = (
            f"SELECT m.id FROM {FTS_TABLE} f JOIN incident_memories m ON m.id = f.rowid "
            f"WHERE {FTS_TABLE} MATCH :query AND {where} ORDER BY f.rank, m.id DESC"
        )
    found = connection.execute(text(sql + " LIMIT :scan"), params)
    return [int(row[0]) for row in found]
