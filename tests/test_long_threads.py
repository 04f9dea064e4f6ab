"""Long threads keep working (#32 item 2): a 400-message thread is answered within the
tier's budget; its older rounds are replaced in the request by kelpie's note (the thread's
decisions verbatim, the evidence references, a summary made by the low tier), so the
request still names the change approved in the thread's first hour; the stored messages
are never changed; `/kelpie payload` shows what was sent."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlmodel import col, func, select

from bot.agent.compaction import SUMMARY_PROMPT
from bot.config import parse_config
from bot.errors import ConfigError
from bot.store.approvals import WriteAuditRepository
from bot.store.compaction import ThreadMemory
from bot.store.db import Database, executing, inserting
from bot.store.repositories import SessionRepository
from bot.store.retention import Pruner, Retention
from bot.store.tables import ApprovalRow, MessageRow, SessionRow, ThreadSummaryRow, utcnow
from bot.values import SessionInfo, WriteAudit, WritePlan, WriteTarget, plan_to_json
from tests.peers.model_server import DynamicStep, TextStep
from tests.world import ALICE, CAROL, OPS_CHANNEL, World, merge

LOW_TIER_HISTORY = 24_000  # the test model is unknown: the low tier
CHANGE = "Scale deployment shop/checkout-api from 3 to 5 replicas"
SUMMARY = "Summary: after the scale-up people watched checkout-api's latency; nothing new broke."
ANSWER = "In the first hour checkout-api was scaled from 3 to 5 replicas, approved by Carol."
FILLER = "checkout-api p99 latency looks {n}ms in the last window, still watching it closely. " * 4


def _decide(body: dict[str, Any]) -> Any:
    system = str(body["messages"][0].get("content") or "")
    return TextStep(SUMMARY if system == SUMMARY_PROMPT else ANSWER, chunk_size=40)


async def _long_thread(world: World, thread_ts: str) -> int:
    """A thread whose first hour approved a scale, then 396 messages of watching."""
    db = world.bots[0].db
    key = f"T0TEST:{OPS_CHANNEL}:{thread_ts}"
    info = SessionInfo(
        0, key, "T0TEST", OPS_CHANNEL, thread_ts, False, "operator", "prod", "shop", ALICE
    )
    session = await SessionRepository(db).get_or_create(info)
    start = utcnow() - timedelta(days=1)
    plan = WritePlan(
        "scale",
        CHANGE,
        "prod",
        WriteTarget("Deployment", "shop", "checkout-api", "u1", "7"),
        (),
        {},
    )
    approval = ApprovalRow(
        id="a1b2c3d4e5f6",
        session_id=session.id,
        turn_id="t0",
        tool_call_id="call-0",
        tool="scale_deployment",
        plan_json=plan_to_json(plan),
        reason="traffic spike",
        role="operator",
        cluster="prod",
        channel_id=OPS_CHANNEL,
        thread_ts=thread_ts,
        requested_by=ALICE,
        status="approved",
        decided_by=CAROL,
        decided_at=start + timedelta(minutes=10),
        expires_at=start + timedelta(hours=1),
        created_at=start + timedelta(minutes=5),
    )
    await db.write(inserting(approval))
    await WriteAuditRepository(db).record(
        WriteAudit(
            approval.id,
            "outcome",
            "scale_deployment",
            "Deployment/shop/checkout-api",
            "u1",
            ALICE,
            CAROL,
            "spec.replicas 3 → 5",
            "scaled to 5 replicas",
        )
    )

    def said(turn: str, role: str, text: str, at: datetime, user: str | None = None) -> MessageRow:
        return MessageRow(
            session_id=session.id,
            turn_id=turn,
            role=role,
            slack_user=user,
            content=text,
            created_at=at,
        )

    rows = [
        said("t0", "user", "checkout is slow, scale checkout-api to 5", start, ALICE),
        said("t0", "assistant", "Proposed the scale; waiting for approval.", start),
        said("t1", "user", "[kelpie, not a person: Carol approved the scale]", start),
        said("t1", "assistant", "Scaled checkout-api to 5 replicas.", start),
    ]
    for n in range(2, 200):
        at = start + timedelta(hours=1, minutes=n)
        rows += [
            said(f"t{n}", "user", f"how is it now? ({n})", at, ALICE),
            said(f"t{n}", "assistant", FILLER.format(n=n), at),
        ]
    await db.write(inserting(*rows))
    return session.id


async def _stored(world: World, session_id: int) -> list[tuple[Any, ...]]:
    async with world.bots[0].db.sessions() as read:
        found = await read.exec(
            select(MessageRow.id, MessageRow.role, MessageRow.content)
            .where(MessageRow.session_id == session_id)
            .order_by(col(MessageRow.id))
        )
        return list(found.all())


async def test_a_400_message_thread_answers_within_budget_and_knows_the_first_hours_change(
    world: World,
):
    await world.start_bot()
    parent = world.slack.post_user_message(OPS_CHANNEL, ALICE, "checkout is slow")
    session_id = await _long_thread(world, parent.ts)
    before = await _stored(world, session_id)
    assert len(before) == 400
    world.model.reply_default(DynamicStep(_decide))

    await world.mention(
        OPS_CHANNEL, ALICE, "what did we change in the first hour?", thread_ts=parent.ts
    )
    await world.slack.wait_for(
        lambda s: (
            any(
                m.is_bot and ANSWER[:30] in (m.text or "") for m in s.thread(OPS_CHANNEL, parent.ts)
            )
            or None
        ),
        timeout=30,
    )
    await world.drain()

    summaries = [r for r in world.model.requests if r["messages"][0]["content"] == SUMMARY_PROMPT]
    [turn] = [r for r in world.model.requests if r["messages"][0]["content"] != SUMMARY_PROMPT]
    sent = sum(len(str(m.get("content") or "")) for m in turn["messages"])
    assert sent <= LOW_TIER_HISTORY, sent
    text = "\n".join(str(m.get("content") or "") for m in turn["messages"])
    # The first hour's approved change, carried verbatim by kelpie (not the summarizer).
    assert CHANGE in text and f"approved by <@{CAROL}>" in text
    assert "write done: scaled to 5 replicas" in text
    assert SUMMARY in text and "how is it now? (199)" in text
    assert "how is it now? (2)" not in text  # an older round: in the summary only
    # The low tier summarized the older rounds, each request within its own budget.
    assert summaries and all(
        sum(len(str(m.get("content") or "")) for m in r["messages"]) <= LOW_TIER_HISTORY
        for r in summaries
    )
    # Stored messages never change: the 400 are as they were, the turn's own came after.
    after = await _stored(world, session_id)
    assert after[:400] == before and len(after) > 400
    async with world.bots[0].db.sessions() as read:
        kept = (await read.exec(select(func.count()).select_from(ThreadSummaryRow))).one()
    assert kept == len(summaries)

    # `/kelpie payload` shows the request as sent, the note included.
    command = world.slack.slash_command("/kelpie", "payload", CAROL, OPS_CHANNEL)
    await world.slack.deliver("slash_commands", command)

    def shown(server: Any) -> Any:
        text = "".join(
            str(r.body.get("text")) for r in server.responses_to(command["response_url"])
        )
        return text if CHANGE in text else None

    payload = await world.slack.wait_for(shown, timeout=20)
    assert "its older rounds are not shown" in payload


def test_an_unknown_summary_profile_is_refused_with_a_sentence(world: World):
    data = merge(world.config_data, {"agent": {"summary_profile": "cheap"}})
    with pytest.raises(ConfigError) as refused:
        parse_config(data)
    assert 'agent.summary_profile: unknown profile "cheap"' in refused.value.problems


async def test_the_next_turn_extends_the_kept_summary_instead_of_starting_again(world: World):
    await world.start_bot()
    parent = world.slack.post_user_message(OPS_CHANNEL, ALICE, "checkout is slow")
    await _long_thread(world, parent.ts)
    world.model.reply_default(DynamicStep(_decide))
    asked: list[int] = []
    # The second question pastes a log: several older turns fall out of the window.
    pasted = "and since? the log:\n" + "checkout-api GET /cart 200 81ms\n" * 60
    for n, question in enumerate(("what changed first?", pasted), start=1):
        await world.mention(OPS_CHANNEL, ALICE, question, thread_ts=parent.ts)

        def answered(server: Any, n: int = n) -> Any:
            thread = server.thread(OPS_CHANNEL, parent.ts)
            found = [m for m in thread if m.is_bot and ANSWER[:30] in (m.text or "")]
            return len(found) >= n or None

        await world.slack.wait_for(answered, timeout=30)
        await world.drain()
        asked.append(len(_summary_requests(world)))
    second = _summary_requests(world)[asked[0] :]
    # The second turn summarized only what fell out of its window since, after the kept
    # summary: never the thread's start again.
    assert second
    prompts = [r["messages"][1]["content"] for r in second]
    assert all(p.startswith(f"Summary so far:\n{SUMMARY}") for p in prompts)
    assert not any("how is it now? (2)" in p for p in prompts)


def _summary_requests(world: World) -> list[dict[str, Any]]:
    return [r for r in world.model.requests if r["messages"][0]["content"] == SUMMARY_PROMPT]


async def test_an_idle_threads_summaries_go_with_its_conversation(database_url: str):
    db = Database(database_url)
    await db.upgrade()
    try:
        old = utcnow() - timedelta(days=40)
        info = SessionInfo(0, "T1:C1:1.0", "T1", "C1", "1.0", False, "viewer", "prod", None, "U1")
        session = await SessionRepository(db).get_or_create(info)
        await db.write(
            executing(
                update(SessionRow).where(col(SessionRow.id) == session.id).values(created_at=old)
            )
        )
        await db.write(
            inserting(
                MessageRow(
                    session_id=session.id, turn_id="t", role="user", content="hi", created_at=old
                )
            )
        )
        await ThreadMemory(db).keep_summary(session.id, 1, "they said hi", "m")
        retention = Retention(conversations=timedelta(days=30), audits=None)
        pruned = await Pruner(db, retention, pause_s=0).prune()
        assert pruned.sessions == 1
        assert await ThreadMemory(db).summary(session.id) is None
    finally:
        await db.close()
