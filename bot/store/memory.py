"""Incident memories in the store: a proposal per resolution (its unique key makes a
resolution seen twice one card), the one decision a person makes of it (compare-and-set:
a double click or two replicas decide once), and the full-text search over remembered
ones (SQLite FTS5, PostgreSQL tsvector) limited by namespace patterns.

It knows no Slack and no model: `bot/slack/memory.py` proposes and asks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from fnmatch import fnmatchcase

from sqlalchemy import Connection, text, update
from sqlmodel import Session, col, select

from bot.store.db import Database, counting, insert_ignoring_duplicates
from bot.store.tables import IncidentMemoryRow, utcnow

FTS_TABLE = "incident_memory_fts"
SEARCH_INDEX = "ix_incident_memories_search"  # PostgreSQL's GIN over to_tsvector
_TERM = re.compile(r"[a-z0-9]+")
# Rows read per search before the namespace patterns are applied.
_SCAN = 200


class MemoryStatus(StrEnum):
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


def terms(words: Sequence[str]) -> list[str]:
    """Search terms: lower-case letters and digits only, so no query syntax gets through."""
    found: list[str] = []
    for word in words:
        found += _TERM.findall(word.lower())
    return list(dict.fromkeys(found))[:32]


class IncidentMemories:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def propose(
        self, resolution: Resolution, memory: ProposedMemory, now: datetime | None = None
    ) -> int | None:
        """Store the proposal; its id, or None when this resolution was proposed before."""
        row = IncidentMemoryRow(
            key=resolution.key,
            channel_id=resolution.channel_id,
            thread_ts=resolution.thread_ts,
            trigger=resolution.trigger.value,
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
            proposed_by=resolution.by,
            created_at=now or utcnow(),
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

    async def carded(self, memory_id: int, card_ts: str) -> None:
        statement = (
            update(IncidentMemoryRow)
            .where(col(IncidentMemoryRow.id) == memory_id)
            .values(card_ts=card_ts)
        )
        await self._db.write(counting(statement))

    async def get(self, memory_id: int) -> IncidentMemoryRow | None:
        async with self._db.sessions() as session:
            return await session.get(IncidentMemoryRow, memory_id)

    async def decide(self, memory_id: int, remember: bool, by: str, now: datetime) -> bool:
        """Remember or discard a proposal, once; True for the decision that counted. A
        remembered one enters the full-text index in the same transaction."""
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
            if not session.connection().execute(statement).rowcount:
                return False
            if remember and session.connection().dialect.name != "postgresql":
                session.connection().execute(
                    text(
                        f"INSERT INTO {FTS_TABLE} (rowid, search_text) "
                        "SELECT id, search_text FROM incident_memories WHERE id = :id"
                    ),
                    {"id": memory_id},
                )
            return True

        return await self._db.write(op)

    async def search(
        self,
        namespaces: Sequence[str],
        words: Sequence[str] = (),
        namespace: str | None = None,
        limit: int = 5,
    ) -> list[IncidentMemoryRow]:
        """Remembered incidents matching any of `words` (all when none), in `namespace`
        when given, in a namespace one of `namespaces` (patterns) admits; best first."""
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
        return [row for row in ranked if _admitted(row.namespace, namespaces)][:limit]


def _admitted(namespace: str, patterns: Sequence[str]) -> bool:
    return bool(namespace) and any(fnmatchcase(namespace, p) for p in patterns)


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
