"""Threads as Slack agent sessions, end to end against the fake Slack: `processing` with the
question's first line as title while a turn runs, `suspended` while an approval card waits,
`active` once answered; Slack's stop button (`agent_session_stopped`) stops the turn like
kelpie's own, for the asker or an approver only; without the event subscription everything
still works, without a stop button."""

from __future__ import annotations

import logging

import pytest

from bot.slack.manifest import BOT_EVENTS, BOT_SCOPES
from tests.peers.model_server import HangStep, TextStep
from tests.test_approvals import click, propose_scale, wait_said
from tests.world import ALICE, BOB, CAROL, DAVE, OPS_CHANNEL, SHOP_CHANNEL, World

NATIVE = {"slack": {"streaming": "native"}}
TURN_S = 30


def bot_messages(world: World, channel: str, thread_ts: str) -> list:
    return [m for m in world.slack.thread(channel, thread_ts) if m.is_bot]


def test_the_manifest_declares_an_agent_app_subscribed_to_its_stop_event():
    assert "agent_session_stopped" in BOT_EVENTS and "message_stream_stopped" not in BOT_EVENTS
    assert "assistant:write" in BOT_SCOPES


async def test_a_thread_is_a_session_processing_with_a_title_then_active(world: World):
    world.model.reply_text("All pods are fine.")
    await world.start_bot(NATIVE)
    question = "why is checkout-api " + "really " * 40 + "slow?\nmore detail on a second line"
    mention = await world.mention(SHOP_CHANNEL, ALICE, question)
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    session = world.slack.agent_sessions[(SHOP_CHANNEL, mention["ts"])]
    assert session.statuses == ["processing", "active"]
    assert session.initiator == ALICE
    assert session.title is not None and len(session.title) <= 200
    assert session.title.startswith("why is checkout-api really") and "second" not in session.title
    # No stream was started with the retired is_stoppable argument.
    assert all("is_stoppable" not in c.params for c in world.slack.calls_to("chat.startStream"))


async def test_the_askers_stop_button_stops_the_turn_and_confirms_in_the_thread(world: World):
    world.model.enqueue(HangStep(20, then=TextStep("too late")))
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "slow?")
    await world.slack.wait_for_call("chat.startStream", timeout=TURN_S)
    await world.model.wait_for_requests(1)
    await world.slack.press_session_stop(SHOP_CHANNEL, mention["ts"], ALICE)
    await world.slack.wait_for(
        lambda s: s.session_status(SHOP_CHANNEL, mention["ts"]) == "active", timeout=TURN_S
    )
    await world.drain()

    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert len(replies) == 1 and not replies[0].streaming
    assert replies[0].text.endswith(f"Stopped by <@{ALICE}>._")
    assert "too late" not in replies[0].text and len(world.model.requests) == 1
    assert world.slack.reactions(SHOP_CHANNEL, mention["ts"]) == ["x"]


async def test_only_the_asker_or_an_approver_may_stop_through_the_session(world: World):
    world.kube.delay(r"/namespaces/shop/pods$", 4)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.enqueue(HangStep(20, then=TextStep("never shown")))
    await world.start_bot(NATIVE)
    mention = await world.mention(OPS_CHANNEL, ALICE, "pods in shop?")
    await world.slack.wait_for_call("chat.startStream", timeout=TURN_S)

    # BOB neither asked nor approves in #shop-ops: Slack stopped the stream, but the turn
    # goes on and he is told who may stop it.
    await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], BOB)
    whisper = await world.slack.wait_for(lambda s: s.ephemerals(OPS_CHANNEL, BOB))
    assert "<@U0ALICE>" in whisper[0].text and "<@U0CAROL>" in whisper[0].text
    assert world.slack.session_status(OPS_CHANNEL, mention["ts"]) == "processing"
    await world.model.wait_for_requests(2)  # the turn went on after the tool

    # DAVE approves writes there (through the SRE group): his stop ends the turn.
    await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], DAVE)
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, mention["ts"]) == "active", timeout=TURN_S
    )
    await world.drain()
    assert len(world.model.requests) == 2
    texts = [m.text for m in bot_messages(world, OPS_CHANNEL, mention["ts"])]
    assert texts[-1].endswith(f"Stopped by <@{DAVE}>._")
    assert all("never shown" not in text for text in texts)


