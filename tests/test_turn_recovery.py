"""A process that dies mid-turn, on one replica and on two: kelpie runs as real `kelpie run`
subprocesses against the test world's peers (and the tests' real PostgreSQL for two
replicas), is killed with SIGKILL, and the thread must show what a person needs: the
stream closed, one short note, every question answered or explained, nothing twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import update
from sqlmodel import col

from bot.approvals import copy as approval_copy
from bot.slack import copy
from bot.slack.progress import STOP_ACTION_ID
from bot.store.db import Database, executing
from bot.store.tables import TurnRow
from bot.store.wakeups import LISTENER_NAME
from tests.bot_processes import REPO, Launcher, Start
from tests.peers.model_server import HangStep, TextStep
from tests.postgres import PostgresServer
from tests.test_approval_crashes import card_settled, wait_db
from tests.test_approvals import (
    approval_id,
    card_now,
    card_text,
    click,
    has_buttons,
    propose_scale,
    real_writes,
    replicas,
    wait_card,
    wait_said,
)
from tests.test_chat import Terminal
from tests.test_replayed_requests import rows
from tests.test_streaming import has_stop_button, key, stop_button
from tests.test_turn_leases import kill_listeners
from tests.world import ALICE, BOB, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World, environ, merge

# Short leases: a dead replica's turns are taken over about three seconds after its death.
FAST_LEASES = {"slack": {"streaming": "native"}, "database": {"lease_s": 3}}
# Polls far longer than any wait here: only a notification explains a prompt reaction.
SLOW_POLLS = {
    "slack": {"streaming": "native", "on_new_message": "queue"},
    "database": {"lease_s": 600, "poll_s": 600},
}
# A fresh process imports LiteLLM before its first answer: a ceiling, not a speed check.
TURN_S = 120


def streams(world: World, thread_ts: str) -> list[Any]:
    return [m for m in world.slack.thread(SHOP_CHANNEL, thread_ts) if m.kind == "stream"]


def bot_texts(world: World, thread_ts: str) -> list[str]:
    return [m.text or "" for m in world.slack.thread(SHOP_CHANNEL, thread_ts) if m.is_bot]


async def said(world: World, thread_ts: str, text: str) -> None:
    await world.slack.wait_for(
        lambda s: any(text in t for t in bot_texts(world, thread_ts)), timeout=TURN_S
    )


async def hang_mid_stream(
    world: World, text: str, *, thread_ts: str | None = None, connection: int | None = None
) -> str:
    """A question whose turn reads the pods, then waits on the model: a live stream (on
    the replica behind the `connection`-th Socket Mode connection, if given)."""
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.enqueue(HangStep(300))
    asked = len(world.model.recorded)
    event = world.slack.mention(SHOP_CHANNEL, ALICE, text, thread_ts=thread_ts)
    await world.slack.deliver_event(event, connection=connection)
    root = thread_ts or event["ts"]
    await world.slack.wait_for(
        lambda s: (
            len(world.model.recorded) >= asked + 2
            and any(m.streaming for m in streams(world, root))
        ),
        timeout=TURN_S,
    )
    return root


async def hang_with_stop_button(world: World) -> tuple[str, Any]:
    """ALICE's question, run by the first replica (update mode), waits on the model: its
    thread and its progress message with kelpie's Stop button."""
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.enqueue(HangStep(300, then=TextStep("never shown")))
    event = world.slack.mention(SHOP_CHANNEL, ALICE, "why is checkout slow?")
    await world.slack.deliver_event(event, connection=0)
    await world.model.wait_for_requests(2, timeout=TURN_S)
    return event["ts"], await stop_button(world, SHOP_CHANNEL, event["ts"])


async def click_stop(world: World, user: str, button: Any, thread: str, connection: int) -> None:
    """`user` clicks the Stop button on `button` (a message in #shop's `thread`), delivered
    through the `connection`-th replica."""
    payload = world.slack.block_action(
        user, SHOP_CHANNEL, button.ts, STOP_ACTION_ID, key(SHOP_CHANNEL, thread)
    )
    await world.slack.wait_ack(
        await world.slack.deliver("interactive", payload, connection=connection)
    )


