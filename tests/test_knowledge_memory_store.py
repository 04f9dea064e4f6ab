"""Incident memories in the real databases: a proposal per resolution, one decision, and
the full-text search over remembered ones (SQLite FTS5, PostgreSQL tsvector) limited to
namespace patterns."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.store.db import Database
from bot.store.memory import IncidentMemories, ProposedMemory, Resolution, ResolutionTrigger

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


def resolution(thread: str) -> Resolution:
    return Resolution("C0SHOP", thread, ResolutionTrigger.MARKED_RESOLVED, thread, "U0ALICE")


def memory(namespace: str, workload: str, symptom: str) -> ProposedMemory:
    return ProposedMemory(
        symptom, "a bad config push", "rolled back", ("E1",), namespace, (workload,), ()
    )


async def test_only_remembered_incidents_are_found_by_words_and_namespace(database_url: str):
    db = Database(database_url)
    await db.upgrade()
    store = IncidentMemories(db)
    try:
        kept = await store.propose(
            resolution("1.1"), memory("shop", "checkout-api", "Checkout 502s")
        )
        gone = await store.propose(resolution("2.2"), memory("shop", "checkout-api", "Cart 500"))
        other = await store.propose(
            resolution("3.3"), memory("payments", "checkout-api", "Payments slow")
        )
        assert kept and gone and other
        assert await store.propose(resolution("1.1"), memory("shop", "x", "again")) is None
        assert await store.decide(kept, True, "U0CAROL", NOW)
        assert not await store.decide(kept, False, "U0BOB", NOW)  # decided once
        assert await store.decide(gone, False, "U0CAROL", NOW)
        assert await store.decide(other, True, "U0CAROL", NOW)

        found = await store.search(["shop"], ["checkout-api"])
        assert [row.symptom for row in found] == ["Checkout 502s"]
        assert await store.search(["shop"], ["nothing-like-it"]) == []
        everywhere = await store.search(["*"], ["checkout"])
        assert {row.symptom for row in everywhere} == {"Checkout 502s", "Payments slow"}
        assert [r.symptom for r in await store.search(["*"], [], "payments")] == ["Payments slow"]
        # Query syntax in the words is only ever letters and digits.
        assert await store.search(["*"], ['") OR (x', "&|!"]) == []
    finally:
        await db.close()
