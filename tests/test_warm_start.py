"""The warm start (#17): what the first question used to pay is paid before the bot reports
ready, without spending a model token or posting to Slack, and a peer the warm-up asks that
does not answer only costs the first question its old price."""

from __future__ import annotations

import logging

import pytest

from tests.world import ALICE, SHOP_CHANNEL, World


async def answer_to(world: World, text: str, reply: str) -> str:
    world.model.reply_text(reply)
    mention = await world.mention(SHOP_CHANNEL, ALICE, text)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.drain()
    bot_messages = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    return bot_messages[-1].text


async def test_the_warm_up_spends_no_token_and_posts_nothing_and_asks_slack_once(world: World):
    await world.start_bot()

    # Ready: the model library rehearsed in memory (the model saw no request), Slack was
    # only asked who the bot is, and nothing was posted anywhere.
    assert world.model.requests == []
    assert len(world.slack.calls_to("auth.test")) == 1
    assert [c.method for c in world.slack.calls if c.method.startswith("chat.")] == []

    assert await answer_to(world, "is shop healthy?", "shop looks healthy.") == (
        "shop looks healthy."
    )
    # The first event found the answer Bolt needs: it did not ask Slack again.
    assert len(world.slack.calls_to("auth.test")) == 1
    assert len(world.model.requests) == 1


async def test_slack_not_answering_auth_test_at_start_still_starts_and_answers(
    world: World, caplog: pytest.LogCaptureFixture
):
    world.slack.fail("auth.test", "service_unavailable", times=1)
    with caplog.at_level(logging.WARNING, logger="bot.slack.guard"):
        await world.start_bot()  # connected to Slack: started

    warnings = [r.getMessage() for r in caplog.records if r.name == "bot.slack.guard"]
    assert len(warnings) == 1 and "auth.test failed at start" in warnings[0]
    # Bolt asks again at the first event, and the person gets the answer.
    assert await answer_to(world, "is shop healthy?", "shop looks healthy.") == (
        "shop looks healthy."
    )
    assert len(world.slack.calls_to("auth.test")) == 2