async def test_a_turn_killed_mid_stream_is_closed_with_a_note_after_a_restart(
    world: World, launch: Callable[..., Start]
):
    start = launch(FAST_LEASES)
    bot = await start()
    thread = await hang_mid_stream(world, "are the shop pods healthy?")
    bot.kill()
    assert any(m.streaming for m in streams(world, thread))

    await start()
    await said(world, thread, copy.TURN_LOST)
    assert not any(m.streaming for m in streams(world, thread))
    assert world.slack.session_status(SHOP_CHANNEL, thread) != "processing"
    await wait_db(
        world.tmp / "k.db", "SELECT state FROM turns", lambda rows: rows == [("interrupted",)]
    )
    # The thread is free again: a follow-up is answered, and the note was said once.
    world.model.reply_text("All three pods are running.")
    await world.slack.deliver_event(
        world.slack.mention(SHOP_CHANNEL, ALICE, "and now?", thread_ts=thread)
    )
    await said(world, thread, "All three pods are running.")
    assert sum(copy.TURN_LOST in t for t in bot_texts(world, thread)) == 1


async def dead_turn_lease(world: World, until: datetime) -> None:
    """The running turn the killed process left stays its own until `until`."""
    db = Database(f"sqlite:///{world.tmp / 'k.db'}")
    try:
        running = col(TurnRow.state) == "running"
        await db.write(executing(update(TurnRow).where(running).values(lease_expires_at=until)))
    finally:
        await db.close()


async def test_a_follow_up_that_asked_a_dead_turn_to_stop_is_answered_after_its_takeover(
    world: World, launch: Callable[..., Start]
):
    """The restarted process gets a follow-up while the dead process's turn still holds the
    thread: the follow-up asks that turn to stop, then the takeover closes it, slowly (Slack
    holds the close). The request was the dead turn's; the heartbeats that run meanwhile
    hand it to nothing here, so the follow-up's own turn is not stopped: it is answered."""
    start = launch(FAST_LEASES)
    bot = await start()
    thread = await hang_mid_stream(world, "are the shop pods healthy?")
    bot.kill()
    await dead_turn_lease(world, datetime.now(UTC) + timedelta(days=1))
    await start()
    world.model.reply_text("All three pods are running.")
    await world.slack.deliver_event(
        world.slack.mention(SHOP_CHANNEL, ALICE, "and now?", thread_ts=thread)
    )
    flagged = "SELECT 1 FROM turns WHERE state = 'running' AND interrupt_requested"
    await wait_db(world.tmp / "k.db", flagged, lambda rows: rows == [(1,)])

    closing = world.slack.hold("chat.stopStream")
    asked = len(world.slack.calls_to("chat.stopStream"))
    await dead_turn_lease(world, datetime.now(UTC) - timedelta(seconds=1))
    await world.slack.wait_for(lambda s: len(s.calls_to("chat.stopStream")) > asked, timeout=TURN_S)
    # The dead process's beat, the takeover's claim, then two heartbeats of this process.
    beats: set[Any] = set()

    def beaten(rows: list[Any]) -> bool:
        beats.update(rows)
        return len(beats) >= 4

    running = "SELECT heartbeat_at FROM turns WHERE state = 'running'"
    await wait_db(world.tmp / "k.db", running, beaten)
    closing.set()

    await said(world, thread, "All three pods are running.")
    await said(world, thread, copy.TURN_LOST)
    assert sum(copy.TURN_LOST in t for t in bot_texts(world, thread)) == 1


