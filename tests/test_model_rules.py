"""The design notes' model rules end to end through Slack: a cut answer is never shown as
whole, the footer always names the tier and where it came from, and the model profile's
auth method decides exactly which credential the provider receives."""

from __future__ import annotations

from sqlmodel import col, select

from bot.agent.engine import ANSWER_CUT_MARK, CONTINUE_NUDGE
from bot.agent.events import ANSWER_CUT_FOOTER
from bot.slack import copy
from bot.store.tables import MessageRow
from tests.peers.model_server import HangStep, TextStep
from tests.peers.slack_server import SlackServer
from tests.test_roles_e2e import slash
from tests.world import ALICE, SHOP_CHANNEL, World


async def ask(world: World, text: str = "what is wrong in shop?") -> tuple[str, str]:
    """Mention the bot; returns everything the thread shows and the footer line."""
    mention = await world.mention(SHOP_CHANNEL, ALICE, text)
    footer = await thread_footer(world, mention["ts"])
    replies = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    return "\n".join(m.text for m in replies), footer


async def thread_footer(world: World, thread_ts: str) -> str:
    """The footer line of the thread's turn, once the turn has ended."""

    def footers(server: SlackServer) -> list[str]:
        return [
            block["elements"][0]["text"]
            for m in server.thread(SHOP_CHANNEL, thread_ts)
            if m.is_bot and not m.streaming
            for block in m.blocks
            if block.get("type") == "context"
        ]

    found = await world.slack.wait_for(footers, timeout=60)
    await world.drain()
    return found[-1]


async def stored_answers(world: World) -> list[str | None]:
    async with world.bots[-1].db.sessions() as session:
        rows = (
            await session.exec(
                select(MessageRow)
                .where(MessageRow.role == "assistant")
                .order_by(col(MessageRow.id))
            )
        ).all()
    return [row.content for row in rows]


# --- cut answers ---------------------------------------------------------------------------


async def test_a_cut_answer_is_continued_once_and_shown_whole(world: World) -> None:
    world.model.reply_text("checkout-api restarts because its pods", finish_reason="length")
    world.model.reply_text(" run out of memory.")
    await world.start_bot()
    shown, footer = await ask(world)

    assert "checkout-api restarts because its pods run out of memory." in shown
    assert copy.ANSWER_CUT_NOTE not in shown and ANSWER_CUT_FOOTER not in footer
    sent = world.model.requests[1]["messages"]
    assert sent[-2:] == [
        {"role": "assistant", "content": "checkout-api restarts because its pods"},
        {"role": "user", "content": CONTINUE_NUDGE},
    ]
    # The stored turn holds the whole answer once, not the pieces or the nudge.
    assert await stored_answers(world) == [
        "checkout-api restarts because its pods run out of memory."
    ]
    world.model.assert_script_consumed()


async def test_an_answer_cut_twice_says_so_in_the_thread_the_footer_and_the_store(
    world: World,
) -> None:
    world.model.reply_text("The first half of the answer", finish_reason="length")
    world.model.reply_text(" and still more than fits", finish_reason="length")
    await world.start_bot()
    shown, footer = await ask(world)

    assert "The first half of the answer and still more than fits" in shown
    assert copy.ANSWER_CUT_NOTE in shown
    assert ANSWER_CUT_FOOTER in footer
    assert len(world.model.requests) == 2  # asked to continue once, not again
    assert await stored_answers(world) == [
        f"The first half of the answer and still more than fits\n\n{ANSWER_CUT_MARK}"
    ]
    world.model.assert_script_consumed()


async def test_a_cut_answer_without_rounds_left_is_not_continued(world: World) -> None:
    world.model.reply_text("Cut in the only round", finish_reason="length")
    await world.start_bot({"agent": {"max_iterations": 1}})
    shown, footer = await ask(world)

    assert "Cut in the only round" in shown and copy.ANSWER_CUT_NOTE in shown
    assert ANSWER_CUT_FOOTER in footer
    assert len(world.model.requests) == 1
    world.model.assert_script_consumed()


# --- tier and its source in the footer -----------------------------------------------------


async def test_the_footer_names_the_tier_and_where_it_came_from(world: World) -> None:
    world.model.reply_text("All pods in shop are running.")
    world.model.reply_text("Still all running.")
    await world.start_bot()
    _, footer = await ask(world)
    assert "tier low (default)" in footer  # openai/test-model: not in the catalog

    await world.stop_bot(world.bots[-1])
    await world.start_bot({"models": {"profiles": {"default": {"tier": "high"}}}})
    _, footer = await ask(world, "and now?")
    assert "tier high (profile setting)" in footer
    world.model.assert_script_consumed()


async def test_a_stopped_turn_has_the_same_footer_as_an_answered_one(world: World) -> None:
    world.model.reply_text("All pods in shop are running.")
    world.model.enqueue(HangStep(20, then=TextStep("too late")))
    await world.start_bot()
    _, answered = await ask(world)

    mention = await world.mention(SHOP_CHANNEL, ALICE, "and now?")
    await world.model.wait_for_requests(2)
    await world.slack.press_session_stop(SHOP_CHANNEL, mention["ts"], ALICE)
    stopped = await thread_footer(world, mention["ts"])

    same = "openai/test-model · tier low (default) · "
    assert answered.startswith(same + "1 round · 0 tool calls"), answered
    assert stopped.startswith(same + "1 round · 0 tool calls"), stopped


async def test_kelpie_model_shows_the_tier_and_its_source(world: World) -> None:
    await world.start_bot()
    text = await slash(world, SHOP_CHANNEL, "model")
    assert "*Model:* `openai/test-model`" in text
    assert "*tier:* `low` (default)" in text and "• tier low: default" in text

    await world.stop_bot(world.bots[-1])
    await world.start_bot({"models": {"profiles": {"default": {"model": "openai/gpt-4o"}}}})
    text = await slash(world, SHOP_CHANNEL, "model")
    assert "*tier:* `high` (catalog)" in text and "15 rounds" in text