async def test_without_the_event_subscription_turns_work_without_a_stop_button(
    world: World, caplog: pytest.LogCaptureFixture
):
    world.slack.session_stop_subscribed = False
    world.model.reply_text("First.")
    world.model.reply_text("Second.")
    await world.start_bot(NATIVE)
    with caplog.at_level(logging.WARNING, logger="bot.slack.progress.sessions"):
        for text in ("one?", "two?"):
            mention = await world.mention(SHOP_CHANNEL, ALICE, text)
            await world.slack.wait_for(
                lambda s, ts=mention["ts"]: s.session_status(SHOP_CHANNEL, ts) == "active",
                timeout=TURN_S,
            )
            await world.drain()
            assert bot_messages(world, SHOP_CHANNEL, mention["ts"])[0].text in ("First.", "Second.")
    warnings = [r.getMessage() for r in caplog.records if "agent_session_stopped" in r.getMessage()]
    assert len(warnings) == 1  # said once per workspace, naming what to enable
    with pytest.raises(AssertionError):
        await world.slack.press_session_stop(SHOP_CHANNEL, mention["ts"], ALICE)


async def test_a_workspace_that_refuses_agent_sessions_still_gets_answers(world: World):
    world.slack.fail("agents.sessions.setStatus", "not_allowed_token_type")
    world.model.reply_text("First.")
    world.model.reply_text("Second.")
    await world.start_bot(NATIVE)
    threads = []
    for count, text in enumerate(("one?", "two?"), start=1):
        threads.append(await world.mention(SHOP_CHANNEL, ALICE, text))
        await world.slack.wait_for(
            lambda s, n=count: len([c for c in s.calls_to("chat.stopStream") if c.ok]) == n,
            timeout=TURN_S,
        )
        await world.drain()
    assert len(world.slack.calls_to("agents.sessions.setStatus")) == 1  # remembered
    texts = [bot_messages(world, SHOP_CHANNEL, t["ts"])[0].text for t in threads]
    assert texts == ["First.", "Second."]


async def statuses_once(world: World, thread_ts: str, status: str) -> list[str]:
    """The session's statuses so far, once it shows `status`."""
    await world.slack.wait_for(
        lambda s: s.session_status(OPS_CHANNEL, thread_ts) == status, timeout=TURN_S
    )
    return world.slack.agent_sessions[(OPS_CHANNEL, thread_ts)].statuses


async def test_a_session_is_suspended_while_its_card_waits_and_processing_once_decided(
    world: World,
):
    await world.start_bot(NATIVE)
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.")
    # The turn ended at the card: the thread waits on a person, with no stop button.
    assert await statuses_once(world, mention["ts"], "suspended") == ["processing", "suspended"]
    with pytest.raises(AssertionError):
        await world.slack.press_session_stop(OPS_CHANNEL, mention["ts"], ALICE)

    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.")
    await world.drain()
    assert await statuses_once(world, mention["ts"], "active") == [
        "processing",
        "suspended",
        "processing",  # the decision resumed the turn: it answers in the thread
        "active",
    ]


async def test_a_card_still_waiting_after_another_turn_keeps_the_session_suspended(
    world: World,
):
    await world.start_bot(NATIVE)
    mention, card = await propose_scale(world, then="It waits for an approver.")
    await statuses_once(world, mention["ts"], "suspended")
    # A bystander's question is answered; the card (not his to withdraw) still waits.
    world.model.reply_text("Scaled.")
    question = world.slack.message(OPS_CHANNEL, BOB, "is it done?", thread_ts=mention["ts"])
    await world.slack.deliver_event(question)
    await wait_said(world, mention["ts"], "It waits for an approver.")
    await world.drain()
    assert world.slack.agent_sessions[(OPS_CHANNEL, mention["ts"])].statuses == [
        "processing",
        "suspended",
        "processing",
        "suspended",
    ]
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    assert (await statuses_once(world, mention["ts"], "active"))[-2:] == ["processing", "active"]


async def test_a_requesters_new_message_withdraws_the_card_and_the_session_ends_active(
    world: World,
):
    await world.start_bot(NATIVE)
    mention, _card = await propose_scale(world, then="Understood, standing down.")
    await statuses_once(world, mention["ts"], "suspended")
    follow_up = world.slack.message(OPS_CHANNEL, ALICE, "stop, don't", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow_up)
    await wait_said(world, mention["ts"], "Understood, standing down.")
    await world.drain()
    # No flicker: the withdrawal leaves the status to the turn her message started.
    assert await statuses_once(world, mention["ts"], "active") == [
        "processing",
        "suspended",
        "processing",
        "active",
    ]