async def test_a_turn_killed_in_its_second_stream_message_has_both_closed_after_a_restart(
    world: World, launch: Callable[..., Start]
):
    start = launch(FAST_LEASES)
    bot = await start()
    # The first round says more than one stream message holds, then reads the pods; the
    # second round waits on the model: the turn is live in its second stream message.
    report = "\n\n".join(
        f"Pod checkout-{n} restarted at 0{n % 10}:00, out of memory." for n in range(400)
    )
    world.model.reply_tool_calls(
        [("list_pods", {"namespace": "shop"})], text=report, chunk_size=400
    )
    world.model.enqueue(HangStep(300))
    event = world.slack.mention(SHOP_CHANNEL, ALICE, "why do the shop pods restart?")
    await world.slack.deliver_event(event)
    thread = event["ts"]
    await world.slack.wait_for(
        lambda s: len(streams(world, thread)) == 2 and streams(world, thread)[1].streaming,
        timeout=TURN_S,
    )
    first, second = streams(world, thread)
    assert first.stream_state == "stopped"
    # Killed once the second message is stored as the turn's open one.
    await wait_db(
        world.tmp / "k.db",
        "SELECT open_messages FROM turns",
        lambda rows: rows == [(f'["{second.ts}"]',)],
    )
    bot.kill()

    await start()
    await said(world, thread, copy.TURN_LOST)
    closed = streams(world, thread)
    assert [m.stream_state for m in closed] == ["stopped", "stopped"]
    # The first message keeps the answer's beginning: it is not overwritten by the note.
    assert "Pod checkout-0 restarted" in closed[0].text
    assert copy.TURN_LOST_HEADER not in closed[0].text
    assert world.slack.session_status(SHOP_CHANNEL, thread) != "processing"
    assert sum(copy.TURN_LOST in t for t in bot_texts(world, thread)) == 1


async def test_a_message_acknowledged_but_not_handled_before_a_crash_is_answered_once(
    world: World, launch: Callable[..., Start]
):
    start = launch(FAST_LEASES)
    bot = await start()
    # The listener waits on Slack (the channel's name) after the delivery was stored and
    # acknowledged: the process dies in between.
    world.slack.delay("conversations.info", 60)
    event = world.slack.mention(SHOP_CHANNEL, ALICE, "how many pods run in shop?")
    envelope = await world.slack.deliver_event(event)
    await world.slack.wait_ack(envelope, timeout=TURN_S)
    await world.slack.wait_for(
        lambda s: any(c.method == "conversations.info" for c in s.calls), timeout=TURN_S
    )
    bot.kill()
    world.slack.clear_faults()
    world.model.reply_text("Three pods run in shop.")

    await start()
    await said(world, event["ts"], "Three pods run in shop.")
    await asyncio.sleep(4)  # another lease period: nothing is taken over twice
    assert sum("Three pods" in t for t in bot_texts(world, event["ts"])) == 1
    assert len(world.model.recorded) == 1


async def fetch(url: str, sql: str, *args: Any) -> list[Any]:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


async def thread_turns(url: str, thread_ts: str, *, until: list[str]) -> list[Any]:
    """The thread's turns, oldest first, once their states are `until` (the answer is
    posted just before its turn's end is stored)."""
    for _ in range(100):
        turns = await fetch(
            url,
            "SELECT t.state, t.owner FROM turns t JOIN sessions s ON s.id = t.session_id "
            "WHERE s.thread_ts = $1 ORDER BY t.created_at",
            thread_ts,
        )
        if [row["state"] for row in turns] == until:
            return turns
        await asyncio.sleep(0.1)
    raise AssertionError(f"the thread's turns were {[row['state'] for row in turns]}")


async def owner_pid(url: str) -> int:
    """The pid of the replica running the thread's turn (the lease owner is host:pid:…)."""
    rows = await fetch(url, "SELECT owner FROM turns WHERE state = 'running'")
    return int(str(rows[0]["owner"]).split(":")[1])


