"""The store on its own: schema migrations, the one writer, and clear sentences when the
database cannot be used. Run on SQLite and on the real PostgreSQL where both matter."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from alembic.autogenerate import compare_metadata
from alembic.command import downgrade, upgrade
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel import SQLModel

from bot.config import sqlalchemy_async_url
from bot.errors import StoreError
from bot.store.approvals import ApprovalRepository
from bot.store.db import Database, executing
from bot.store.inbox import Inbox
from bot.store.memory import FTS_TABLE, SEARCH_INDEX
from bot.store.repositories import MessageRepository, SessionRepository
from bot.store.schema import alembic_config, head_revision
from bot.store.turns import Replica, TurnRepository
from bot.values import Role, SessionInfo, WritePlan, WriteTarget, plan_to_json
from tests.long_batch import LongBatch
from tests.postgres import PostgresServer, free_port
from tests.sql_counts import counting_statements
from tests.world import World, environ, merge

RELEASE_0_1_0 = Path(__file__).parent / "data" / "release-0.1.0.sql"
OLD_PLAN = plan_to_json(
    WritePlan(
        "scale",
        "Scale deployment shop/checkout-api from 3 to 5 replicas",
        "prod",
        WriteTarget("Deployment", "shop", "checkout-api", "uid-1", "7"),
        (),
        {"replicas": 5},
    )
)


async def test_a_database_of_the_previous_release_upgrades_in_place(tmp_path: Path):
    path = tmp_path / "k.db"
    with sqlite3.connect(path) as old:
        old.executescript(RELEASE_0_1_0.read_text())
    db = Database(f"sqlite:///{path}")
    try:
        await db.upgrade()
        session = await SessionRepository(db).find("T0TEST:C0SHOP:1700000000.000100")
        assert session is not None and session.role == "viewer"
        messages = await MessageRepository(db).all_for_session(session.id)
        assert [(m.role, m.content) for m in messages] == [
            (Role.USER, "why is checkout-api crashlooping?"),
            (Role.ASSISTANT, "It runs out of memory (OOMKilled)."),
        ]
        # An event handled just before the upgrade is still recognised as a repeat.
        assert (
            await Inbox(db, Replica.this_process(15)).record("Ev0OLD00001", "app_mention", "{}")
            is False
        )
        async with db.sessions() as read:
            usage = (await read.exec(text("SELECT input_tokens FROM usage"))).all()  # type: ignore[call-overload]
        assert [row[0] for row in usage] == [120]
    finally:
        await db.close()


async def test_a_turn_stream_stored_before_revision_0008_is_still_closed_after_it(
    database_url: str,
):
    """0008 replaced `turns.stream_ts` by the list of messages a turn left open: a turn
    that was running when a 0007 kelpie died is still closed in its thread after the
    upgrade (and a downgrade gives the first message back)."""
    migrating = create_async_engine(sqlalchemy_async_url(database_url))  # an older kelpie
    db = Database(database_url)
    try:
        async with migrating.begin() as connection:
            await connection.run_sync(lambda sync: upgrade(alembic_config(sync), "0007"))
        session = await SessionRepository(db).get_or_create(
            SessionInfo(0, "T:C:1", "T", "C", "1", False, "viewer", "prod", None, "U")
        )
        await db.write(
            executing(
                text(
                    "INSERT INTO turns (turn_id, session_id, state, asker, owner, heartbeat_at,"
                    " lease_expires_at, stream_ts, created_at) VALUES ('turn-old', :session,"
                    " 'running', 'U', 'gone:1:abc', :at, :at, '1700000001.000200', :at)"
                ).bindparams(session=session.id, at=datetime(2026, 1, 1, tzinfo=UTC))
            )
        )
        await db.upgrade()
        orphans = await TurnRepository(db, Replica.this_process(15)).take_orphans()
        assert [(o.turn_id, o.open_messages) for o in orphans] == [
            ("turn-old", ("1700000001.000200",))
        ]
        await db.close()
        async with migrating.begin() as connection:
            await connection.run_sync(lambda sync: downgrade(alembic_config(sync), "0007"))
            kept = await connection.execute(text("SELECT stream_ts FROM turns"))
            assert kept.all() == [("1700000001.000200",)]
    finally:
        await db.close()
        await migrating.dispose()


async def test_an_approved_change_left_by_a_0009_kelpie_is_reconciled_after_the_upgrade(
    database_url: str,
):
    """0010 leases an approved change to the replica executing it: a row approved with no
    outcome under 0009 has no owner, so the first replica to look reconciles it (and only
    one: the claim sets it as the owner)."""
    migrating = create_async_engine(sqlalchemy_async_url(database_url))  # an older kelpie
    db = Database(database_url)
    try:
        async with migrating.begin() as connection:
            await connection.run_sync(lambda sync: upgrade(alembic_config(sync), "0009"))
        session = await SessionRepository(db).get_or_create(
            SessionInfo(0, "T:C:1", "T", "C", "1", False, "operator", "prod", None, "U")
        )
        await db.write(
            executing(
                text(
                    "INSERT INTO approvals (id, session_id, turn_id, tool_call_id, tool,"
                    " plan_json, reason, role, cluster, channel_id, thread_ts, requested_by,"
                    " requesters_json, status, decided_by, decided_at, expires_at, created_at)"
                    " VALUES ('old-approval', :session, 't', 'c', 'scale', :plan, '',"
                    " 'operator', 'prod', 'C', '1', 'U', '[]', 'approved', 'U2', :at, :at, :at)"
                ).bindparams(session=session.id, plan=OLD_PLAN, at=datetime(2026, 1, 1, tzinfo=UTC))
            )
        )
        await db.upgrade()
        first = ApprovalRepository(db, Replica.this_process(15))
        second = ApprovalRepository(db, Replica.this_process(15))
        assert [a.id for a in await first.unfinished()] == ["old-approval"]
        assert await first.claim_unfinished("old-approval")
        assert not await second.claim_unfinished("old-approval")
        assert await second.unfinished() == []
    finally:
        await db.close()
        await migrating.dispose()


def not_full_text(name: str | None, kind: str, _parents: object) -> bool:
    """The full-text index of remembered incidents (SQLite's FTS5 table and its shadow
    tables, PostgreSQL's GIN expression index) is the database's own, made by migration
    0022, not one of the code's tables."""
    if name is None:
        return True
    return not (
        (kind == "table" and name.startswith(FTS_TABLE))
        or (kind == "index" and name == SEARCH_INDEX)
    )


async def test_migrations_build_exactly_the_tables_the_code_uses(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        async with db.engine.connect() as connection:
            differences = await connection.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"include_name": not_full_text}),
                    SQLModel.metadata,
                )
            )
        assert differences == []
        await db.upgrade()  # a second start changes nothing
    finally:
        await db.close()


