"""A burst that spends the workspace's Tier 2 and Tier 3 budgets, end to end against the
fake Slack, which enforces them with 429 and Retry-After. A turn with no room for a stream
(chat.startStream / chat.stopStream, Tier 2) answers in posted messages at once instead of
waiting for one; its progress edits, reaction and agent session (Tier 3) are left out or
made later, never before its answer. A turn with room still streams."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest

from bot.slack.markdown import to_mrkdwn
from bot.slack.pacing import PacingLimits, Tier
from bot.slack.progress import STOP_ACTION_ID
from tests.peers.model_server import DynamicStep, Step, TextStep
from tests.peers.slack_server import Message, RateLimits, SlackServer
from tests.world import ALICE, DEV_CHANNEL, SHOP_CHANNEL, SLACK_TIME_SCALE, World

NATIVE = {"slack": {"streaming": "native"}}
THREADS = 10
CHANNELS = (SHOP_CHANNEL, DEV_CHANNEL)
# Tight budgets over a window longer than the burst takes: three streams a window, eight
# edits / reactions / session updates. Posting keeps Slack's per-channel pace (scaled).
TIERS = {1: 1, 2: 3, 3: 8, 4: 100}
WINDOW_S = 4.0


def fake_limits() -> RateLimits:
    scaled = RateLimits().scaled(SLACK_TIME_SCALE)
    return RateLimits(dict(TIERS), WINDOW_S, scaled.channel_posts, scaled.channel_window_s)


def bot_limits() -> PacingLimits:
    tiers = {Tier.TIER1: 1, Tier.TIER2: 3, Tier.TIER3: 8, Tier.TIER4: 100}
    scaled = PacingLimits().scaled(SLACK_TIME_SCALE)
    return PacingLimits(tiers, WINDOW_S, scaled.channel_posts, scaled.channel_window_s)


def answer_for(number: str) -> str:
    return f"Answer to question {number}.\n\n" + f"Pod {number} is fine. " * 30


def _answer(body: dict[str, Any]) -> Step:
    asked = next(m["content"] for m in body["messages"] if m["role"] == "user")
    found = re.search(r"question (\d+)", str(asked))
    assert found is not None
    return TextStep(answer_for(found.group(1)), chunk_size=50)


def bot_messages(slack: SlackServer, channel: str, ts: str) -> list[Message]:
    return [m for m in slack.thread(channel, ts) if m.is_bot]


def shown_answers(slack: SlackServer, channel: str, ts: str, number: int) -> list[str]:
    """How the thread shows its answer: "stream" or "posted", once per time it shows it."""
    answer = answer_for(str(number))
    shown = []
    for message in bot_messages(slack, channel, ts):
        if message.kind == "stream" and not message.streaming and message.text == answer:
            shown.append("stream")
        elif message.kind == "message" and message.text == to_mrkdwn(answer.strip()):
            shown.append("posted")
    return shown


def has_stop_button(message: Message) -> bool:
    """A progress message's Stop button (a queued turn's notice keeps its own)."""
    return any(block.get("block_id") == STOP_ACTION_ID for block in message.blocks)


async def burst(world: World) -> list[tuple[str, str]]:
    mentions = [
        world.slack.mention(CHANNELS[i % len(CHANNELS)], ALICE, f"question {i}")
        for i in range(THREADS)
    ]
    await asyncio.gather(*(world.slack.deliver_event(mention) for mention in mentions))
    return [(mention["channel"], mention["ts"]) for mention in mentions]


async def test_a_burst_past_the_stream_budget_answers_every_thread_by_posts_without_429s(
    world: World, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="bot.slack.progress")
    world.slack.limits = fake_limits()
    world.model.reply_default(DynamicStep(_answer))
    await world.start_bot(NATIVE, pacing=bot_limits())
    threads = await burst(world)

    def all_answered(server: SlackServer) -> bool:
        return all(shown_answers(server, c, ts, i) for i, (c, ts) in enumerate(threads))

    await world.slack.wait_for(all_answered, timeout=30)

    # Every thread shows its whole answer once: streamed where the budget had room for a
    # stream, posted where it had none; nobody's answer waited for Slack's window.
    ways = [shown_answers(world.slack, c, ts, i) for i, (c, ts) in enumerate(threads)]
    assert all(len(way) == 1 for way in ways), ways
    streamed = [way for way in ways if way == ["stream"]]
    posted = [way for way in ways if way == ["posted"]]
    assert 1 <= len(streamed) <= TIERS[2] and len(posted) >= THREADS - TIERS[2]
    degraded = [r for r in caplog.records if "answers in posted messages" in r.getMessage()]
    assert len(degraded) == len(posted)
    # A posted answer's thread first showed a message of kelpie's with its Stop button
    # (its progress, or its place in the queue), then the answer below it.
    posts = world.slack.calls_to("chat.postMessage")
    for (_channel, ts), way in zip(threads, ways, strict=True):
        if way == ["posted"]:
            first = next(c for c in posts if c.params.get("thread_ts") == ts)
            assert STOP_ACTION_ID in str(first.params.get("blocks"))
    # Nothing went past Slack's budgets.
    assert [c.method for c in world.slack.calls if c.status == 429] == []

    # What was left for later shows once the budget allows: no thread keeps a Stop button,
    # a working reaction or a session that says kelpie is still at it.
    def settled(server: SlackServer) -> bool:
        return all(
            not any(has_stop_button(m) for m in bot_messages(server, c, ts))
            and "eyes" not in server.reactions(c, ts)
            and (
                server.agent_sessions.get((c, ts)) is None
                or server.agent_sessions[(c, ts)].status != "processing"
            )
            for c, ts in threads
        )

    await world.slack.wait_for(settled, timeout=60)
    await world.drain()
    for channel, ts in threads:
        assert world.slack.reactions(channel, ts) in ([], ["white_check_mark"])
    assert [c.method for c in world.slack.calls if c.status == 429] == []

    # Once the window has passed, a turn with room streams natively again.
    mention = await world.mention(SHOP_CHANNEL, ALICE, f"question {THREADS}")
    await world.slack.wait_for(
        lambda s: shown_answers(s, SHOP_CHANNEL, mention["ts"], THREADS), timeout=30
    )
    assert shown_answers(world.slack, SHOP_CHANNEL, mention["ts"], THREADS) == ["stream"]
