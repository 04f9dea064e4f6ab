"""Incident memories in the real databases: an offer per resolution stored before the model
is asked, taken over once its holder's time ran out, one decision (on the audit chain), and
the full-text search over remembered ones (SQLite FTS5, PostgreSQL tsvector) limited to
namespace patterns and never the firewall's denied namespaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlmodel import col, select

from bot.app import team_knowledge
from bot.config import parse_config
from bot.store import chain
from bot.store.db import Database
from bot.store.memory import (
    MEMORY_AUDIT_TOOL,
    IncidentMemories,
    ProposedMemory,
    Resolution,
    ResolutionTrigger,
)
from bot.store.repositories import SessionRepository
from bot.store.tables import ToolAuditRow
from bot.toolsets.knowledge.incidents import PastIncidents
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.spec import Reach, ToolContext
from bot.values import SessionInfo
from tests.world import merge

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "kelpie.example.yaml"

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
HOLD = timedelta(minutes=3)


def resolution(thread: str) -> Resolution:
    return Resolution("C0SHOP", thread, ResolutionTrigger.MARKED_RESOLVED, thread, "U0ALICE")


def memory(namespace: str, workload: str, symptom: str) -> ProposedMemory:
    return ProposedMemory(
        symptom, "a bad config push", "rolled back", ("E1",), namespace, (workload,), ()
    )


async def _session(db: Database, thread: str) -> int:
    template = SessionInfo(
        0, f"T1:C0SHOP:{thread}", "T1", "C0SHOP", thread, False, "viewer", "prod", None, "U1"
    )
    return (await SessionRepository(db).get_or_create(template)).id


async def _offered(store: IncidentMemories, db: Database, proposed: ProposedMemory) -> int:
    thread = f"{proposed.symptom[:4]}.{len(proposed.symptom)}"
    offer = await store.reserve(resolution(thread), await _session(db, thread), NOW + HOLD)
    assert offer is not None
    await store.proposed(offer, proposed)
    return offer


@pytest.fixture
async def stored(database_url: str) -> AsyncIterator[tuple[Database, IncidentMemories]]:
    """The store on an upgraded database (SQLite and the real PostgreSQL)."""
    db = Database(database_url)
    await db.upgrade()
    try:
        yield db, IncidentMemories(db)
    finally:
        await db.close()


async def test_only_remembered_incidents_are_found_by_words_and_namespace(
    stored: tuple[Database, IncidentMemories],
):
    db, store = stored
    kept = await _offered(store, db, memory("shop", "checkout-api", "Checkout 502s"))
    gone = await _offered(store, db, memory("shop", "checkout-api", "Cart 500"))
    other = await _offered(store, db, memory("payments", "checkout-api", "Payments slow"))
    denied = await _offered(store, db, memory("kube-system", "coredns", "checkout DNS"))
    assert await store.decide(kept, True, "U0CAROL", NOW)
    assert not await store.decide(kept, False, "U0BOB", NOW)  # decided once
    assert await store.decide(gone, False, "U0CAROL", NOW)
    assert await store.decide(other, True, "U0CAROL", NOW)
    assert await store.decide(denied, True, "U0CAROL", NOW)

    found = await store.search(["shop"], ["checkout-api"])
    assert [row.symptom for row in found] == ["Checkout 502s"]
    assert await store.search(["shop"], ["nothing-like-it"]) == []
    everywhere = await store.search(["*"], ["checkout"], denied=["kube-*"])
    assert {row.symptom for row in everywhere} == {"Checkout 502s", "Payments slow"}
    assert [r.symptom for r in await store.search(["*"], [], "payments")] == ["Payments slow"]
    assert await store.search(["*"], [], "kube-system", denied=["kube-system"]) == []
    # Query syntax in the words is only ever letters and digits.
    assert await store.search(["*"], ['") OR (x', "&|!"]) == []


async def test_an_offer_is_stored_once_and_taken_over_only_after_its_hold(
    stored: tuple[Database, IncidentMemories],
):
    db, store = stored
    session_id = await _session(db, "1.1")
    offer = await store.reserve(resolution("1.1"), session_id, NOW + HOLD)
    assert offer is not None
    # The same resolution again (a double click, a second replica): no second offer.
    assert await store.reserve(resolution("1.1"), session_id, NOW + HOLD) is None
    assert await store.unfinished(NOW) == []  # its replica still holds it
    later = NOW + HOLD + timedelta(seconds=1)
    assert await store.unfinished(later) == [offer]
    took = [await store.claim(offer, later, later + HOLD) for _ in range(2)]
    assert took == [True, False]  # one replica takes it over
    await store.proposed(offer, memory("shop", "checkout-api", "Checkout 502s"))
    # Proposed but its card not posted yet: still unfinished once the hold passes.
    assert await store.unfinished(later + HOLD * 2) == [offer]
    await store.carded(offer, "9.9")
    assert await store.unfinished(later + HOLD * 2) == []


async def test_a_decision_is_a_row_of_the_audit_chain_naming_who_decided(
    stored: tuple[Database, IncidentMemories],
):
    db, store = stored
    kept = await _offered(store, db, memory("shop", "checkout-api", "Checkout 502s"))
    gone = await _offered(store, db, memory("shop", "cart", "Cart 500"))
    assert await store.decide(kept, True, "U0CAROL", NOW)
    assert await store.decide(gone, False, "U0DAVE", NOW + timedelta(minutes=1))
    assert not await store.decide(gone, True, "U0BOB", NOW)  # not decided: not audited
    async with db.sessions() as read:
        found = await read.exec(
            select(ToolAuditRow).where(col(ToolAuditRow.tool) == MEMORY_AUDIT_TOOL)
        )
        rows = sorted(found.all(), key=lambda row: row.chain_seq or 0)
        connection = await read.connection()
        verdict = await connection.run_sync(chain.verify)
    assert [(r.slack_user, r.decision, r.reason) for r in rows] == [
        ("U0CAROL", "remembered", "Checkout 502s (shop/checkout-api)"),
        ("U0DAVE", "discarded", "Cart 500 (shop/cart)"),
    ]
    assert verdict.intact and verdict.rows == 2, verdict.line()


async def test_past_incidents_never_reads_the_firewalls_denied_namespaces(tmp_path: Path):
    """Even for a role that reads every namespace, as the composition root wires it (the
    example config's firewall)."""
    example = yaml.safe_load(EXAMPLE.read_text())
    config = parse_config(merge(example, {"knowledge": {"memory": {"enabled": True}}}))
    assert config.firewall.deny_namespaces == ["kube-system"]
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'kelpie.db'}")
    await db.upgrade()
    store = IncidentMemories(db)
    try:
        for proposed in (
            memory("kube-system", "coredns", "DNS timeouts"),
            memory("shop", "checkout-api", "DNS timeouts in checkout"),
        ):
            assert await store.decide(await _offered(store, db, proposed), True, "U0CAROL", NOW)
        incidents = team_knowledge(config, KubeClients({}), store).incidents
        assert incidents is not None
        context = ToolContext(cluster="prod", reach=Reach(namespaces=("*",)))
        found = await incidents.past(PastIncidents(words="DNS timeouts"), context)
        assert 'namespace="shop"' in found.text and "kube-system" not in found.text
    finally:
        await db.close()