async def test_two_replicas_on_postgresql_share_the_work_and_take_over_a_dead_ones_turn(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    url = await postgres.new_database()
    start = launch(merge(FAST_LEASES, {"database": {"url": url}}))
    bots = [await start(), await start()]  # migrations at start take turns

    # A delivery Slack sends twice (a retry, here to the other replica) is answered once.
    world.model.reply_text("Checked once.")
    event = world.slack.mention(SHOP_CHANNEL, BOB, "is checkout up?")
    await world.slack.deliver_event(event, event_id="Ev0TWICE")
    await world.slack.deliver_event(event, event_id="Ev0TWICE", retry_attempt=1)
    await said(world, event["ts"], "Checked once.")

    # An approval card clicked twice, one click through each replica: decided and run once.
    mention, card = await propose_scale(world, timeout=TURN_S)
    await click(world, CAROL, card)
    await click(world, CAROL, card)
    final = await card_settled(world, card)
    assert not has_buttons(final) and "scaled shop/checkout-api to 5" in card_text(final)
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    # The decision's turn has its answer before the next question is scripted (the model's
    # script is one queue for every thread).
    await world.slack.wait_for(
        lambda s: any(
            m.is_bot and "Done." in (m.text or "") for m in s.thread(OPS_CHANNEL, mention["ts"])
        ),
        timeout=TURN_S,
    )

    # A newer message reaching the other replica (deliveries alternate between the two
    # sockets) interrupts the turn where it runs, and is answered.
    busy = await hang_mid_stream(world, "why is checkout slow?")
    world.model.reply_text("Checkout is fine now.")
    await world.slack.deliver_event(
        world.slack.mention(SHOP_CHANNEL, ALICE, "is it fine now?", thread_ts=busy)
    )
    await said(world, busy, "Checkout is fine now.")
    turns = await thread_turns(url, busy, until=["interrupted", "done"])
    assert turns[0]["owner"] != turns[1]["owner"]
    assert not any(m.streaming for m in streams(world, busy))

    # The replica running a turn dies mid-stream; the other one closes it in the thread.
    thread = await hang_mid_stream(world, "are the shop pods healthy?")
    pid = await owner_pid(url)
    running = next(bot for bot in bots if bot.process.pid == pid)
    running.kill()
    await said(world, thread, copy.TURN_LOST)
    assert not any(m.streaming for m in streams(world, thread))

    # The survivor holds the thread now: a follow-up is answered there.
    world.model.reply_text("Back to normal.")
    await world.slack.deliver_event(
        world.slack.mention(SHOP_CHANNEL, ALICE, "and now?", thread_ts=thread)
    )
    await said(world, thread, "Back to normal.")
    assert sum("Checked once." in t for t in bot_texts(world, event["ts"])) == 1
    assert sum(copy.TURN_LOST in t for t in bot_texts(world, thread)) == 1


async def test_a_stop_pressed_on_the_other_replica_stops_the_turn_where_it_runs(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    url = await postgres.new_database()
    start = launch(merge(FAST_LEASES, {"database": {"url": url}}))
    await start()
    await start()
    # Everything the person says reaches the first replica's connection, which runs it.
    world.model.reply_tool_calls(
        [("scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 5})]
    )
    mention = world.slack.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    await world.slack.deliver_event(mention, connection=0)
    thread = mention["ts"]
    card = await wait_card(world, thread, timeout=TURN_S)
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, thread) == "suspended", timeout=TURN_S
    )
    world.model.enqueue(HangStep(300, then=TextStep("never shown")))
    asked = len(world.model.requests)
    question = world.slack.message(OPS_CHANNEL, BOB, "what would that change?", thread_ts=thread)
    await world.slack.deliver_event(question, connection=0)
    await world.slack.wait_for(
        lambda s: (
            len(world.model.requests) > asked
            and s.session_status(OPS_CHANNEL, thread) == "processing"
        ),
        timeout=TURN_S,
    )

    # CAROL approves in #shop-ops: her stop, delivered to the other replica, stops BOB's
    # turn where it runs (the thread says she did) and withdraws the card.
    await world.slack.press_session_stop(OPS_CHANNEL, thread, CAROL, connection=1)
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, thread) == "active", timeout=TURN_S
    )
    turns = await thread_turns(url, thread, until=["awaiting_approval", "interrupted"])
    assert turns[0]["owner"] == turns[1]["owner"]  # both ran where the messages arrived
    stopped = await fetch(url, "SELECT stopped_by FROM turns WHERE state = 'interrupted'")
    assert [row["stopped_by"] for row in stopped] == [CAROL]  # asked through the table
    said_there = [m for m in world.slack.thread(OPS_CHANNEL, thread) if m.is_bot]
    assert any(f"Stopped by <@{CAROL}>" in (m.text or "") for m in said_there)
    assert not any(m.streaming for m in said_there)
    await world.slack.wait_for(
        lambda s: "Withdrawn" in card_text(s.get_message(OPS_CHANNEL, card.ts)), timeout=TURN_S
    )
    final = await card_now(world, card)
    assert f"by <@{CAROL}>" in card_text(final) and not has_buttons(final)

    # Nothing else runs: no further request to the model, nothing written, no new turn.
    await asyncio.sleep(2)
    assert len(world.model.requests) == asked + 1
    assert real_writes(world) == [] and replicas(world) == 3
    assert all("never shown" not in (m.text or "") for m in world.slack.thread(OPS_CHANNEL, thread))
    assert len(await fetch(url, "SELECT 1 FROM turns")) == 2