async def test_a_database_from_a_newer_kelpie_is_refused_with_a_sentence(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        await db.write(executing(text("UPDATE alembic_version SET version_num = '9999'")))
        with pytest.raises(StoreError) as refused:
            await db.upgrade()
        assert "newer than this kelpie" in str(refused.value)
        assert head_revision() != "9999"
    finally:
        await db.close()


async def test_a_failing_write_does_not_take_the_rest_of_its_batch_down(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        sessions = SessionRepository(db)
        template = SessionInfo(0, "T:C:1", "T", "C", "1", False, "viewer", "prod", None, "U")
        created = await sessions.get_or_create(template)
        messages = MessageRepository(db)
        # Queued together: a good append, a statement that fails, another good append.
        good = messages.append(created.id, "t", [_user("first")])
        bad = db.write(executing(text("INSERT INTO no_such_table VALUES (1)")))
        later = messages.append(created.id, "t", [_user("second")])
        results = await asyncio.gather(good, bad, later, return_exceptions=True)
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], Exception)
        stored = await messages.all_for_session(created.id)
        assert [m.content for m in stored] == ["first", "second"]
        # Two racing creations of one thread's session give the same row, created once.
        again = await asyncio.gather(*(sessions.get_or_create(template) for _ in range(5)))
        assert {s.id for s in again} == {created.id} and not any(s.created for s in again)
    finally:
        await db.close()


async def test_a_write_ahead_is_committed_before_the_long_batch_being_applied(
    database_url: str,
):
    db = Database(database_url)
    try:
        await db.upgrade()
        inbox = Inbox(db, Replica("r1", timedelta(seconds=30)))
        batch = LongBatch()
        committed = batch.start(db)
        await batch.started()  # the writer is applying the batch
        # A delivery's record, as the inbox middleware makes it before acknowledging.
        assert await inbox.record("Ev0AHEAD", "app_mention", "{}") is True
        assert not committed.done() and batch.ran < batch.count
        async with db.sessions() as session:
            keys = (await session.exec(text("SELECT key FROM inbound_events"))).all()  # type: ignore[call-overload]
        assert [row[0] for row in keys] == ["Ev0AHEAD"]  # committed: a reader sees it
        batch.finish()
        await committed
        assert batch.ran == batch.count  # the rest of the batch, after it, all applied
    finally:
        await db.close()


