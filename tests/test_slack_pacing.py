"""One pacer per workspace and one HTTP session, end to end against the fake Slack, which
enforces Slack's per-method tier limits and per-channel posting rate with 429 and
Retry-After (over windows 30 times shorter than Slack's minute, as kelpie's pacer in these
tests) and counts the TCP connections the Web API is called over."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from typing import Any

from bot.slack.markdown import to_mrkdwn
from tests.peers.model_server import DynamicStep, Step, TextStep
from tests.peers.slack_server import RateLimits, RecordedCall
from tests.world import ALICE, SHOP_CHANNEL, SLACK_TIME_SCALE, World

NATIVE = {"slack": {"streaming": "native"}}
THREADS = 64


def answer_for(number: str) -> str:
    return f"Answer to question {number}.\n\n" + f"Pod {number} is fine. " * 40


def _answer(body: dict[str, Any]) -> Step:
    asked = next(m["content"] for m in body["messages"] if m["role"] == "user")
    found = re.search(r"question (\d+)", str(asked))
    assert found is not None
    return TextStep(answer_for(found.group(1)), chunk_size=50)


def repeated_before_retry_after(calls: list[RecordedCall]) -> list[str]:
    """Calls sent again (same method, same arguments) before the Retry-After of their 429."""
    early: list[str] = []
    for index, limited in enumerate(calls):
        if limited.status != 429 or limited.retry_after is None:
            continue
        repeat = next(
            (
                c
                for c in calls[index + 1 :]
                if (c.method, c.params) == (limited.method, limited.params)
            ),
            None,
        )
        if repeat is None:
            early.append(f"{limited.method} never sent again after its 429")
        elif repeat.time - limited.time < limited.retry_after - 0.05:
            early.append(f"{limited.method} again {repeat.time - limited.time:.2f}s after a 429")
    return early


async def test_a_burst_of_threads_gets_every_answer_within_slacks_limits(world: World):
    # Slack's budgets here are tighter than kelpie assumes ("Tier 2: 20+" may be less), so
    # the burst draws 429s the pacer must honour.
    world.slack.limits = RateLimits(per_tier={1: 1, 2: 12, 3: 30, 4: 60}).scaled(SLACK_TIME_SCALE)
    world.model.reply_default(DynamicStep(_answer))
    await world.start_bot(NATIVE)
    # How many calls of the burst fall in one of Slack's windows depends on the machine's
    # speed; these 429s do not: the first calls of each stream method are refused.
    for method in ("chat.startStream", "chat.stopStream"):  # every stream calls both
        world.slack.rate_limit(method, retry_after=1, times=2)
    mentions = [world.slack.mention(SHOP_CHANNEL, ALICE, f"question {i}") for i in range(THREADS)]
    await asyncio.gather(*(world.slack.deliver_event(mention) for mention in mentions))

    def answers(server: Any, index: int) -> list[str]:
        """The thread's answer as shown: streamed, or posted where no stream had room."""
        ts = mentions[index]["ts"]
        bot = [m for m in server.thread(SHOP_CHANNEL, ts) if m.is_bot]
        posted = to_mrkdwn(answer_for(str(index)).strip())
        streamed = [m.text for m in bot if m.kind == "stream" and not m.streaming]
        return streamed + [m.text for m in bot if m.kind == "message" and m.text == posted]

    def answered(server: Any) -> bool:
        return all(answers(server, index) for index in range(THREADS))

    await world.slack.wait_for(answered, timeout=180)
    await world.drain()

    def settled(server: Any) -> bool:
        """What a turn's end shows besides the answer went out, some of it after the turn
        (reactions and session status wait for their budget without holding the turn)."""
        return all(
            "eyes" not in server.reactions(SHOP_CHANNEL, m["ts"])
            and getattr(server.agent_sessions.get((SHOP_CHANNEL, m["ts"])), "status", "")
            != "processing"
            for m in mentions
        )

    await world.slack.wait_for(settled, timeout=180)

    calls = world.slack.calls
    for method in ("chat.startStream", "chat.stopStream"):
        assert sum(c.status == 429 for c in calls if c.method == method) >= 2, method
    assert repeated_before_retry_after(calls) == []
    # Every thread has its whole answer once; no call was dropped after its 429.
    for index in range(THREADS):
        shown = answers(world.slack, index)
        assert shown in ([answer_for(str(index))], [to_mrkdwn(answer_for(str(index)).strip())])
    limited = defaultdict(int)
    for call in calls:
        limited[call.method] += call.status == 429
    refused = [c for c in calls if not c.ok and c.status != 429]
    assert refused == []
    # Posting kept to the channel's pace, never past Slack's budget of the method.
    starts = [c.time for c in world.slack.calls_to("chat.startStream") if c.ok]
    window = world.slack.limits.window_s
    assert all(sum(1 for t in starts if start <= t < start + window) <= 12 for start in starts), (
        dict(limited)
    )


async def test_web_api_calls_share_a_few_kept_alive_connections(world: World):
    world.model.reply_default(TextStep("All pods are fine."))
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "question one")
    await world.slack.wait_for_call("chat.stopStream", timeout=30)
    await world.drain()
    after_one = world.slack.api_connections
    calls_after_one = len(world.slack.calls)

    for i in range(8):
        await world.mention(SHOP_CHANNEL, ALICE, f"question {i}", thread_ts=mention["ts"])
        await world.slack.wait_for(
            lambda s, n=i: len(s.calls_to("chat.stopStream")) >= n + 2, timeout=30
        )
        await world.drain()

    assert len(world.slack.calls) >= 4 * calls_after_one  # many more calls ...
    assert world.slack.api_connections <= max(after_one, 3)  # ... over the same connections
