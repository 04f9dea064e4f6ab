"""An interrupt at any moment of a turn, including its very first milliseconds (while its
stream is still being opened), leaves no unfinished stream and no running turn."""

from __future__ import annotations

import asyncio

import pytest

from tests.peers.model_server import TextStep
from tests.world import ALICE, SHOP_CHANNEL, World

NATIVE = {"slack": {"streaming": "native"}}


@pytest.mark.parametrize("gap_s", [0.0, 0.005, 0.02, 0.05, 0.2])
async def test_an_interrupt_in_the_first_milliseconds_finishes_every_stream(
    world: World, gap_s: float
):
    # The first answer takes a while, so the follow-up finds its turn still running (a
    # quick turn could answer before the follow-up arrives and start no interrupt).
    world.model.reply_hang(2.0, then=TextStep("First answer."))
    world.model.reply_text("Answer to the second message.")
    bot = await world.start_bot(NATIVE)
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "pods?")
    follow_up = world.slack.message(SHOP_CHANNEL, ALICE, "never mind", thread_ts=mention["ts"])
    await world.slack.deliver_event(mention)
    await asyncio.sleep(gap_s)
    await world.slack.deliver_event(follow_up)

    def answered(server) -> bool:  # type: ignore[no-untyped-def]
        return any(
            "Answer to the second message." in (m.text or "") or "First answer." in (m.text or "")
            for m in server.thread(SHOP_CHANNEL, mention["ts"])
            if m.is_bot and not m.streaming
        )

    await world.slack.wait_for(answered, timeout=60)  # the first turn imports LiteLLM
    await world.drain()

    def finished(server) -> bool:  # type: ignore[no-untyped-def]
        streams = [m for m in server.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
        return bool(streams) and all(not m.streaming for m in streams)

    # Every stream gets finished, however slow the machine (one left open never would).
    await world.slack.wait_for(finished, timeout=20)
    assert not bot.scheduler.busy(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
