"""A click or a slash command that was stored and acknowledged, but not handled when the
process died, is handled after a restart (or by another replica), exactly once.

kelpie runs as real `kelpie run` subprocesses against the test world's peers, on SQLite and
on the tests' real PostgreSQL, and is killed with SIGKILL at the moment between the record
and the handling: its listener waits on a Slack call it makes before deciding anything (the
approver's user group, the channel's name), and the test kills it once that call arrived.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from bot.slack import copy
from bot.slack.progress import STOP_ACTION_ID
from bot.store.db import Database
from tests.bot_processes import BotProcess, Launcher, Start
from tests.test_approval_crashes import card_settled
from tests.test_approvals import (
    approval_id,
    card_text,
    click,
    has_buttons,
    propose_scale,
    real_writes,
    replicas,
    wait_card,
    wait_said,
)
from tests.test_streaming import key, stop_button
from tests.world import ALICE, BOB, CAROL, DAVE, OPS_CHANNEL, SHOP_CHANNEL, World, merge

# Short leases: a dead replica's deliveries are taken over about three seconds after.
FAST_LEASES = {"database": {"lease_s": 3}}
# A fresh process imports LiteLLM before its first answer: a ceiling, not a speed check.
TURN_S = 120


def on(database_url: str, override: dict[str, Any] | None = None) -> dict[str, Any]:
    """Short leases on the test's database (SQLite or PostgreSQL), and `override`."""
    return merge(merge(FAST_LEASES, {"database": {"url": database_url}}), override or {})


async def rows(url: str, sql: str) -> list[Any]:
    db = Database(url)
    try:
        async with db.sessions() as session:
            return list((await session.exec(text(sql))).all())  # type: ignore[call-overload]
    finally:
        await db.close()


async def handled_once(url: str, kind: str) -> None:
    """The one delivery of `kind` ends handled: no replica dispatches it again."""
    sql = f"SELECT handled_at FROM inbound_events WHERE kind = '{kind}'"
    for _ in range(200):
        found = await rows(url, sql)
        assert len(found) == 1
        if found[0][0] is not None:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the {kind} delivery was never handled")


async def kill_waiting_on(world: World, bot: BotProcess, method: str, deliver: Any) -> str:
    """Deliver a request whose listener calls Slack's `method` before it decides anything;
    kill kelpie once it was acknowledged and that call arrived (its answer held back)."""
    asked = len(world.slack.calls_to(method))
    world.slack.hold(method)
    envelope: str = await deliver()
    await world.slack.wait_ack(envelope, timeout=TURN_S)
    await world.slack.wait_for(lambda s: len(s.calls_to(method)) > asked, timeout=TURN_S)
    bot.kill()
    await released(world)
    return envelope


async def released(world: World) -> None:
    """Once the killed process's connections are seen gone, held calls go: those it made are
    dropped, never applied (it died before they got through)."""
    await world.slack.wait_for(lambda s: s.connection_count == 0, timeout=20)
    world.slack.clear_faults()


async def applied_once_after_a_restart(
    world: World, database_url: str, start: Start, mention: Any, card: Any
) -> None:
    """DAVE's approval click died with kelpie before it was handled: nothing was decided or
    written; once kelpie is started again the card shows his approval and the cluster
    received the write once; the click is handled: nobody runs it again."""
    identifier = approval_id(card)
    assert await rows(database_url, f"SELECT status FROM approvals WHERE id = '{identifier}'") == [
        ("pending",)
    ]
    assert real_writes(world) == []

    await start()
    final = await card_settled(world, card)
    assert not has_buttons(final)
    assert f"Approved by <@{DAVE}>" in card_text(final)
    assert "scaled shop/checkout-api to 5" in card_text(final)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.", timeout=TURN_S)
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    await handled_once(database_url, "block_actions")
    assert world.slack.ephemerals(OPS_CHANNEL, DAVE) == []


