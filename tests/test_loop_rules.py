"""Rules of the design notes' agent loop, end to end through the Slack, model and Kubernetes
peers: the tool timeout, an interrupt during the LLM retry delay, the 100-message history
reload cap, and the acknowledgement that comes before a turn starts."""

from __future__ import annotations

from typing import Any

from sqlmodel import select

from bot.config import AgentConfig
from bot.store.repositories import MessageRepository
from bot.store.tables import SessionRow
from bot.values import Message, Role
from tests.world import ALICE, BOB, SHOP_CHANNEL, World


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


async def test_a_tool_past_the_tool_timeout_is_reported_to_the_model(world: World) -> None:
    assert AgentConfig().tool_timeout_s == 300  # the notes' default: 5 minutes
    world.kube.delay(r"/namespaces/shop/pods$", 30)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("The pod list did not come back in time.")
    # Configurable, so the test need not wait five minutes.
    await world.start_bot({"agent": {"tool_timeout_s": 0.5}})
    await world.mention(SHOP_CHANNEL, ALICE, "list the pods")
    await world.model.wait_for_requests(2, timeout=90)
    await world.drain()

    assert tool_results(world.model.requests[1]) == ["Error: list_pods timed out after 0.5 s."]
    world.model.assert_script_consumed()


async def test_an_interrupt_during_the_retry_delay_sends_no_further_request(world: World) -> None:
    world.model.reply_error(500, "upstream failure")
    world.model.reply_text("Answer to the second question.")
    await world.start_bot({"agent": {"llm_retry_delay_s": 30}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "first question")
    await world.model.wait_for_requests(1, timeout=90)
    # The first turn now waits 30 s before its retry; a newer message interrupts it.
    follow_up = world.slack.message(SHOP_CHANNEL, BOB, "second question", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow_up)
    await world.model.wait_for_requests(2, timeout=90)
    await world.drain()

    # The interrupted turn's retry never went out: the second request is the new turn's.
    assert len(world.model.requests) == 2
    assert user_texts(world.model.requests[1])[-1].startswith("second question")
    world.model.assert_script_consumed()


async def test_history_reload_is_by_the_character_budget_not_a_count(world: World) -> None:
    world.model.reply_text("First answer.")
    world.model.reply_text("Follow-up answer.")
    await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "the first question")
    await world.model.wait_for_requests(1, timeout=90)
    await world.drain()
    bot = world.bots[-1]
    async with bot.db.sessions() as session:
        [row] = (await session.exec(select(SessionRow))).all()
    assert row.id is not None
    # 150 earlier messages in the thread, stored the way turns store theirs.
    repository = MessageRepository(bot.db)
    for i in range(75):
        await repository.append(
            row.id,
            f"old-{i}",
            [Message(Role.USER, f"old question {i}"), Message(Role.ASSISTANT, f"old answer {i}")],
        )
    follow_up = world.slack.message(SHOP_CHANNEL, BOB, "and now?", thread_ts=mention["ts"])
    await world.slack.deliver_event(follow_up)
    await world.model.wait_for_requests(2, timeout=90)
    await world.drain()

    sent = [str(m["content"]) for m in world.model.requests[1]["messages"]]
    old = [text for text in sent if text.startswith("old ")]
    # All 150 (a few thousand characters, well within the tier's budget): the reload is
    # cut by characters, not at a message count (tests/test_long_threads.py has the cut).
    # The session's first question rides along as the opening; this turn's on top.
    assert len(old) == 150
    assert old[0] == "old question 0" and old[-1] == "old answer 74"
    assert any("the first question" in text for text in sent[1:3])
    world.model.assert_script_consumed()


async def test_the_event_is_acknowledged_before_the_turn_starts(world: World) -> None:
    world.model.reply_text("All pods in shop are running.")
    await world.start_bot()
    envelope_id = await world.slack.deliver_event(
        world.slack.mention(SHOP_CHANNEL, ALICE, "how is shop?")
    )
    ack = await world.slack.wait_ack(envelope_id, timeout=30)
    await world.model.wait_for_requests(1, timeout=90)
    await world.drain()

    # Before the turn's first sign in the thread and before its first model request.
    first_post = world.slack.calls_to("chat.postMessage")[0]
    assert ack.time < first_post.time < world.model.recorded[0].time
