"""Retention on SQLite and the real PostgreSQL: conversations idle past `store.retention_days`
go, in batches, and the feedback on them with them; recent ones, approvals and audits (by
default) stay; a thread still answers after its old conversation was pruned."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import update
from sqlmodel import SQLModel, col, func, select

from bot.config import parse_config
from bot.errors import ConfigError
from bot.store.db import Database, executing, inserting
from bot.store.feedback import FeedbackRepository
from bot.store.inbox import Inbox
from bot.store.retention import Pruned, Pruner, Retention
from bot.store.tables import (
    AlertGroupRow,
    ApprovalRow,
    FeedbackFixtureRow,
    FeedbackRow,
    InboundEventRow,
    MessageRow,
    PayloadRow,
    SessionRow,
    ToolAuditRow,
    UsageRow,
    WriteAuditRow,
    utcnow,
)
from bot.store.turns import Replica
from tests.world import ALICE, SHOP_CHANNEL, World

NOW = utcnow()
OLD = NOW - timedelta(days=40)
RECENT = NOW - timedelta(days=1)
MONTH = Retention(conversations=timedelta(days=30), audits=None)


def _session(sid: int, created: object) -> SessionRow:
    return SessionRow(
        id=sid,
        session_key=f"T1:C1:{sid}",
        team_id="T1",
        channel_id="C1",
        thread_ts=f"{sid}.0",
        role="viewer",
        cluster="prod",
        started_by="U1",
        created_at=created,
    )


def _message(sid: int, text: str, created: object) -> MessageRow:
    return MessageRow(
        session_id=sid, turn_id=f"t{sid}", role="user", content=text, created_at=created
    )


def _usage(sid: int, created: object) -> UsageRow:
    return UsageRow(
        session_id=sid,
        turn_id=f"t{sid}",
        round_index=0,
        model="m",
        input_tokens=1,
        output_tokens=1,
        estimated=False,
        created_at=created,
    )


def _audit(sid: int, created: object) -> ToolAuditRow:
    return ToolAuditRow(
        session_id=sid,
        turn_id=f"t{sid}",
        tool_call_id="c1",
        tool="write/scale_deployment",
        arguments_json="{}",
        stage="approval",
        decision="needs_approval",
        slack_user="U1",
        created_at=created,
    )


def _approval(aid: str, sid: int, status: str, created: object) -> ApprovalRow:
    return ApprovalRow(
        id=aid,
        session_id=sid,
        turn_id=f"t{sid}",
        tool_call_id="c1",
        tool="scale_deployment",
        plan_json="{}",
        role="operator",
        cluster="prod",
        channel_id="C1",
        thread_ts=f"{sid}.0",
        requested_by="U1",
        status=status,
        expires_at=created,
        created_at=created,
    )


def _write_audit(aid: str, created: object) -> WriteAuditRow:
    return WriteAuditRow(
        approval_id=aid,
        phase="intent",
        tool="scale_deployment",
        target="Deployment/shop/checkout-api",
        target_uid="u1",
        requested_by="U1",
        approved_by="U2",
        preview="replicas 3 → 5",
        created_at=created,
    )


def _feedback(sid: int, created: object, reason_at: object = None) -> FeedbackRow:
    return FeedbackRow(
        team_id="T1",
        channel_id="C1",
        thread_ts=f"{sid}.0",
        turn_id=f"t{sid}",
        message_ts=f"{sid}.5",
        slack_user="U2",
        value="negative",
        reason=None if reason_at is None else "it looked at the wrong namespace",
        reason_at=reason_at,
        created_at=created,
    )


def _fixture(sid: int, captured: object) -> FeedbackFixtureRow:
    return FeedbackFixtureRow(
        turn_id=f"t{sid}",
        channel_id="C1",
        thread_ts=f"{sid}.0",
        objects_json='[{"kind": "Pod"}]',
        logs_json="[]",
        missing_json="[]",
        captured_at=captured,
    )


async def _seed(db: Database) -> None:
    """1: idle 40 days, nothing else. 2: idle 40 days, with an audit and approvals.
    3: started 40 days ago, still in use. 4..9: idle, plain (more than one batch)."""
    rows: list[list[SQLModel]] = [
        [_session(1, OLD), _session(2, OLD), _session(3, OLD), _session(4, RECENT)],
        [_session(sid, OLD) for sid in range(5, 10)],
        [_message(sid, f"old {sid}", OLD) for sid in (1, 2, 3, *range(5, 10))],
        [_message(3, "yesterday", RECENT), _message(4, "recent", RECENT)],
        [_usage(1, OLD), _usage(2, OLD), _usage(4, RECENT)],
        [PayloadRow(session_id=1, turn_id="t1", round_index=0, model="m", payload_json="{}")],
        [_audit(2, OLD)],
        [_approval("a-old", 2, "approved", OLD), _approval("a-wait", 2, "pending", OLD)],
        [_write_audit("a-old", OLD)],
    ]
    for group in rows:
        await db.write(inserting(*group))


async def _count(db: Database, table: type[SQLModel], *where: object) -> int:
    async with db.sessions() as session:
        query = select(func.count()).select_from(table).where(*where)  # type: ignore[arg-type]
        return int((await session.exec(query)).one())


async def test_idle_conversations_go_and_audits_stay(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        await _seed(db)
        commits = db.writer.commits
        pruned = await Pruner(db, MONTH, batch=3, pause_s=0).prune()

        # 1, 2 and 5..9 were idle; 3 is still in use.
        assert pruned == Pruned(sessions=7, messages=7)
        assert db.writer.commits - commits == 3  # 7 sessions in batches of 3
        assert await _count(db, SessionRow) == 3  # 2 (its audits point at it), 3 and 4
        remaining = await _count(db, SessionRow, col(SessionRow.id).in_([2, 3, 4]))
        assert remaining == 3
        assert await _count(db, MessageRow, col(MessageRow.session_id).in_([1, 2])) == 0
        assert await _count(db, MessageRow, col(MessageRow.session_id) == 3) == 2
        assert await _count(db, MessageRow, col(MessageRow.session_id) == 4) == 1
        assert await _count(db, UsageRow) == 1 and await _count(db, PayloadRow) == 0
        # Approvals and audits are kept by default, however old.
        assert await _count(db, ToolAuditRow) == 1
        assert await _count(db, ApprovalRow) == 2 and await _count(db, WriteAuditRow) == 1

        # A second pass finds nothing and writes nothing.
        commits = db.writer.commits
        assert await Pruner(db, MONTH).prune() == Pruned()
        assert db.writer.commits == commits
    finally:
        await db.close()


async def test_audits_go_only_after_their_own_longer_setting(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        await _seed(db)
        year = Retention(conversations=timedelta(days=30), audits=timedelta(days=365))
        await Pruner(db, year, pause_s=0).prune()
        assert await _count(db, ToolAuditRow) == 1 and await _count(db, WriteAuditRow) == 1
        assert await _count(db, SessionRow, col(SessionRow.id) == 2) == 1

        weeks = Retention(conversations=timedelta(days=30), audits=timedelta(days=35))
        pruned = await Pruner(db, weeks, batch=1, pause_s=0).prune()
        assert pruned == Pruned(audits=1, approvals=1)
        assert await _count(db, ToolAuditRow) == 0 and await _count(db, WriteAuditRow) == 0
        # A pending approval is still somebody's card: it stays, and so does its session.
        approvals = await _count(db, ApprovalRow, col(ApprovalRow.id) == "a-wait")
        assert approvals == 1 and await _count(db, ApprovalRow) == 1
        assert await _count(db, SessionRow, col(SessionRow.id) == 2) == 1
    finally:
        await db.close()


async def _seed_feedback(db: Database, at: datetime) -> None:
    """As of `at`, threads rated 👎: 11 idle 40 days; 12 started then, a message yesterday;
    13 fresh; 14 idle 40 days, its 👎's reason written two days ago; 15 idle 40 days, kept
    by an audit; 16 and 17 kelpie holds no conversation of, rated 40 days and a day ago."""
    old, day = at - timedelta(days=40), at - timedelta(days=1)
    rows: list[list[SQLModel]] = [
        [_session(sid, old) for sid in (11, 12, 14, 15)] + [_session(13, day)],
        [_message(sid, f"old {sid}", old) for sid in (11, 12, 14, 15)],
        [_message(12, "yesterday", day), _message(13, "fresh", day)],
        [_audit(15, old)],
        [_feedback(sid, old) for sid in (11, 12, 15, 16)],
        [_feedback(13, day), _feedback(14, old, at - timedelta(days=2)), _feedback(17, day)],
        [_fixture(sid, old) for sid in (11, 12, 16)],
    ]
    for group in rows:
        await db.write(inserting(*group))


async def _threads_rated(db: Database) -> set[str]:
    async with db.sessions() as read:
        return set((await read.exec(select(FeedbackRow.thread_ts))).all())


async def test_feedback_goes_with_its_idle_conversation_and_a_recent_rating_keeps_it(
    database_url: str,
):
    db = Database(database_url)
    at = datetime(2025, 3, 1, 12, tzinfo=UTC)
    try:
        await db.upgrade()
        await _seed_feedback(db, at)
        pruned = await Pruner(db, MONTH, batch=2, pause_s=0, now=lambda: at).prune()

        assert pruned == Pruned(sessions=2, messages=2, feedback=3)  # 11, 15; 16's feedback
        assert await _threads_rated(db) == {"12.0", "13.0", "14.0", "17.0"}
        assert await _count(db, FeedbackFixtureRow) == 1  # 12's; 11's and 16's went
        # What `kelpie eval export` reads: the idle thread is gone; the one in use is whole;
        # the audited one keeps its session but neither its conversation nor its feedback.
        threads = FeedbackRepository(db)
        assert await threads.thread("C1", "11.0") is None
        in_use = await threads.thread("C1", "12.0")
        assert in_use is not None and len(in_use.messages) == 2
        assert [f.turn_id for f in in_use.feedback] == ["t12"] and len(in_use.fixtures) == 1
        rated_late = await threads.thread("C1", "14.0")
        assert rated_late is not None and rated_late.feedback[0].reason is not None
        audited = await threads.thread("C1", "15.0")
        assert audited is not None and audited.messages == [] and audited.feedback == []

        # A second pass at the same instant finds nothing and writes nothing.
        commits = db.writer.commits
        assert await Pruner(db, MONTH, now=lambda: at).prune() == Pruned()
        assert db.writer.commits == commits

        # A month on, everything rated or said by then has been idle as long.
        later = at + timedelta(days=31)
        pruned = await Pruner(db, MONTH, batch=2, pause_s=0, now=lambda: later).prune()
        assert pruned == Pruned(sessions=3, messages=4, feedback=4)
        assert await _threads_rated(db) == set() and await _count(db, FeedbackFixtureRow) == 0
        assert await _count(db, SessionRow) == 1  # 15, for its audit
    finally:
        await db.close()


async def _backdate(bot_db: Database, thread_ts: str) -> int:
    """The thread's conversation as if it had been idle for 40 days."""
    session = await bot_db_session(bot_db, thread_ts)
    for table in (SessionRow, MessageRow, UsageRow):
        column = SessionRow.id if table is SessionRow else table.session_id  # type: ignore[attr-defined]
        await bot_db.write(executing(update(table).where(column == session).values(created_at=OLD)))
    return session