async def test_a_stop_asked_of_a_replica_that_then_died_is_said_by_the_one_taking_over(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    """The replica running a turn hangs (SIGSTOP) as ALICE's stop reaches the other one,
    which asks it through the table, then dies (SIGKILL): the takeover closes the turn
    saying who stopped it, not that kelpie restarted."""
    url = await postgres.new_database()
    start = launch({"slack": {"streaming": "update"}, "database": {"lease_s": 3, "url": url}})
    running, other = await start(), await start()
    thread, button = await hang_with_stop_button(world)
    assert await owner_pid(url) == running.process.pid

    running.freeze()
    await click_stop(world, ALICE, button, thread, connection=1)
    for _ in range(200):  # asked through the table; the frozen replica cannot act on it
        asked = await fetch(url, "SELECT state, stopped_by FROM turns")
        if [(row["state"], row["stopped_by"]) for row in asked] == [("running", ALICE)]:
            break
        await asyncio.sleep(0.1)
    assert [(row["state"], row["stopped_by"]) for row in asked] == [("running", ALICE)]
    running.kill()

    await said(world, thread, copy.stopped_by(ALICE))
    await thread_turns(url, thread, until=["interrupted"])
    progress = world.slack.get_message(SHOP_CHANNEL, button.ts)
    assert copy.stopped_by(ALICE) in (progress.text or "") and not has_stop_button(progress)
    # Said once, where the answer was (as a stop where it runs says it), nothing else.
    texts = bot_texts(world, thread)
    assert not any(copy.TURN_LOST in t or "restarted" in t for t in texts)
    assert sum(copy.stopped_by(ALICE) in t for t in texts) == 1
    assert world.slack.session_status(SHOP_CHANNEL, thread) != "processing"
    assert len(world.model.requests) == 2 and other.process.poll() is None


async def listeners(url: str) -> set[int]:
    """The backend pids of the replicas' wake-up listeners."""
    rows = await fetch(
        url, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", LISTENER_NAME
    )
    return {row["pid"] for row in rows}


async def test_replicas_wake_each_other_at_once_even_after_their_listeners_dropped(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    url = await postgres.new_database()
    start = launch(merge(SLOW_POLLS, {"database": {"url": url}}))
    await start()
    await start()
    for attempt in (1, 2):
        # A turn hangs on the first replica; a follow-up, queued behind it, reaches the other.
        thread = await hang_mid_stream(world, f"why is checkout slow ({attempt})?", connection=0)
        world.model.reply_text(f"Queued answer {attempt}.")
        follow = world.slack.mention(SHOP_CHANNEL, ALICE, "and the pods?", thread_ts=thread)
        await world.slack.deliver_event(follow, connection=1)
        await thread_turns(url, thread, until=["running", "queued"])
        # A stop there: the first replica is woken to interrupt its turn, whose end wakes
        # the second to run the follow-up (the heartbeat and the poll are minutes away).
        await world.slack.press_session_stop(SHOP_CHANNEL, thread, ALICE, connection=1)
        await said(world, thread, f"Queued answer {attempt}.")
        turns = await thread_turns(url, thread, until=["interrupted", "done"])
        assert turns[0]["owner"] != turns[1]["owner"]
        assert not any(m.streaming for m in streams(world, thread))
        assert sum(f"Stopped by <@{ALICE}>" in t for t in bot_texts(world, thread)) == 1
        if attempt == 1:  # both listening connections are killed; they come back
            before = await listeners(url)
            assert len(before) == 2 and await kill_listeners(url) == 2
            for _ in range(300):
                now = await listeners(url)
                if len(now) == 2 and not now & before:
                    break
                await asyncio.sleep(0.1)
            assert len(now) == 2 and not now & before


async def test_kelpies_stop_button_clicked_through_the_other_replica_stops_the_turn(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    url = await postgres.new_database()
    update = {"slack": {"streaming": "update"}, "database": {"lease_s": 3, "url": url}}
    start = launch(update)
    await start()
    await start()
    thread, button = await hang_with_stop_button(world)

    # BOB neither asked nor approves in #shop: the other replica tells him who may stop.
    await click_stop(world, BOB, button, thread, connection=1)
    whisper = await world.slack.wait_for(lambda s: s.ephemerals(SHOP_CHANNEL, BOB), timeout=TURN_S)
    assert f"<@{ALICE}>" in whisper[0].text
    assert (await fetch(url, "SELECT state FROM turns"))[0]["state"] == "running"
    # ALICE asked: her click there stops the turn where it runs, and the thread says so.
    await click_stop(world, ALICE, button, thread, connection=1)
    await said(world, thread, f"Stopped by <@{ALICE}>")
    await thread_turns(url, thread, until=["interrupted"])
    stopped = await fetch(url, "SELECT state, stopped_by FROM turns")
    assert [(row["state"], row["stopped_by"]) for row in stopped] == [("interrupted", ALICE)]
    await asyncio.sleep(2)
    assert len(world.model.requests) == 2
    assert all("never shown" not in t for t in bot_texts(world, thread))


async def test_a_stop_through_the_other_replica_withdraws_a_turn_still_queued(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    """The first replica's only slot is busy: a question there waits, queued, with a Stop
    button on its notice. A stop clicked through the other replica (which runs nothing in
    the thread) stops it before it runs, with the same who-may-stop check."""
    url = await postgres.new_database()
    one_slot = {"agent": {"max_concurrent_turns": 1}, "slack": {"streaming": "update"}}
    start = launch(merge(one_slot, {"database": {"lease_s": 3, "url": url}}))
    await start()
    await start()
    busy = world.model.reply_held(then=TextStep("first answer"))
    first = world.slack.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.slack.deliver_event(first, connection=0)
    await world.model.wait_for_requests(1, timeout=TURN_S)
    second = world.slack.mention(SHOP_CHANNEL, BOB, "second question")
    await world.slack.deliver_event(second, connection=0)
    thread = second["ts"]
    notice = await stop_button(world, SHOP_CHANNEL, thread)
    await thread_turns(url, thread, until=["queued"])

    await click_stop(world, ALICE, notice, thread, connection=1)  # neither asked nor approves
    whisper = await world.slack.wait_for(
        lambda s: s.ephemerals(SHOP_CHANNEL, ALICE), timeout=TURN_S
    )
    assert whisper[0].text == copy.who_may_stop(BOB, [])
    await click_stop(world, BOB, notice, thread, connection=1)
    await said(world, thread, copy.stopped_by(BOB))
    stopped = await fetch(url, "SELECT state, stopped_by FROM turns WHERE state != 'running'")
    assert [(row["state"], row["stopped_by"]) for row in stopped] == [("interrupted", BOB)]

    # The slot frees: the stopped turn passes through it without running, and the next
    # question on that replica is answered.
    busy.set()
    await said(world, first["ts"], "first answer")
    world.model.reply_text("third answer")
    third = world.slack.mention(SHOP_CHANNEL, ALICE, "third question")
    await world.slack.deliver_event(third, connection=0)
    await said(world, third["ts"], "third answer")
    assert len(world.model.requests) == 2
    assert not any("second question" in json.dumps(r) for r in world.model.requests)
    # Said in the notice, whose Stop button is gone: nothing else in the thread.
    assert bot_texts(world, thread) == [copy.stopped_by(BOB)]
    assert not has_stop_button(world.slack.get_message(SHOP_CHANNEL, notice.ts))
    await thread_turns(url, thread, until=["interrupted"])


async def approval_row(url: str, identifier: str) -> tuple[Any, ...]:
    """(outcome, owner, lease_expires_at) of an approval, as the database has it."""
    found = await rows(
        url, f"SELECT outcome, owner, lease_expires_at FROM approvals WHERE id = '{identifier}'"
    )
    assert len(found) == 1
    return tuple(found[0])


def thread_lines(world: World, thread_ts: str, card: Any, text: str) -> list[str]:
    """The bot's messages in the thread, other than the card, that contain `text`."""
    return [
        m.text or ""
        for m in world.slack.thread(OPS_CHANNEL, thread_ts)
        if m.is_bot and m.ts != card.ts and text in (m.text or "")
    ]


async def test_an_approved_write_running_on_a_live_replica_is_left_to_it_by_one_starting(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    """Replica A executes an approved write (held at the cluster) while replica B starts:
    B neither records an outcome nor says anything, however long A's write takes; A's
    write lands and the thread shows its one outcome."""
    url = await postgres.new_database()
    # A's held write must outlast B's start but not the Kubernetes client's 15 s request
    # timeout: on the OpenAI-wire client B starts without importing LiteLLM (seconds on a
    # loaded machine), which this test is not about.
    wire = {"models": {"profiles": {"default": {"client": "openai-compatible"}}}}
    start = launch({"database": {"lease_s": 3, "url": url}, **wire})
    await start()
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.", timeout=TURN_S)
    identifier = approval_id(card)
    write = world.kube.hold(r"/deployments/checkout-api/scale$")
    await click(world, CAROL, card)  # the only replica yet: A executes it
    await world.slack.wait_for(lambda s: len(real_writes(world)) == 1, timeout=TURN_S)

    await start()  # B reconciles at start (done before it connects to Slack)
    assert await rows(url, f"SELECT outcome FROM approvals WHERE id = '{identifier}'") == [(None,)]
    assert thread_lines(world, mention["ts"], card, "not executed") == []
    _, owner, first_lease = await approval_row(url, identifier)
    assert owner is not None
    # A's heartbeat keeps its lease while the write is held: B's takeover ticks (three
    # per lease) pass the first lease's expiry twice over and leave the row alone.
    async with asyncio.timeout(TURN_S):
        while (row := await approval_row(url, identifier))[2] < first_lease + timedelta(seconds=6):
            assert row[:2] == (None, owner)
            await asyncio.sleep(0.2)
    assert thread_lines(world, mention["ts"], card, "not executed") == []
    assert replicas(world) == 3

    write.set()
    final = await card_settled(world, card)
    assert not has_buttons(final) and "scaled shop/checkout-api to 5" in card_text(final)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.", timeout=TURN_S)
    outcome, _, _ = await approval_row(url, identifier)
    assert outcome is not None and not outcome.startswith("not executed")
    assert "not executed" not in card_text(final)
    assert thread_lines(world, mention["ts"], card, "not executed") == []
    assert len(real_writes(world)) == 1 and replicas(world) == 5


async def test_an_approved_write_left_by_a_killed_replica_is_reconciled_by_a_live_one(
    world: World, launch: Callable[..., Start], postgres: PostgresServer
):
    """Replica A is SIGKILLed after the click, before its write was sent: replica B, running
    all along and never restarted, reconciles the change once A's lease has expired."""
    url = await postgres.new_database()
    start = launch({"database": {"lease_s": 3, "url": url}})
    a = await start()
    b = await start()
    mention, card = await propose_scale(world, timeout=TURN_S)
    identifier = approval_id(card)
    reads = len(world.kube.requests)
    # The re-read just before the write waits: A dies with the write not yet sent.
    reread = world.kube.hold(r"/deployments/checkout-api$")
    payload = world.slack.block_action(CAROL, OPS_CHANNEL, card.ts, "kelpie_approve", identifier)
    await world.slack.deliver("interactive", payload, connection=0)  # A, connected first
    await world.slack.wait_for(
        lambda s: any(
            r.method == "GET" and r.path.endswith("/deployments/checkout-api")
            for r in world.kube.requests[reads:]
        ),
        timeout=TURN_S,
    )
    assert await rows(url, f"SELECT outcome FROM approvals WHERE id = '{identifier}'") == [(None,)]
    a.kill()
    reread.set()  # what B reads back is not held

    said = await wait_said(world, mention["ts"], "not executed", timeout=TURN_S)
    # True of a replica that never restarted: its sentence names no restart.
    assert approval_copy.RECONCILED_NOT_EXECUTED in said.text and "restart" not in said.text
    final = await card_settled(world, card)
    assert not has_buttons(final) and "not executed" in card_text(final)
    outcome, _, _ = await approval_row(url, identifier)
    assert outcome is not None and outcome.startswith("not executed")
    assert len(thread_lines(world, mention["ts"], card, "not executed")) == 1
    assert real_writes(world) == [] and replicas(world) == 3
    assert b.process.poll() is None  # the same live replica, not a restarted one


async def test_an_approved_write_held_in_kelpie_chat_is_left_to_it_by_a_replica(
    world: World, launch: Launcher, postgres: PostgresServer, tmp_path: Path
):
    """`kelpie chat` executes an approved write (held at the cluster) for several leases
    while a `kelpie run` replica ticks on the same PostgreSQL: the chat's heartbeat keeps the
    change its own, so the replica neither records an outcome nor says anything; the write
    lands once and the chat shows its outcome."""
    url = await postgres.new_database()
    by_name = {"match": {"name": "shop-ops"}, "role": "operator", "namespace": "shop"}
    channels = [*world.config_data["channels"], by_name]
    start = launch({"database": {"lease_s": 3, "url": url}, "channels": channels})
    await start()
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "traffic spike"}
    world.model.reply_tool_calls([("scale_deployment", args)])
    world.model.reply_text("Done: see the outcome above.")
    env = {**environ(world.slack), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    chat = Terminal(
        ["--config", str(tmp_path / "kelpie.yaml"), "--channel", "shop-ops", "--self-approve"],
        {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        tmp_path,
    )
    try:
        prompt = await chat.expect("you> ")
        chat.type("scale checkout-api to 5")
        asked = await chat.expect("Approve this change? [y/N] ", after=prompt)
        write = world.kube.hold(r"/deployments/checkout-api/scale$")
        chat.type("y")
        await world.slack.wait_for(lambda s: len(real_writes(world)) == 1, timeout=TURN_S)
        ((identifier,),) = await rows(url, "SELECT id FROM approvals")
        _, owner, first_lease = await approval_row(url, identifier)
        # The replica's takeover ticks (three per lease) pass the first lease's expiry
        # twice over while the chat's heartbeat renews it: the row stays the chat's.
        async with asyncio.timeout(TURN_S):
            while (row := await approval_row(url, identifier))[2] < first_lease + timedelta(
                seconds=6
            ):
                assert row[:2] == (None, owner)
                await asyncio.sleep(0.2)

        write.set()
        await chat.expect("outcome: scaled shop/checkout-api to 5 replicas", after=asked)
        outcome, _, _ = await approval_row(url, identifier)
        assert outcome is not None and not outcome.startswith("not executed")
        assert len(real_writes(world)) == 1 and replicas(world) == 5
        # Nothing of it went to Slack: the replica never took the change up.
        assert [c for c in world.slack.calls if "terminal" in str(c.params.get("channel"))] == []
        await chat.expect("you> ", after=asked)
        chat.type("/quit")
        assert await chat.wait_exit() == 0
    finally:
        await chat.close()


async def test_a_turn_killed_after_its_answer_ended_in_slack_keeps_the_answer_it_showed(
    world: World, launch: Callable[..., Start]
):
    """The stream's close is recorded with the turn's end, one commit once the turn is
    shown done: killed in between (the answer stored, the stream stopped, its ✅ on the
    way), the restart finds the answer stored and never overwrites the message showing it."""
    start = launch(FAST_LEASES)
    bot = await start()
    answer = "All three shop pods are running."
    world.model.reply_text(answer)
    world.slack.hold("reactions.add", lambda params: params.get("name") == "white_check_mark")
    event = world.slack.mention(SHOP_CHANNEL, ALICE, "are the shop pods running?")
    await world.slack.deliver_event(event)
    thread = event["ts"]
    await world.slack.wait_for(
        lambda s: any(m.stream_state == "stopped" for m in streams(world, thread)),
        timeout=TURN_S,
    )
    [stream] = streams(world, thread)
    assert answer in stream.text
    # The close is not recorded yet: the turn is live with its stream open in the store.
    await wait_db(
        world.tmp / "k.db",
        "SELECT state, open_messages FROM turns",
        lambda rows: rows == [("running", f'["{stream.ts}"]')],
    )
    bot.kill()
    world.slack.clear_faults()  # the held ✅ of the dead process is dropped

    await start()
    await said(world, thread, copy.TURN_LOST)
    [stream] = streams(world, thread)
    assert stream.stream_state == "stopped"
    assert answer in stream.text
    assert copy.TURN_LOST_HEADER not in stream.text
    assert world.slack.session_status(SHOP_CHANNEL, thread) != "processing"
    await wait_db(
        world.tmp / "k.db", "SELECT state FROM turns", lambda rows: rows == [("interrupted",)]
    )
    await wait_db(
        world.tmp / "k.db",
        "SELECT role, content FROM messages ORDER BY id DESC LIMIT 1",
        lambda rows: rows == [("assistant", answer)],
    )