async def test_deliveries_arriving_together_are_stored_in_one_commit(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        inbox = Inbox(db, Replica("r1", timedelta(seconds=30)))
        assert await inbox.record("Ev0OLD", "app_mention", "{}") is True
        commits = db.writer.commits
        keys = [f"Ev{n:03d}" for n in range(30)] + ["Ev007", "Ev0OLD"]
        with counting_statements() as statements:
            firsts = await asyncio.gather(*(inbox.record(k, "app_mention", "{}") for k in keys))
        # Each new key is new once; a repeat in the burst and a key stored before are not.
        assert firsts == [True] * 30 + [False, False]
        # One INSERT of every row, in one commit (not a statement and three hops each).
        assert (db.writer.commits - commits, statements.count) == (1, 1)
        async with db.sessions() as session:
            stored = (await session.exec(text("SELECT key, owner FROM inbound_events"))).all()  # type: ignore[call-overload]
        assert sorted(stored) == sorted([(key, "r1") for key in keys[:30]] + [("Ev0OLD", "r1")])
    finally:
        await db.close()


def _user(text_: str):
    from bot.values import Message

    return Message(Role.USER, text_, slack_user="U", slack_ts="1")


@pytest.mark.parametrize(
    ("url", "sentence"),
    [
        (
            "postgresql+asyncpg://kelpie:hunter2@127.0.0.1:{port}/kelpie",
            "database.url: cannot open postgresql+asyncpg://kelpie:***@127.0.0.1:{port}/kelpie",
        ),
        ("not a url at all", "database.url is not a database URL kelpie can use"),
    ],
)
async def test_kelpie_run_on_an_unusable_database_says_one_sentence(
    world: World, url: str, sentence: str
):
    port = free_port()  # nothing listens there
    config = merge(world.config_data, {"database": {"url": url.format(port=port)}})
    path = world.tmp / "kelpie.yaml"
    path.write_text(yaml.safe_dump(config))
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot.cli", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **environ(world.slack)},
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert sentence.format(port=port) in done.stderr
    assert "hunter2" not in done.stderr


async def test_postgres_fixture_is_a_real_server(postgres: PostgresServer):
    db = Database(await postgres.new_database())
    try:
        await db.upgrade()
        async with db.engine.connect() as connection:
            version = (await connection.execute(text("SHOW server_version"))).scalar()
        assert version and version.split(".")[0].isdigit()
    finally:
        await db.close()


RAW_BODY = '{"text": "password=hunter2"}'


async def test_bodies_of_deliveries_handled_before_0014_are_dropped_by_the_upgrade(
    database_url: str,
):
    """Before 0014 a handled delivery kept its raw body (a question's words, a command's
    response_url) until the retention pass; the upgrade drops it, and keeps an unhandled
    one's, which a replay still needs."""
    migrating = create_async_engine(sqlalchemy_async_url(database_url))  # an older kelpie
    db = Database(database_url)
    try:
        async with migrating.begin() as connection:
            await connection.run_sync(lambda sync: upgrade(alembic_config(sync), "0011"))
        at = datetime(2026, 1, 1, tzinfo=UTC)
        for key, handled in (("Ev0HANDLED", at), ("Ev0WAITING", None)):
            await db.write(
                executing(
                    text(
                        "INSERT INTO inbound_events (key, kind, body_json, received_at,"
                        " handled_at) VALUES (:key, 'app_mention', :body, :at, :handled)"
                    ).bindparams(key=key, body=RAW_BODY, at=at, handled=handled)
                )
            )
        await db.upgrade()
        async with db.sessions() as read:
            kept = (
                await read.exec(  # type: ignore[call-overload]
                    text("SELECT key, body_json FROM inbound_events ORDER BY key")
                )
            ).all()
        assert [tuple(row) for row in kept] == [
            ("Ev0HANDLED", ""),
            ("Ev0WAITING", RAW_BODY),
        ]
    finally:
        await db.close()
        await migrating.dispose()