async def bot_db_session(db: Database, thread_ts: str) -> int:
    async with db.sessions() as read:
        row = (await read.exec(select(SessionRow).where(SessionRow.thread_ts == thread_ts))).one()
    assert row.id is not None
    return row.id


async def test_a_pruned_thread_still_answers_and_a_recent_one_keeps_its_history(
    any_db_world: World,
):
    world = any_db_world
    for text in ("Old answer.", "Recent answer.", "Fresh start.", "Still here."):
        world.model.reply_text(text)
    bot = await world.start_bot()
    old = await world.mention(SHOP_CHANNEL, ALICE, "what ran in shop last month?")
    await world.wait_bot_replies(SHOP_CHANNEL, old["ts"], 2)
    recent = await world.mention(SHOP_CHANNEL, ALICE, "how many replicas has checkout-api?")
    await world.wait_bot_replies(SHOP_CHANNEL, recent["ts"], 2)
    await world.drain()
    old_id = await _backdate(bot.db, old["ts"])
    await world.stop_bot(bot)

    # The pass runs in the background at start.
    bot = await world.start_bot()
    for _ in range(200):
        if await _count(bot.db, SessionRow, col(SessionRow.id) == old_id) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _count(bot.db, MessageRow, col(MessageRow.session_id) == old_id) == 0
    assert await _count(bot.db, SessionRow) == 1

    # The pruned thread answers a mention again, as a new conversation.
    await world.mention(SHOP_CHANNEL, ALICE, "and now?", thread_ts=old["ts"])
    replies = await world.wait_bot_replies(SHOP_CHANNEL, old["ts"], 4)
    assert replies[-1].text == "Fresh start."
    sent = [m["content"] for m in world.model.requests[2]["messages"]]
    assert not any("last month" in (c or "") for c in sent) and "Old answer." not in sent

    # The recent thread still carries its earlier turn.
    follow = world.slack.message(SHOP_CHANNEL, ALICE, "still?", thread_ts=recent["ts"])
    await world.slack.deliver_event(follow)
    replies = await world.wait_bot_replies(SHOP_CHANNEL, recent["ts"], 4)
    assert replies[-1].text == "Still here."
    sent = [m["content"] for m in world.model.requests[3]["messages"]]
    assert "Recent answer." in sent and any("how many replicas" in (c or "") for c in sent)
    world.model.assert_script_consumed()