async def test_an_approval_click_killed_before_it_was_handled_is_applied_after_a_restart(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.", timeout=TURN_S)
    # DAVE approves through the SRE user group, which kelpie asks Slack about at the click.
    await kill_waiting_on(world, bot, "usergroups.users.list", lambda: click(world, DAVE, card))
    await applied_once_after_a_restart(world, database_url, start, mention, card)


async def test_an_approval_click_posted_over_http_killed_before_it_was_handled_is_applied(
    world: World, launch: Launcher, database_url: str
):
    """The same over HTTP: Slack POSTs the click (signed), kelpie answers 200 once it is
    stored and dies before handling it; Slack sends nothing again, the restart handles it."""
    start = launch(on(database_url, {"slack": {"mode": "http"}}))
    bot = await start()
    world.model.reply_tool_calls(
        [("scale_deployment", {"namespace": "shop", "name": "checkout-api", "replicas": 5})]
    )
    world.model.reply_text("Scaled checkout-api to 5.")
    mention = world.slack.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    event = world.slack.event_envelope_payload(mention)
    assert (await world.slack.post_signed(launch.events_url, event))[0] == 200
    card = await wait_card(world, mention["ts"], timeout=TURN_S)
    identifier = approval_id(card)

    # DAVE approves through the SRE user group, which kelpie asks Slack about at the click.
    asked = len(world.slack.calls_to("usergroups.users.list"))
    world.slack.hold("usergroups.users.list")
    click = world.slack.block_action(DAVE, OPS_CHANNEL, card.ts, "kelpie_approve", identifier)
    assert (await world.slack.post_signed(launch.events_url, click))[0] == 200
    await world.slack.wait_for(
        lambda s: len(s.calls_to("usergroups.users.list")) > asked, timeout=TURN_S
    )
    bot.kill()
    world.slack.clear_faults()  # the dead process's held call is dropped, never applied
    await applied_once_after_a_restart(world, database_url, start, mention, card)


async def test_a_slash_command_killed_before_it_was_answered_is_answered_after_a_restart(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    command = world.slack.slash_command("/kelpie", "role", ALICE, SHOP_CHANNEL)
    # The command waits on the channel's name (a fresh process has none cached).
    await kill_waiting_on(
        world, bot, "conversations.info", lambda: world.slack.deliver("slash_commands", command)
    )
    assert world.slack.responses_to(command["response_url"]) == []

    await start()
    replies = await world.slack.wait_for(
        lambda s: s.responses_to(command["response_url"]), timeout=TURN_S
    )
    assert "*Role here:* `viewer`" in str(replies[0].body.get("text"))
    await handled_once(database_url, "command")
    assert len(world.slack.responses_to(command["response_url"])) == 1


async def test_a_click_replayed_after_its_card_expired_expires_and_runs_nothing(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url, {"roles": {"operator": {"approval": {"timeout_s": 15}}}}))
    bot = await start()
    _mention, card = await propose_scale(world, timeout=TURN_S)
    identifier = approval_id(card)
    await kill_waiting_on(world, bot, "usergroups.users.list", lambda: click(world, DAVE, card))
    # kelpie stays down until the card's deadline has passed.
    stored = await rows(database_url, f"SELECT expires_at FROM approvals WHERE id = '{identifier}'")
    deadline = datetime.fromisoformat(str(stored[0][0]))
    while datetime.now(UTC) <= deadline.replace(tzinfo=deadline.tzinfo or UTC):
        await asyncio.sleep(0.2)

    await start()
    final = await card_settled(world, card)
    assert not has_buttons(final) and "Expired with no decision" in card_text(final)
    said = await world.slack.wait_for(lambda s: s.ephemerals(OPS_CHANNEL, DAVE), timeout=TURN_S)
    assert "expired" in said[0].text
    assert real_writes(world) == [] and replicas(world) == 3
    assert await rows(database_url, f"SELECT status FROM approvals WHERE id = '{identifier}'") == [
        ("expired",)
    ]


async def test_a_click_applied_before_the_crash_is_not_applied_again_and_its_card_says_so(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    _mention, card = await propose_scale(world, timeout=TURN_S)
    identifier = approval_id(card)
    # The decision ran to its outcome; kelpie dies while the card is being updated with it,
    # before the click is marked handled.
    world.slack.hold("chat.update", lambda params: "Outcome" in str(params.get("blocks")))
    await click(world, CAROL, card)
    await world.slack.wait_for(
        lambda s: any("Outcome" in str(c.params.get("blocks")) for c in s.calls_to("chat.update")),
        timeout=TURN_S,
    )
    bot.kill()
    await released(world)
    assert len(real_writes(world)) == 1
    assert "Outcome" not in card_text(world.slack.get_message(OPS_CHANNEL, card.ts))

    await start()
    final = await card_settled(world, card)
    assert not has_buttons(final) and f"Approved by <@{CAROL}>" in card_text(final)
    assert "scaled shop/checkout-api to 5" in card_text(final)
    await handled_once(database_url, "block_actions")
    # Decided once, written once; the replayed click says nothing to the person who clicked.
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    decided = await rows(
        database_url, f"SELECT status, decided_by FROM approvals WHERE id = '{identifier}'"
    )
    assert decided == [("approved", CAROL)]
    assert world.slack.ephemerals(OPS_CHANNEL, CAROL) == []


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_click_a_dead_replica_left_is_applied_once_by_the_replicas_alive(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bots = [await start(), await start()]
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.", timeout=TURN_S)
    asked = len(world.slack.calls_to("usergroups.users.list"))
    world.slack.hold("usergroups.users.list")
    await world.slack.wait_ack(await click(world, DAVE, card), timeout=TURN_S)
    await world.slack.wait_for(
        lambda s: len(s.calls_to("usergroups.users.list")) > asked, timeout=TURN_S
    )
    # The replica that acknowledged the click dies; the other and a new one stay.
    clicks = "SELECT owner, handled_at FROM inbound_events WHERE kind = 'block_actions'"
    owners = await rows(database_url, clicks)
    pid = int(str(owners[0][0]).split(":")[1])
    dead = next(bot for bot in bots if bot.process.pid == pid)
    dead.kill()
    world.slack.clear_faults()
    await start()

    final = await card_settled(world, card)
    assert not has_buttons(final) and f"Approved by <@{DAVE}>" in card_text(final)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.", timeout=TURN_S)
    assert len(real_writes(world)) == 1 and replicas(world) == 5
    await handled_once(database_url, "block_actions")
    taken = await rows(database_url, clicks)
    assert int(str(taken[0][0]).split(":")[1]) != pid


async def test_a_stop_killed_before_it_was_handled_withdraws_the_cards_after_a_restart(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    mention, card = await propose_scale(world, timeout=TURN_S)
    thread = mention["ts"]
    # BOB's follow-up runs a turn (its pod list held) beside ALICE's waiting card.
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    pods = world.kube.hold(r"/namespaces/shop/pods$")
    follow_up = world.slack.message(OPS_CHANNEL, BOB, "and the pods?", thread_ts=thread)
    await world.slack.deliver_event(follow_up)
    button = await stop_button(world, OPS_CHANNEL, thread, after=follow_up["ts"])
    # DAVE, an approver through the SRE group, stops it: kelpie dies checking his group.
    stop = world.slack.block_action(
        DAVE, OPS_CHANNEL, button.ts, STOP_ACTION_ID, key(OPS_CHANNEL, thread)
    )
    await kill_waiting_on(
        world, bot, "usergroups.users.list", lambda: world.slack.deliver("interactive", stop)
    )
    pods.set()

    await start()
    # The turn died with the process (closed with a note); the stop withdraws the card, as
    # it would have, stops no other turn, and tells DAVE so.
    final = await card_settled(world, card)
    assert not has_buttons(final) and f"Withdrawn: not executed by <@{DAVE}>" in card_text(final)
    await wait_said(world, thread, copy.TURN_LOST, timeout=TURN_S)
    told = await world.slack.wait_for(lambda s: s.ephemerals(OPS_CHANNEL, DAVE), timeout=TURN_S)
    assert told[0].text == copy.STOP_AFTER_RESTART
    await handled_once(database_url, "block_actions")
    assert real_writes(world) == []
