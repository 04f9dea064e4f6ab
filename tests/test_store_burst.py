"""A burst through the real peers: every thread answered, every message stored, no lock lost.

Many turns write at once (sessions, messages, usage, audits, payload snapshots); the store
funnels them through one writer, so none of them ends in "database is locked".
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from bot.values import Role
from tests.peers.model_server import DynamicStep, Step, TextStep, tool_calls_step
from tests.peers.slack_server import TEAM_ID
from tests.world import ALICE, SHOP_CHANNEL, World

THREADS = 50


def _one_tool_round_then_answer(body: dict[str, Any]) -> Step:
    """List pods, then answer naming the question the person asked."""
    messages = body["messages"]
    if messages[-1]["role"] != "tool":
        return tool_calls_step([("list_pods", {"namespace": "shop"})])
    asked = next(m["content"] for m in messages if m["role"] == "user")
    number = re.search(r"question (\d+)", str(asked))
    assert number is not None
    return TextStep(f"Answer to question {number.group(1)}.")


async def test_fifty_concurrent_threads_are_all_answered_and_stored(any_db_world: World):
    world = any_db_world
    world.model.reply_default(DynamicStep(_one_tool_round_then_answer))
    bot = await world.start_bot()
    mentions = [world.slack.mention(SHOP_CHANNEL, ALICE, f"question {i}") for i in range(THREADS)]

    await asyncio.gather(*(world.slack.deliver_event(mention) for mention in mentions))

    def all_answered(server: Any) -> bool:
        return all(
            any(m.is_bot and m.text.startswith("Answer to") for m in server.thread(SHOP_CHANNEL, t))
            for t in (mention["ts"] for mention in mentions)
        )

    await world.slack.wait_for(all_answered, timeout=120)
    await world.drain()
    for index, mention in enumerate(mentions):
        answers = [
            m.text
            for m in world.slack.thread(SHOP_CHANNEL, mention["ts"])
            if m.is_bot and m.text.startswith("Answer to")
        ]
        assert answers == [f"Answer to question {index}."]
        session = await bot.sessions.find(f"{TEAM_ID}:{SHOP_CHANNEL}:{mention['ts']}")
        assert session is not None
        stored = await bot.messages.all_for_session(session.id)
        # The question, the tool call, its result and the answer, in that order.
        assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
        assert stored[-1].content == f"Answer to question {index}."
        assert stored[2].content and "checkout-api" in stored[2].content
