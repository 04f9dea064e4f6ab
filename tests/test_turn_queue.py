"""A bounded number of turns run at once; the rest wait fairly by channel and say so."""

from __future__ import annotations

import asyncio
import json

from bot.agent.turns import Busy, CapReached, TurnCaps, TurnScheduler
from bot.slack import copy
from tests.peers.model_server import TextStep
from tests.test_streaming import click_stop, has_stop_button, key, stop_button
from tests.world import ALICE, BOB, CAROL, DEV_CHANNEL, SHOP_CHANNEL, World


class Notice:
    """A waiting turn's notice: records what it was told."""

    def __init__(self, turns: Turns, name: str) -> None:
        self._turns = turns
        self._name = name

    async def queued(self, running: int, ahead: int) -> None:
        self._turns.notices.append((self._name, running, ahead))

    async def left(self, started: bool) -> None:
        self._turns.left.append(self._name if started else f"{self._name} (dropped)")


class Turns:
    """Turn bodies the test releases by hand; records the order in which they start."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release: dict[str, asyncio.Event] = {}
        self.notices: list[tuple[str, int, int]] = []
        self.left: list[str] = []

    def body(self, name: str):
        self.release[name] = asyncio.Event()

        async def run(abort: asyncio.Event) -> None:
            self.started.append(name)
            await self.release[name].wait()

        return run

    def notice(self, name: str) -> Notice:
        return Notice(self, name)

    async def until_started(self, count: int) -> None:
        while len(self.started) < count:
            await asyncio.sleep(0)


async def test_waiting_turns_take_turns_by_channel_and_are_told_they_wait():
    scheduler = TurnScheduler(interrupt=False, max_running=1)
    turns = Turns()
    for name, lane in (("x", "busy"), ("b1", "busy"), ("b2", "busy"), ("q1", "quiet")):
        scheduler.submit(name, turns.body(name), lane=lane, on_queued=turns.notice(name))
    await turns.until_started(1)
    assert turns.notices == [("b1", 1, 0), ("b2", 1, 1), ("q1", 1, 2)]

    for step, name in enumerate(("x", "b1", "q1"), start=2):
        turns.release[name].set()
        await turns.until_started(step)
    # The quiet channel's turn went before the busy channel's second waiting turn.
    assert turns.started == ["x", "b1", "q1", "b2"]
    turns.release["b2"].set()
    await scheduler.drain()
    # Each waiting turn's notice was told when it stopped waiting, as it got its slot.
    assert turns.left == ["b1", "q1", "b2"]


async def test_an_interrupted_waiting_turn_gives_up_its_place():
    scheduler = TurnScheduler(interrupt=True, max_running=1)
    turns = Turns()
    scheduler.submit("s1", turns.body("first"), lane="c")
    await turns.until_started(1)
    scheduler.submit("s2", turns.body("old"), lane="c", on_queued=turns.notice("old"))
    await asyncio.sleep(0)
    # Supersedes the waiting one, whose notice is told it waits no more.
    scheduler.submit("s2", turns.body("new"), lane="c", on_queued=turns.notice("new"))
    await asyncio.sleep(0.05)
    assert turns.left == ["old (dropped)"]
    turns.release["first"].set()
    await turns.until_started(2)
    turns.release["new"].set()
    await scheduler.drain()
    assert turns.started == ["first", "new"]


async def test_a_turn_that_interrupts_another_can_itself_be_stopped():
    """The interrupted turn ends before its successor first runs: the successor must still
    be the session's running turn (a stop reaches it; the next message waits for it)."""
    scheduler = TurnScheduler(interrupt=True)
    turns = Turns()
    scheduler.submit("thread", turns.body("first"))
    await turns.until_started(1)
    scheduler.submit("thread", turns.body("second"))  # a new message interrupts the first
    await turns.until_started(2)
    assert scheduler.busy("thread")
    third = scheduler.submit("thread", turns.body("third"), may_interrupt=False)
    await asyncio.sleep(0.05)
    assert turns.started == ["first", "second"]  # the third waits for the second
    assert scheduler.interrupt("thread")  # a stop finds the second and ends it
    await turns.until_started(3)
    turns.release["third"].set()
    await third
    await scheduler.drain()