async def _received(db: Database, keys: list[str], when: object) -> None:
    statement = update(InboundEventRow).where(col(InboundEventRow.key).in_(keys))
    await db.write(executing(statement.values(received_at=when)))


async def test_handled_deliveries_go_after_a_day_with_every_pass_and_unhandled_ones_stay(
    database_url: str,
):
    db = Database(database_url)
    pruner = Pruner(db, MONTH, batch=2, pause_s=0, every_s=0.1)
    try:
        await db.upgrade()
        inbox = Inbox(db, Replica.this_process(30))
        old = [f"Ev0OLD{n}" for n in range(5)]
        for key in [*old, "Ev0OPEN", "Ev0NEW"]:
            assert await inbox.record(key, "app_mention", '{"text": "is checkout up?"}')
        assert await inbox.record("Tr0CLICK", "block_actions", "{}")
        for key in [*old, "Ev0NEW", "Tr0CLICK"]:  # their listeners are done
            await inbox.handled(key)
        # Two days ago: handled and past Slack's retries, except Ev0OPEN, never handled.
        await _received(db, [*old, "Ev0OPEN", "Tr0CLICK"], NOW - timedelta(days=2))
        await _received(db, ["Ev0NEW"], NOW - timedelta(hours=20))

        assert await pruner.prune() == Pruned(deliveries=6)
        # A retry of the recent delivery is still a repeat; the owed one is still owed.
        assert not await inbox.record("Ev0NEW", "app_mention", "{}")
        assert not await inbox.record("Ev0OPEN", "app_mention", "{}")
        open_row = await _count(
            db,
            InboundEventRow,
            col(InboundEventRow.key) == "Ev0OPEN",
            col(InboundEventRow.handled_at).is_(None),
        )
        assert open_row == 1 and await _count(db, InboundEventRow) == 2

        # Not only at start: the pass that runs every `every_s` forgets what aged since.
        pruner.start()
        await _received(db, ["Ev0NEW"], NOW - timedelta(days=2))
        for _ in range(200):
            if await _count(db, InboundEventRow) == 1:
                break
            await asyncio.sleep(0.05)
        assert await _count(db, InboundEventRow, col(InboundEventRow.key) == "Ev0OPEN") == 1
        assert await _count(db, InboundEventRow) == 1
        assert await inbox.record("Ev0NEW", "app_mention", "{}")  # forgotten: new again
    finally:
        await pruner.drain()
        await db.close()


