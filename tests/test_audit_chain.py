"""An audit nobody can quietly edit (#32 item 4): every tool and write audit row is on one
hash chain per store; `kelpie audit verify` says "intact: N rows" or names the first row
changed, deleted or reordered; retention prunes the chain's start behind a checkpoint so
the rest still verifies; two replicas (SQLite and the real PostgreSQL) append one chain."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlmodel import col, select

from bot.store import chain
from bot.store.approvals import WriteAuditRepository
from bot.store.audit import head, verify
from bot.store.db import Database, executing, inserting
from bot.store.repositories import SessionRepository, ToolAuditRepository
from bot.store.retention import Pruner, Retention
from bot.store.tables import (
    ApprovalRow,
    AuditChainHeadRow,
    AuditCheckpointRow,
    ToolAuditRow,
    utcnow,
)
from bot.values import AuditEntry, SessionInfo, WriteAudit
from tests.test_approvals import click, propose_scale, wait_said
from tests.test_operator_cli import kelpie, write_config
from tests.world import CAROL, World

RELEASE_0_1_0 = Path(__file__).parent / "data" / "release-0.1.0.sql"


def _entry(session_id: int, n: int, who: str = "U1") -> AuditEntry:
    return AuditEntry(
        session_id=session_id,
        turn_id=f"turn-{n}",
        tool_call_id=f"call-{n}",
        tool="read/list_pods",
        arguments={"namespace": "shop", "n": n},
        stage="execute",
        decision="allow",
        reason="",
        slack_user=who,
    )


async def _store(url: str) -> tuple[Database, int]:
    db = Database(url)
    await db.upgrade()
    template = SessionInfo(0, "T1:C1:1.0", "T1", "C1", "1.0", False, "viewer", "prod", None, "U1")
    session = await SessionRepository(db).get_or_create(template)
    return db, session.id


async def _audits(db: Database) -> list[ToolAuditRow]:
    async with db.sessions() as read:
        found = await read.exec(select(ToolAuditRow).order_by(col(ToolAuditRow.chain_seq)))
        return list(found.all())


async def test_an_approved_change_is_on_an_intact_chain_and_an_edited_row_is_named(
    any_db_world: World,
):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    bot = await world.start_bot()
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.")
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.")
    await world.drain()
    config = write_config(world)

    ran = await kelpie("audit", "verify", "--config", str(config))
    assert ran.code == 0, ran.err
    writes = await WriteAuditRepository(bot.db).all()
    assert [row.phase for row in writes] == ["intent", "outcome"]
    rows = len(await _audits(bot.db)) + len(writes)
    assert ran.out.startswith(f"intact: {rows} rows"), ran.out
    noted = ran.out.split("(head ", 1)[1].split(")", 1)[0]  # SEQ:HASH, to keep elsewhere
    anchored = await kelpie("audit", "verify", "--config", str(config), "--anchor", noted)
    assert anchored.code == 0 and anchored.out.strip().endswith(", 1 anchors held)"), anchored.out

    # Someone edits the approval's audit row in the database: verify names that row.
    approval = [row for row in await _audits(bot.db) if row.stage == "approval"][-1]
    edit = update(ToolAuditRow).where(col(ToolAuditRow.id) == approval.id).values(slack_user="U0")
    db = Database(world.config.database.url)
    try:
        await db.write(executing(edit))
    finally:
        await db.close()
    ran = await kelpie("audit", "verify", "--config", str(config))
    assert ran.code == 1
    assert ran.out.strip() == (
        f"changed: tool audit row {approval.id} (chain row {approval.chain_seq}) "
        "was changed after it was written"
    )


async def test_a_deleted_a_reordered_and_a_cut_off_row_are_each_named(database_url: str):
    db, session_id = await _store(database_url)
    try:
        audit = ToolAuditRepository(db)
        for n in range(6):
            await audit.record([_entry(session_id, n)])
        rows = await _audits(db)
        assert (await verify(db)).line().startswith("intact: 6 rows")

        # Two rows trade places (their places swapped, their contents untouched).
        second, third = rows[1], rows[2]
        await db.write(_set_seq(second.id, -1))
        await db.write(_set_seq(third.id, second.chain_seq))
        await db.write(_set_seq(second.id, third.chain_seq))
        verdict = await verify(db)
        assert verdict.line() == (
            f"reordered: tool audit row {third.id} (chain row 2) does not follow the row "
            "before it: rows were reordered or replaced"
        )
        await db.write(_set_seq(third.id, -1))
        await db.write(_set_seq(second.id, 2))
        await db.write(_set_seq(third.id, 3))
        assert (await verify(db)).intact

        # The last row is deleted: the head still names it.
        await db.write(executing(text(f"DELETE FROM tool_audit WHERE id = {rows[5].id}")))
        assert (await verify(db)).line() == (
            "deleted: chain row 6 is missing: the end of the chain was deleted"
        )
        # Appended after it, the next row says so too.
        await audit.record([_entry(session_id, 6)])
        after = (await _audits(db))[-1]
        assert (await verify(db)).line() == (
            f"deleted: chain row 6 is missing: it was deleted before tool audit row "
            f"{after.id} (chain row 7)"
        )
    finally:
        await db.close()


def _set_seq(row_id: int | None, seq: int | None) -> Any:
    row = col(ToolAuditRow.id) == row_id
    return executing(update(ToolAuditRow).where(row).values(chain_seq=seq))


def _rewrite_from(seq: int, slack_user: str) -> Any:
    """What someone with write access to the database could do: edit chain row `seq` and
    hash every row from it again, and the head, so the chain alone shows nothing."""

    def op(session: Any) -> None:
        connection = session.connection()
        links = [link for link in chain.load_links(connection) if link.seq is not None]
        prev = next((link.row_hash for link in links if link.seq == seq - 1), chain.GENESIS)
        table = ToolAuditRow.__table__  # type: ignore[attr-defined]
        for link in [link for link in links if link.seq >= seq]:  # type: ignore[operator]
            values = {**link.values, **({"slack_user": slack_user} if link.seq == seq else {})}
            hashed = chain.record_hash(link.table, prev or "", values)
            connection.execute(
                update(table)
                .where(table.c.id == link.row_id)
                .values(slack_user=values["slack_user"], prev_hash=prev, row_hash=hashed)
            )
            prev = hashed
        head = AuditChainHeadRow.__table__  # type: ignore[attr-defined]
        connection.execute(update(head).values(hash=prev))

    return op


async def test_a_chain_rewritten_after_an_edit_no_longer_holds_the_head_noted_before(
    database_url: str, caplog: pytest.LogCaptureFixture
):
    db, session_id = await _store(database_url)
    try:
        audit = ToolAuditRepository(db)
        for n in range(5):
            await audit.record([_entry(session_id, n)])
        # The head is printed by verify and logged by every retention pass: noted elsewhere.
        noted = await head(db)
        assert noted.seq == 5 and f"(head {noted})" in (await verify(db)).line()
        retention = Retention(conversations=timedelta(days=30), audits=None)
        with caplog.at_level(logging.INFO, logger="bot.store.retention"):
            await Pruner(db, retention).log_head()
        assert f"audit chain head {noted} " in caplog.text

        await db.write(_rewrite_from(3, "U0SOMEONE"))
        assert (await verify(db)).intact  # the chain alone cannot tell
        rows = await _audits(db)
        verdict = await verify(db, [noted])
        assert verdict.line() == (
            f"rewritten: tool audit row {rows[4].id} (chain row 5) is not the row noted as "
            "anchor 5: the chain was rewritten"
        )
        # A head noted past where the rewritten chain ends.
        beyond = chain.Anchor(9, noted.hash)
        assert (await verify(db, [beyond])).line() == (
            "rewritten: chain row 9, noted as an anchor, is past the chain's end: it was cut "
            "and rewritten"
        )
        # An anchor from before the edit still holds: rows 1 and 2 were not rewritten.
        early = chain.Anchor(2, str(rows[1].row_hash))
        assert (await verify(db, [early])).line().endswith(", 1 anchors held)")
    finally:
        await db.close()


async def test_verify_refuses_a_malformed_anchor_in_one_sentence(tmp_path: Path):
    ran = await kelpie("audit", "verify", "--anchor", "5:not-a-hash")
    assert ran.code == 2 and "is not an anchor: SEQ:HASH" in ran.err, ran.err
    assert "Traceback" not in ran.err


async def test_two_replicas_appending_at_once_write_one_chain(database_url: str):
    first, session_id = await _store(database_url)
    second = Database(database_url)
    try:
        await first.write(inserting(_approval(session_id)))
        tools, writes = ToolAuditRepository(first), WriteAuditRepository(second)

        async def append(replica: int, n: int) -> None:
            # One replica audits tool calls (two rows, as a round with two calls), the
            # other writes: one chain across both tables, however the appends interleave.
            if replica == 0:
                await tools.record([_entry(session_id, n), _entry(session_id, n)])
            else:
                await writes.record(_write(n))

        await asyncio.gather(*(append(r, n) for n in range(40) for r in (0, 1)))
        verdict = await verify(first)
        assert verdict.line().startswith("intact: 120 rows"), verdict.line()
        places = [row.chain_seq for row in await _audits(second)]
        places += [row.chain_seq for row in await WriteAuditRepository(second).all()]
        assert sorted(places) == list(range(1, 121))
    finally:
        await second.close()
        await first.close()


def _approval(session_id: int) -> ApprovalRow:
    return ApprovalRow(
        id="a1",
        session_id=session_id,
        turn_id="t1",
        tool_call_id="c1",
        tool="write/scale_deployment",
        plan_json="{}",
        role="operator",
        cluster="prod",
        channel_id="C1",
        thread_ts="1.0",
        requested_by="U1",
        status="approved",
        expires_at=utcnow(),
    )


def _write(n: int) -> WriteAudit:
    return WriteAudit(
        approval_id="a1",
        phase="intent",
        tool="write/scale_deployment",
        target=f"Deployment/shop/checkout-{n}",
        target_uid="uid",
        requested_by="U1",
        approved_by="U2",
        preview="spec.replicas 3 → 5",
    )


async def test_retention_prunes_the_chains_start_behind_checkpoints_and_it_still_verifies(
    database_url: str,
):
    db, session_id = await _store(database_url)
    old = utcnow() - timedelta(days=40)
    try:
        values = [_row(session_id, n, old) for n in range(7)]
        await db.write(chain.appending(ToolAuditRow, values))
        audit = ToolAuditRepository(db)
        for n in range(3):
            await audit.record([_entry(session_id, 100 + n)])
        retention = Retention(conversations=timedelta(days=30), audits=timedelta(days=30))
        pruned = await Pruner(db, retention, batch=3, pause_s=0).prune()
        assert pruned.audits == 7
        kept = await _audits(db)
        assert [row.turn_id for row in kept] == ["turn-100", "turn-101", "turn-102"]
        verdict = await verify(db)
        # 3 audit rows and the three checkpoints (one per batch of 3, 3 and 1 rows).
        assert verdict.line().startswith("intact: 6 rows"), verdict.line()
        assert "pruned through chain row 7" in verdict.line()
        async with db.sessions() as read:
            checkpoints = (await read.exec(select(AuditCheckpointRow))).all()
        assert sorted(c.pruned_rows for c in checkpoints) == [1, 3, 3]

        # A second pass a month later prunes the checkpoints too, behind a new one.
        later = Retention(conversations=timedelta(days=30), audits=timedelta(seconds=0))
        await Pruner(db, later, batch=50, pause_s=0).prune()
        assert (await verify(db)).line().startswith("intact: 1 rows")
    finally:
        await db.close()


async def test_retention_keeps_a_start_that_was_edited_and_verify_names_it(database_url: str):
    db, session_id = await _store(database_url)
    old = utcnow() - timedelta(days=40)
    try:
        await db.write(chain.appending(ToolAuditRow, [_row(session_id, n, old) for n in range(4)]))
        target = (await _audits(db))[1]
        edit = update(ToolAuditRow).where(col(ToolAuditRow.id) == target.id).values(reason="x")
        await db.write(executing(edit))
        retention = Retention(conversations=timedelta(days=30), audits=timedelta(days=30))
        pruned = await Pruner(db, retention, batch=50, pause_s=0).prune()
        assert pruned.audits == 0
        assert len(await _audits(db)) == 4
        assert (await verify(db)).line() == (
            f"changed: tool audit row {target.id} (chain row 2) was changed after it was written"
        )
    finally:
        await db.close()


def _row(session_id: int, n: int, created: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn_id": f"turn-{n}",
        "tool_call_id": f"call-{n}",
        "tool": "read/list_pods",
        "arguments_json": "{}",
        "stage": "execute",
        "decision": "allow",
        "reason": "",
        "slack_user": "U1",
        "created_at": created,
    }


async def test_audit_rows_stored_before_the_chain_are_placed_on_it_by_the_upgrade(
    tmp_path: Path,
):
    path = tmp_path / "k.db"
    with sqlite3.connect(path) as old:
        old.executescript(RELEASE_0_1_0.read_text())
        session_id = old.execute("SELECT id FROM sessions").fetchone()[0]
        for n, at in enumerate(("2024-01-02 10:00:00.000000", "2024-01-01 09:00:00.000000")):
            old.execute(
                "INSERT INTO tool_audit (session_id, turn_id, tool_call_id, tool, "
                "arguments_json, stage, decision, reason, slack_user, created_at) "
                f"VALUES (?, 't{n}', 'c{n}', 'read/list_pods', '{{}}', 'execute', 'allow', '', "
                "'U1', ?)",
                (session_id, at),
            )
    db = Database(f"sqlite:///{path}")
    try:
        await db.upgrade()
        assert (await verify(db)).line().startswith("intact: 2 rows")
        # Placed in the order they were written.
        assert [row.turn_id for row in await _audits(db)] == ["t1", "t0"]
    finally:
        await db.close()
