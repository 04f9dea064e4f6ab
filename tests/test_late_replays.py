"""Replays know their age: a message or a Stop acknowledged by a process killed (`kill -9`)
before it handled them, replayed only after a newer message was handled in its thread by
the restarted process, answers and withdraws nothing newer, stops no newer turn, and says
in the thread that it came late. Real `kelpie run` processes, on SQLite and PostgreSQL.

The dead process's hold on the delivery (its lease) is kept in the store until the newer
message was handled, then let lapse: what a long restart would do, without waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlmodel import col

from bot.slack import copy
from bot.slack.progress import STOP_ACTION_ID
from bot.store.db import Database, executing
from bot.store.tables import InboundEventRow
from tests.bot_processes import Start
from tests.test_approvals import (
    approval_id,
    card_text,
    has_buttons,
    real_writes,
    wait_said,
)
from tests.test_replayed_requests import TURN_S, kill_waiting_on, on, rows
from tests.test_streaming import key, stop_button
from tests.world import ALICE, BOB, CAROL, DAVE, OPS_CHANNEL, World

SCALE = ("scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 5})


async def hold_dead_leases(url: str, until: datetime) -> None:
    """Unhandled deliveries stay the dead process's until `until` (no one takes them over)."""
    db = Database(url)
    try:
        statement = (
            update(InboundEventRow)
            .where(col(InboundEventRow.handled_at).is_(None))
            .values(lease_expires_at=until)
        )
        await db.write(executing(statement))
    finally:
        await db.close()


def far() -> datetime:
    return datetime.now(UTC) + timedelta(days=1)


def lapsed() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=1)


async def all_handled(url: str) -> None:
    def unhandled() -> Any:
        return rows(url, "SELECT key FROM inbound_events WHERE handled_at IS NULL")

    for _ in range(200):
        if not await unhandled():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("a delivery was never handled")


async def cards_in(world: World, thread_ts: str, count: int) -> list[Any]:
    def find(server: Any) -> Any:
        found = [
            m
            for m in server.thread(OPS_CHANNEL, thread_ts)
            if m.is_bot and any(b.get("block_id", "").startswith("approval:") for b in m.blocks)
        ]
        return found if len(found) >= count else None

    found: list[Any] = await world.slack.wait_for(find, timeout=TURN_S)
    return found


async def test_a_message_replayed_after_a_newer_one_was_handled_is_not_answered(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    # ALICE's question starts a thread; kelpie dies looking up the channel's name for it.
    first = world.slack.mention(OPS_CHANNEL, ALICE, "how is checkout-api doing?")
    await kill_waiting_on(
        world, bot, "conversations.info", lambda: world.slack.deliver_event(first)
    )
    await hold_dead_leases(database_url, far())

    # Restarted, it handles her newer message in that thread: a card for her change.
    await start()
    world.model.reply_tool_calls([SCALE])  # the turn ends with the card posted
    newer = world.slack.mention(OPS_CHANNEL, ALICE, "scale it to 5", thread_ts=first["ts"])
    await world.slack.deliver_event(newer)
    [card] = await cards_in(world, first["ts"], 1)
    asked = len(world.model.requests)

    # Only then is the older question replayed: it says it came late, and that is all.
    await hold_dead_leases(database_url, lapsed())
    await wait_said(world, first["ts"], copy.message_came_late(ALICE), timeout=TURN_S)
    await all_handled(database_url)
    assert len(world.model.requests) == asked
    now = world.slack.get_message(OPS_CHANNEL, card.ts)
    assert has_buttons(now) and "Withdrawn" not in card_text(now)
    identifier = approval_id(card)
    status = await rows(database_url, f"SELECT status FROM approvals WHERE id = '{identifier}'")
    assert status == [("pending",)]


async def test_a_stop_replayed_after_newer_activity_withdraws_and_stops_nothing_newer(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    world.model.reply_tool_calls([SCALE])  # the turn ends with the card posted
    mention = world.slack.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    await world.slack.deliver_event(mention)
    thread = mention["ts"]
    [older_card] = await cards_in(world, thread, 1)
    # BOB's follow-up runs a turn; DAVE (an approver) stops it, and kelpie dies checking him.
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    pods = world.kube.hold(r"/namespaces/shop/pods$")
    follow_up = world.slack.message(OPS_CHANNEL, BOB, "and the pods?", thread_ts=thread)
    await world.slack.deliver_event(follow_up)
    button = await stop_button(world, OPS_CHANNEL, thread, after=follow_up["ts"])
    stop = world.slack.block_action(
        DAVE, OPS_CHANNEL, button.ts, STOP_ACTION_ID, key(OPS_CHANNEL, thread)
    )
    await kill_waiting_on(
        world, bot, "usergroups.users.list", lambda: world.slack.deliver("interactive", stop)
    )
    pods.set()
    await hold_dead_leases(database_url, far())

    # Restarted: BOB asks for a change of his own (a newer card), then CAROL's newer turn
    # runs (her message leaves his card alone, as his own would not).
    await start()
    world.model.reply_tool_calls([SCALE])
    await world.slack.deliver_event(
        world.slack.message(OPS_CHANNEL, BOB, "scale it to 5 please", thread_ts=thread)
    )
    newer_card = (await cards_in(world, thread, 2))[1]
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("The pods are fine.")
    pods = world.kube.hold(r"/namespaces/shop/pods$")
    newer_question = world.slack.message(OPS_CHANNEL, CAROL, "and the pods now?", thread_ts=thread)
    await world.slack.deliver_event(newer_question)
    await stop_button(world, OPS_CHANNEL, thread, after=newer_question["ts"])  # her turn runs

    # The stop is replayed now: the card waiting when it was pressed is withdrawn, the newer
    # card and the newer turn are left alone, and the thread says the stop came late.
    await hold_dead_leases(database_url, lapsed())
    await wait_said(world, thread, copy.stop_came_late(DAVE), timeout=TURN_S)
    older = world.slack.get_message(OPS_CHANNEL, older_card.ts)
    assert not has_buttons(older) and f"Withdrawn: not executed by <@{DAVE}>" in card_text(older)
    newer = world.slack.get_message(OPS_CHANNEL, newer_card.ts)
    assert has_buttons(newer) and "Withdrawn" not in card_text(newer)
    pods.set()
    await wait_said(world, thread, "The pods are fine.", timeout=TURN_S)
    assert not any(
        copy.stopped_by(DAVE) in (m.text or "") for m in world.slack.thread(OPS_CHANNEL, thread)
    )
    await all_handled(database_url)
    assert real_writes(world) == []