async def test_a_thread_over_the_limit_shows_it_is_queued_then_gets_its_answer(world: World):
    # The first question keeps the only slot busy: the model answers it when the test says.
    first_answer = world.model.reply_held(then=TextStep("first answer"))
    world.model.reply_text("second answer")
    await world.start_bot({"agent": {"max_concurrent_turns": 1}})
    first = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=60)  # the first request imports LiteLLM
    second = await world.mention(DEV_CHANNEL, BOB, "second question")
    (queued,) = await world.wait_bot_replies(DEV_CHANNEL, second["ts"], 1)
    assert len(world.model.requests) == 1  # the second waits for the slot
    first_answer.set()

    replies = await world.wait_bot_replies(DEV_CHANNEL, second["ts"], 3)
    texts = [reply.text for reply in replies]
    assert "Queued: kelpie is answering 1 other requests" in texts[0] == queued.text
    assert "second answer" in texts[-1]
    first_replies = await world.wait_bot_replies(SHOP_CHANNEL, first["ts"], 2)
    assert "first answer" in first_replies[-1].text
    assert not any("Queued" in reply.text for reply in first_replies)


async def test_caps_per_person_and_per_lane_refuse_new_sessions_only():
    scheduler = TurnScheduler(interrupt=True, caps=TurnCaps(per_person=1, per_lane=2))
    turns = Turns()
    assert scheduler.admit("a1", "alice", "c") is None
    scheduler.submit("a1", turns.body("a1"), lane="c", person="alice")
    await turns.until_started(1)
    # Alice's second thread passes her cap; a new message in her busy thread does not.
    assert scheduler.admit("a2", "alice", "c") == Busy(CapReached.PERSON, 1)
    assert scheduler.admit("a1", "alice", "c") is None
    scheduler.submit("a1", turns.body("a1-again"), lane="c", person="alice")  # interrupts
    assert scheduler.admit("b1", "bob", "c") is None
    assert scheduler.admit("c1", "carol", "c") == Busy(CapReached.LANE, 2)
    assert scheduler.admit("c1", "carol", "other") is None  # another lane is not full
    scheduler.release("c1", "carol")  # admitted, then never ran
    scheduler.release("b1", "bob")
    await turns.until_started(2)
    turns.release["a1-again"].set()
    await scheduler.drain()
    # Every place is free again: the interrupted turn and the finished one both gave theirs.
    assert scheduler.admit("a2", "alice", "c") is None
    assert scheduler.admit("x", "bob", "c") is None


async def test_a_person_or_channel_over_its_cap_is_told_when_to_ask_again(world: World):
    # Alice's and Bob's questions hold their places until the test lets the model answer.
    alices = world.model.reply_held(then=TextStep("alice's answer"))
    bobs = world.model.reply_held(then=TextStep("bob's answer"))
    world.model.reply_text("alice's next answer")
    await world.start_bot({"agent": {"max_turns_per_person": 1, "max_turns_per_channel": 2}})
    first = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=60)  # the first request imports LiteLLM

    second = await world.mention(SHOP_CHANNEL, ALICE, "another thread")
    (told,) = await world.wait_bot_replies(SHOP_CHANNEL, second["ts"], 1)
    assert told.text == copy.person_busy(1)
    await world.mention(SHOP_CHANNEL, BOB, "bob's question")
    await world.model.wait_for_requests(2, timeout=60)
    third = await world.mention(SHOP_CHANNEL, CAROL, "carol's question")
    (told,) = await world.wait_bot_replies(SHOP_CHANNEL, third["ts"], 1)
    assert told.text == copy.channel_busy(2)
    assert len(world.model.requests) == 2  # the refused ones never reached the model

    alices.set()
    bobs.set()
    await world.drain()
    assert any("alice's answer" in text for text in bot_texts(world, first["ts"]))
    # Her turn has ended: her place is free again.
    again = await world.mention(SHOP_CHANNEL, ALICE, "now another thread")
    await world.model.wait_for_requests(3, timeout=60)
    await world.drain()
    assert any("alice's next answer" in text for text in bot_texts(world, again["ts"]))
    world.model.assert_script_consumed()


def bot_texts(world: World, thread_ts: str) -> list[str]:
    return [m.text for m in world.slack.thread(SHOP_CHANNEL, thread_ts) if m.is_bot]


def asked_about(world: World, text: str) -> bool:
    """Whether any request the model received carries `text` (a person's question)."""
    return any(text in json.dumps(request) for request in world.model.requests)