def _group(key: str, status: str, resolved_at: object) -> AlertGroupRow:
    return AlertGroupRow(
        key=key,
        channel_id=SHOP_CHANNEL,
        thread_ts=f"{len(key)}.000100",
        status=status,
        alerts_json="[]",
        firing_count=0 if status == "resolved" else 1,
        fired_at=OLD - timedelta(days=1),
        resolved_at=resolved_at,
    )


async def test_alert_groups_resolved_a_month_ago_go_and_firing_ones_stay(database_url: str):
    db = Database(database_url)
    try:
        await db.upgrade()
        groups = [
            _group('webhook:{}:{alertname="Old"}', "resolved", OLD),
            _group('webhook:{}:{alertname="Recent"}', "resolved", RECENT),
            # Fired 41 days ago and never resolved: its resolve may still come.
            _group('webhook:{}:{alertname="Firing"}', "firing", None),
        ]
        await db.write(inserting(*groups))
        assert await Pruner(db, MONTH, batch=1, pause_s=0, now=lambda: NOW).prune() == Pruned(
            alert_groups=1
        )
        async with db.sessions() as read:
            kept = (await read.exec(select(AlertGroupRow.key))).all()
        assert sorted(kept) == sorted(g.key for g in groups[1:])
    finally:
        await db.close()


def test_retention_settings_are_checked_with_their_key_paths():
    minimal = {
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "~/.kube/config"}]},
        "models": {"active": "default", "profiles": {"default": {"model": "openai/gpt-4o"}}},
    }

    def problems(store: dict[str, object]) -> list[str]:
        try:
            parse_config({**minimal, "store": store})
        except ConfigError as error:
            return error.problems
        return []

    assert problems({}) == []
    assert problems({"retention_days": 7, "audit_retention_days": 365}) == []
    assert problems({"retention_days": 0}) == [
        "store.retention_days: Input should be greater than or equal to 1"
    ]
    assert problems({"retention_days": 30, "audit_retention_days": 7}) == [
        "store.audit_retention_days: 7 is shorter than store.retention_days (30); audits must "
        "outlive the conversations they record (leave it unset to keep them)"
    ]
    assert problems({"retention_day": 30}) == [
        'store.retention_day: unknown key (did you mean "retention_days"?)'
    ]
