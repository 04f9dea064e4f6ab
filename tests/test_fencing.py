"""Leases that fence, against the real peers: an approved write held up longer than its
lease (a slow PreToolUse hook) while this process's takeover work is stuck behind Slack
runs once and is never reported "not executed"; a store locked at the moment an approved
write starts, or when a turn's end is recorded, delays them and wedges nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.agent.takeover import LeaseKeeper
from bot.slack import copy as slack_copy
from bot.store.db import Database
from bot.store.turns import Replica, TurnRepository
from bot.values import Message, Role, SessionInfo
from tests.peers.slack_server import TEAM_ID
from tests.test_approvals import card_text, click, propose_scale, real_writes, replicas
from tests.test_roles_e2e import write_hook
from tests.world import ALICE, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World


def bot_texts(world: World, channel: str, thread_ts: str) -> list[str]:
    return [m.text or "" for m in world.slack.thread(channel, thread_ts) if m.is_bot]


async def seed_dead_turn(world: World) -> str:
    """A running turn left by a replica that died (its lease lapsed), in
    a thread of its own: whoever takes it over closes it there."""
    asked = world.slack.post_user_message(SHOP_CHANNEL, ALICE, "<@U0KELPIE> still there?")
    thread = SessionInfo(
        id=0,
        session_key=f"{TEAM_ID}:{SHOP_CHANNEL}:{asked.ts}",
        team_id=TEAM_ID,
        channel_id=SHOP_CHANNEL,
        thread_ts=asked.ts,
        is_dm=False,
        role="viewer",
        cluster="prod",
        namespace="shop",
        started_by=ALICE,
    )
    db = Database(world.config.database.url)
    dead = Replica("dead", timedelta(milliseconds=1))  # lapsed as soon as it is taken
    try:
        question = [Message(Role.USER, "still there?", slack_user=ALICE)]
        assert await TurnRepository(db, dead).begin(
            thread, "turn-dead", ALICE, question, claim=True
        )
    finally:
        await db.close()
    return asked.ts


async def test_an_approved_write_outlasting_its_lease_runs_once_and_is_never_called_not_executed(
    any_db_world: World,
):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    slow = world.tmp / "slow-hook"
    hook = write_hook(world.tmp, "slow.sh", f"cat > /dev/null\n[ -f {slow} ] && sleep 15\nexit 0\n")
    await world.start_bot(
        {
            "database": {"lease_s": 3},
            "hooks": {"pre_tool_use": [{"match": "write/*", "command": [hook], "timeout_s": 40}]},
        }
    )
    mention, card = await propose_scale(world)
    # A dead predecessor's turn is taken over here; closing it in its thread waits on
    # Slack (held), as a takeover behind the rate pacer does.
    closing = world.slack.hold("chat.postMessage", lambda p: p.get("text") == slack_copy.TURN_LOST)
    lost_thread = await seed_dead_turn(world)
    await world.slack.wait_for(
        lambda s: any(
            c.params.get("text") == slack_copy.TURN_LOST for c in s.calls_to("chat.postMessage")
        ),
        timeout=30,
    )
    slow.touch()  # the approved call's PreToolUse hook now takes 15 s: five leases
    await click(world, CAROL, card)
    await asyncio.sleep(7)  # the approval's lease would have lapsed twice over by now
    closing.set()
    await world.slack.wait_for(lambda s: replicas(world) == 5, timeout=60)
    done = await world.slack.wait_for(
        lambda s: "Done." in bot_texts(world, OPS_CHANNEL, mention["ts"]) or None, timeout=60
    )
    assert done
    assert len(real_writes(world)) == 1
    said = " ".join(bot_texts(world, OPS_CHANNEL, mention["ts"]))
    assert "not executed" not in said.lower()
    final = world.slack.get_message(OPS_CHANNEL, card.ts)
    assert final is not None and "not executed" not in card_text(final).lower()
    # The dead predecessor's turn was closed in its own thread all the same.
    assert slack_copy.TURN_LOST in bot_texts(world, SHOP_CHANNEL, lost_thread)


def lock_sqlite(db: Path, seconds: float) -> None:
    """Another process's transaction holding SQLite's write lock for `seconds`."""
    connection = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        time.sleep(seconds)
        connection.execute("COMMIT")
    finally:
        connection.close()


async def test_a_store_locked_as_an_approved_write_starts_delays_the_write_which_runs_once(
    world: World,
):
    hooked = world.tmp / "hooked"
    armed = world.tmp / "armed"
    hook = write_hook(
        world.tmp,
        "mark.sh",
        f"cat > /dev/null\nif [ -f {armed} ]; then touch {hooked}; sleep 1; fi\nexit 0\n",
    )
    await world.start_bot(
        {"hooks": {"pre_tool_use": [{"match": "write/*", "command": [hook], "timeout_s": 20}]}}
    )
    mention, card = await propose_scale(world)
    armed.touch()
    await click(world, CAROL, card)
    for _ in range(400):  # the approved call's hook ran: the write starts in a second
        if hooked.exists():
            break
        await asyncio.sleep(0.05)
    await asyncio.to_thread(lock_sqlite, world.tmp / "k.db", 8)
    await world.slack.wait_for(lambda s: replicas(world) == 5, timeout=60)
    await world.slack.wait_for(
        lambda s: "Done." in bot_texts(world, OPS_CHANNEL, mention["ts"]) or None, timeout=60
    )
    assert len(real_writes(world)) == 1
    said = " ".join(bot_texts(world, OPS_CHANNEL, mention["ts"]))
    assert "not executed" not in said.lower()


async def answered(world: World, thread_ts: str, text: str) -> Any:
    return await world.slack.wait_for(
        lambda s: text in " ".join(bot_texts(world, SHOP_CHANNEL, thread_ts)) or None,
        timeout=60,
    )


NATIVE = {"slack": {"streaming": "native"}}


async def test_a_turn_end_hitting_a_locked_store_is_retried_and_the_thread_goes_on(world: World):
    await world.start_bot(NATIVE)
    world.model.reply_text("First answer.")
    ending = world.slack.hold("chat.stopStream")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "first?")
    await world.slack.wait_for(lambda s: s.calls_to("chat.stopStream") or None, timeout=30)
    # The turn's answer is stored and its stream is closing: its end is recorded next,
    # while another process holds the store for longer than one busy timeout.
    locking = asyncio.create_task(asyncio.to_thread(lock_sqlite, world.tmp / "k.db", 5))
    await asyncio.sleep(0.5)
    ending.set()
    await locking
    world.model.reply_text("Second answer.")
    await world.mention(SHOP_CHANNEL, ALICE, "second?", thread_ts=mention["ts"])
    assert await answered(world, mention["ts"], "Second answer.")


async def test_a_turn_whose_end_cannot_be_stored_is_released_with_a_note(world: World):
    await world.start_bot({**NATIVE, "database": {"lease_s": 3}})
    world.model.reply_text("First answer.")
    ending = world.slack.hold("chat.stopStream")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "first?")
    await world.slack.wait_for(lambda s: s.calls_to("chat.stopStream") or None, timeout=30)
    # Locked for longer than every retry of the turn's end: it is let go, and closed
    # in its thread with a note once its lease lapsed.
    locking = asyncio.create_task(asyncio.to_thread(lock_sqlite, world.tmp / "k.db", 25))
    await asyncio.sleep(0.5)
    ending.set()
    await locking
    assert await answered(world, mention["ts"], slack_copy.TURN_RELEASED)
    world.model.reply_text("Second answer.")
    await world.mention(SHOP_CHANNEL, ALICE, "second?", thread_ts=mention["ts"])
    assert await answered(world, mention["ts"], "Second answer.")


class Beats:
    """A heartbeat whose takeover work never ends (stuck behind Slack) and whose renewals
    fail while `failing`: what the `LeaseKeeper` does with each."""

    def __init__(self) -> None:
        self.renewals = 0
        self.lapses = 0
        self.failing = False
        self.stuck = asyncio.Event()

    async def renew(self) -> None:
        if self.failing:
            raise ConnectionError("the store is down")
        self.renewals += 1

    def lapsed(self) -> None:
        self.lapses += 1

    async def take_over(self) -> None:
        self.stuck.set()
        await asyncio.Event().wait()

    async def interrupts(self) -> None:
        pass


async def test_renewals_go_on_while_takeover_work_is_stuck_and_a_lapse_is_told():
    beats = Beats()
    keeper = LeaseKeeper(beats, 0.01, lease_s=0.05)
    keeper.start()
    try:
        await asyncio.wait_for(beats.stuck.wait(), 5)
        renewed = beats.renewals
        for _ in range(500):
            if beats.renewals >= renewed + 5:
                break
            await asyncio.sleep(0.01)
        assert beats.renewals >= renewed + 5 and beats.lapses == 0
        beats.failing = True  # no renewal for a whole lease: what was held must stop
        for _ in range(500):
            if beats.lapses:
                break
            await asyncio.sleep(0.01)
        assert beats.lapses >= 1
    finally:
        await keeper.stop()