async def test_a_queued_turn_stopped_with_the_stop_button_on_its_notice_never_runs(
    world: World,
):
    # The first question keeps the only slot busy until the test lets the model answer.
    first_answer = world.model.reply_held(then=TextStep("first answer"))
    bot = await world.start_bot({"agent": {"max_concurrent_turns": 1}})
    first = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=60)  # the first request imports LiteLLM
    second = await world.mention(DEV_CHANNEL, BOB, "second question")
    notice = await stop_button(world, DEV_CHANNEL, second["ts"])
    assert "Queued" in notice.text

    # ALICE neither asked nor approves in #dev-payments: told who may stop it.
    await click_stop(world, ALICE, DEV_CHANNEL, second["ts"])
    (whisper,) = await world.slack.wait_for(lambda s: s.ephemerals(DEV_CHANNEL, ALICE), timeout=20)
    assert whisper.text == copy.who_may_stop(BOB, [])
    # BOB asked: his Stop withdraws the queued turn, and its notice says he did.
    await click_stop(world, BOB, DEV_CHANNEL, second["ts"])
    await world.slack.wait_for(
        lambda s: s.get_message(DEV_CHANNEL, notice.ts).text == copy.stopped_by(BOB), timeout=20
    )
    assert not has_stop_button(world.slack.get_message(DEV_CHANNEL, notice.ts))

    first_answer.set()
    await world.drain()
    assert not bot.scheduler.busy(key(DEV_CHANNEL, second["ts"]))  # it came and went
    assert "first answer" in (await world.wait_bot_replies(SHOP_CHANNEL, first["ts"], 2))[-1].text
    texts = [m.text for m in world.slack.thread(DEV_CHANNEL, second["ts"]) if m.is_bot]
    assert texts == [copy.stopped_by(BOB)]
    # Its slot came and went: the model never heard the stopped question.
    assert len(world.model.requests) == 1 and not asked_about(world, "second question")
    world.model.assert_script_consumed()


async def test_one_persons_burst_does_not_keep_a_colleague_waiting_by_default(world: World):
    # The configuration as shipped: no per-person cap set, so its default holds.
    del world.config_data["agent"]["max_turns_per_person"]
    alices = [world.model.reply_held(then=TextStep(f"alice's answer {i}")) for i in range(2)]
    world.model.reply_text("bob's answer")
    await world.start_bot()
    burst = [await world.mention(SHOP_CHANNEL, ALICE, f"burst question {i}") for i in range(6)]
    await world.model.wait_for_requests(2, timeout=60)
    told = [
        (await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1))[0].text
        for mention in burst[2:]
    ]
    assert told == [copy.person_busy(2)] * 4

    bobs = await world.mention(SHOP_CHANNEL, BOB, "is checkout healthy?")
    answered = await world.wait_bot_replies(SHOP_CHANNEL, bobs["ts"], 2)
    assert "bob's answer" in answered[-1].text
    # Answered while Alice's burst still held both of her places.
    assert not any("alice's answer" in text for m in burst for text in bot_texts(world, m["ts"]))
    for held in alices:
        held.set()
    await world.drain()
    assert len(world.model.requests) == 3 and not asked_about(world, "burst question 2")
    world.model.assert_script_consumed()


async def test_a_queued_notice_loses_its_stop_button_once_its_turn_leaves_the_queue(
    world: World,
):
    # The first question keeps the only slot busy until the test lets the model answer.
    first_answer = world.model.reply_held(then=TextStep("first answer"))
    world.model.reply_text("bob's answer")
    await world.start_bot({"agent": {"max_concurrent_turns": 1}})
    await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=60)
    question = await world.mention(DEV_CHANNEL, BOB, "second question")
    dropped = await stop_button(world, DEV_CHANNEL, question["ts"])

    # BOB's follow-up replaces his waiting turn: that notice's Stop has nothing left to stop.
    follow_up = world.slack.message(DEV_CHANNEL, BOB, "and the pods?", thread_ts=question["ts"])
    await world.slack.deliver_event(follow_up)

    def notices(server) -> list:
        queued = [m for m in bot_messages(server, question["ts"]) if "Queued" in m.text]
        return queued if len(queued) == 2 and not has_stop_button(queued[0]) else []

    first_notice, waiting = await world.slack.wait_for(notices, timeout=20)
    assert first_notice.ts == dropped.ts and first_notice.text == dropped.text
    assert has_stop_button(waiting)  # the follow-up's turn still waits: it may be stopped

    first_answer.set()
    await world.drain()
    assert any("bob's answer" in m.text for m in bot_messages(world.slack, question["ts"]))
    # It ran: none of the thread's messages offers a Stop any more (its notice says it waited).
    assert [m.text for m in bot_messages(world.slack, question["ts"]) if has_stop_button(m)] == []
    assert "Queued" in world.slack.get_message(DEV_CHANNEL, waiting.ts).text
    world.model.assert_script_consumed()


def bot_messages(server, thread_ts: str) -> list:
    return [m for m in server.thread(DEV_CHANNEL, thread_ts) if m.is_bot]
