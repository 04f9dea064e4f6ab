"""A bounded number of turns run at once; the rest wait fairly by channel and say so."""

from __future__ import annotations

import asyncio

from bot.agent.turns import TurnScheduler
from tests.peers.model_server import TextStep
from tests.world import ALICE, BOB, DEV_CHANNEL, SHOP_CHANNEL, World


class Turns:
    """Turn bodies the test releases by hand; records the order in which they start."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release: dict[str, asyncio.Event] = {}
        self.notices: list[tuple[str, int, int]] = []

    def body(self, name: str):
        self.release[name] = asyncio.Event()

        async def run(abort: asyncio.Event) -> None:
            self.started.append(name)
            await self.release[name].wait()

        return run

    def notice(self, name: str):
        async def queued(running: int, ahead: int) -> None:
            self.notices.append((name, running, ahead))

        return queued

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


async def test_an_interrupted_waiting_turn_gives_up_its_place():
    scheduler = TurnScheduler(interrupt=True, max_running=1)
    turns = Turns()
    scheduler.submit("s1", turns.body("first"), lane="c")
    await turns.until_started(1)
    scheduler.submit("s2", turns.body("old"), lane="c")
    await asyncio.sleep(0)
    scheduler.submit("s2", turns.body("new"), lane="c")  # supersedes the waiting one
    turns.release["first"].set()
    await turns.until_started(2)
    turns.release["new"].set()
    await scheduler.drain()
    assert turns.started == ["first", "new"]


async def test_a_thread_over_the_limit_shows_it_is_queued_then_gets_its_answer(world: World):
    # The first question keeps the only slot busy while the model thinks.
    world.model.reply_hang(3, then=TextStep("first answer"))
    world.model.reply_text("second answer")
    await world.start_bot({"agent": {"max_concurrent_turns": 1}})
    first = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=60)  # the first request imports LiteLLM
    second = await world.mention(DEV_CHANNEL, BOB, "second question")

    replies = await world.wait_bot_replies(DEV_CHANNEL, second["ts"], 3)
    texts = [reply.text for reply in replies]
    assert "Queued: kelpie is answering 1 other requests" in texts[0]
    assert "second answer" in texts[-1]
    first_replies = await world.wait_bot_replies(SHOP_CHANNEL, first["ts"], 2)
    assert "first answer" in first_replies[-1].text
    assert not any("Queued" in reply.text for reply in first_replies)
