"""A finished turn's closing Slack calls left for later (its workspace's budget was spent)
are kept with its end in the store, so nothing a process leaves unsent is lost: after a
stop, the next start sends them; a live replica sends a stopped one's; after a crash
(SIGKILL) the restarted process does. The thread then stops showing kelpie at work: no
`eyes` reaction, no agent session left processing, no progress message with its Stop
button. End to end against the fake Slack, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from bot.store.db import Database, executing
from bot.store.repositories import SessionRepository
from bot.store.tables import TurnRow
from bot.store.turns import Replica, TurnRepository
from bot.values import TurnState
from tests.bot_processes import Launcher
from tests.peers.model_server import DynamicStep
from tests.peers.slack_server import SlackServer
from tests.test_replayed_requests import rows
from tests.test_slack_burst import (
    _answer,
    bot_limits,
    bot_messages,
    burst,
    fake_limits,
    has_stop_button,
    shown_answers,
)
from tests.test_turn_leases import THREAD
from tests.world import ALICE, DEV_CHANNEL, SHOP_CHANNEL, World, merge

# Posted progress messages (their end's edit is one of the calls left for later); short
# leases: what a stopped process holds is taken over about two seconds after it stopped.
UPDATE = {"slack": {"streaming": "update"}, "database": {"lease_s": 2}}


def working(server: SlackServer, channel: str, ts: str) -> list[str]:
    """What the thread still shows of a turn at work."""
    shown = []
    if any(has_stop_button(m) for m in bot_messages(server, channel, ts)):
        shown.append("stop button")
    if "eyes" in server.reactions(channel, ts):
        shown.append("eyes")
    session = server.agent_sessions.get((channel, ts))
    if session is not None and session.status == "processing":
        shown.append("processing")
    return shown


def unsettled(server: SlackServer, threads: list[tuple[str, str]]) -> list[Any]:
    return [(ts, shown) for c, ts in threads if (shown := working(server, c, ts))]


async def closings_left(url: str) -> list[Any]:
    """Turns with closing calls still to send, or with a message never recorded closed."""
    return await rows(
        url,
        "SELECT turn_id, closing_calls, open_messages FROM turns "
        "WHERE closing_calls IS NOT NULL OR open_messages != '[]'",
    )


async def answered_with_calls_left(world: World) -> list[tuple[str, str]]:
    """A burst past the Tier 3 budget, answered: some threads' closing calls wait."""
    world.slack.limits = fake_limits()
    world.model.reply_default(DynamicStep(_answer))
    threads = await burst(world)

    def all_answered(server: SlackServer) -> bool:
        return all(shown_answers(server, c, ts, i) for i, (c, ts) in enumerate(threads))

    await world.slack.wait_for(all_answered, timeout=60)
    return threads


@pytest.mark.parametrize("taker", ["restart", "replica"])
async def test_closing_calls_pending_at_a_stop_are_sent_by_the_next_process(
    any_db_world: World, taker: str
):
    world = any_db_world
    url = world.config.database.url
    first = await world.start_bot(UPDATE, pacing=bot_limits())
    threads = await answered_with_calls_left(world)
    assert unsettled(world.slack, threads), "the burst left no closing call for later"
    if taker == "replica":
        await world.start_bot(UPDATE, pacing=bot_limits())
    await world.stop_bot(first)

    # The stop gave them up in memory; the store still holds what each thread must be told.
    left = unsettled(world.slack, threads)
    assert left and len(await closings_left(url)) >= len(left)
    if taker == "restart":
        await world.start_bot(UPDATE, pacing=bot_limits())

    await world.slack.wait_for(lambda s: not unsettled(s, threads), timeout=60)
    for channel, ts in threads:
        # (A turn whose start had no room for its reaction shows none.)
        assert world.slack.reactions(channel, ts) in ([], ["white_check_mark"])
        session = world.slack.agent_sessions.get((channel, ts))
        assert session is None or session.status == "active"
    # Marked sent, and every progress message recorded closed (with the next commit).
    await nothing_left(url)


async def nothing_left(url: str) -> None:
    for _ in range(100):
        if not await closings_left(url):
            return
        await asyncio.sleep(0.1)
    assert await closings_left(url) == []


# `kelpie run` pacing itself to a tenth of Slack's budget (as each of ten replicas would):
# five reactions (Tier 3) and two reaction removals (Tier 2) a minute. Three turns' starts
# and ends need more, so at least one turn ends with its closing calls left for a minute.
KILLED = {
    "slack": {"streaming": "update", "rate_share": 0.1},
    "database": {"lease_s": 3},
}
# A fresh process imports LiteLLM before its first answer: a ceiling, not a speed check.
PROCESS_S = 120


async def test_closing_calls_left_by_a_killed_process_are_sent_after_a_restart(
    world: World, launch: Launcher, database_url: str
):
    start = launch(merge(KILLED, {"database": {"url": database_url}}))
    bot = await start()
    world.model.reply_default(DynamicStep(_answer))
    mentions = [
        world.slack.mention((SHOP_CHANNEL, DEV_CHANNEL)[i % 2], ALICE, f"question {i}")
        for i in range(3)
    ]
    for mention in mentions:
        await world.slack.deliver_event(mention)
    threads = [(m["channel"], m["ts"]) for m in mentions]
    await world.slack.wait_for(
        lambda s: all(shown_answers(s, c, ts, i) for i, (c, ts) in enumerate(threads)),
        timeout=PROCESS_S,
    )
    # Every turn's end is stored, one at least with closing calls its process never sent.
    ended = "SELECT closing_calls FROM turns WHERE ended_at IS NOT NULL"
    for _ in range(200):
        found = await rows(database_url, ended)
        if len(found) == len(threads) and any(row[0] for row in found):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"turns never ended with closing calls left: {found}")
    bot.kill()
    assert unsettled(world.slack, threads)

    await start()
    await world.slack.wait_for(lambda s: not unsettled(s, threads), timeout=PROCESS_S)
    for channel, ts in threads:
        assert world.slack.reactions(channel, ts) in ([], ["white_check_mark"])
    await nothing_left(database_url)


async def test_closing_calls_unsent_after_a_day_are_given_up_with_one_warning(
    world: World, caplog: pytest.LogCaptureFixture
):
    """A dead replica's leftovers from two days ago: the thread has long moved on."""
    caplog.set_level(logging.INFO, logger="bot.agent.takeover")
    url = world.config.database.url
    db = Database(url)
    await db.upgrade()
    asked = world.slack.post_user_message(SHOP_CHANNEL, ALICE, "question 0")
    thread = await SessionRepository(db).get_or_create(
        replace(THREAD, session_key=f"T0TEST:{SHOP_CHANNEL}:{asked.ts}", thread_ts=asked.ts)
    )
    dead = TurnRepository(db, Replica("dead", timedelta(seconds=0)))
    await dead.begin(thread, "t-old", ALICE, [], claim=True)
    eyes = {"channel": SHOP_CHANNEL, "timestamp": asked.ts, "name": "eyes"}
    await dead.finish(
        "t-old", TurnState.DONE, closing=json.dumps([{"method": "reactions.remove", "args": eyes}])
    )
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    await db.write(executing(update(TurnRow).values(ended_at=two_days_ago)))
    await db.close()

    await world.start_bot(UPDATE)
    await nothing_left(url)
    assert world.slack.calls_to("reactions.remove") == []
    given_up = [r for r in caplog.records if "giving up the closing Slack calls" in r.getMessage()]
    assert len(given_up) == 1
