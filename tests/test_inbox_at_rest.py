"""Nothing raw at rest: the inbox keeps what a replay needs, masked, and drops it once the
delivery was handled; nothing from a channel kelpie is not enabled in, no `response_url`
beyond its use. Every secret format of the corpus is planted in questions, commands and
clicks, and then every table of the store is read, on SQLite and PostgreSQL (and after a
`kill -9` between acknowledgement and handling, for the replayed deliveries).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlmodel import SQLModel

import bot.store.tables  # noqa: F401  (every table registered on the metadata)
from bot.slack import copy
from bot.slack.at_rest import AtRest
from bot.slack.inbox import delivery_key
from bot.slack.progress import STOP_ACTION_ID
from bot.store.db import Database
from tests.bot_processes import Start
from tests.secrets_corpus import ALL_TEXT, leaked
from tests.test_replayed_requests import TURN_S, handled_once, kill_waiting_on, on, rows
from tests.test_streaming import key
from tests.world import ALICE, BOB, DEV_CHANNEL, RANDOM_CHANNEL, SHOP_CHANNEL, World


async def every_row(url: str) -> str:
    """Every row of every table of the store, as one text."""
    db = Database(url)
    try:
        async with db.sessions() as session:
            found = []
            for table in SQLModel.metadata.sorted_tables:
                result = await session.exec(select(table))  # type: ignore[call-overload]
                found += [f"{table.name}: {tuple(row)}" for row in result.all()]
    finally:
        await db.close()
    assert any(line.startswith("inbound_events:") for line in found)
    return "\n".join(found)


def assert_nothing_raw(stored: str, response_urls: list[str]) -> None:
    assert leaked(stored) == []
    assert [url for url in response_urls if url in stored] == []
    assert "/response/" not in stored


def stop_click(world: World, user: str, channel: str, thread_ts: str) -> dict[str, Any]:
    """A Stop click whose payload carries secrets in the clicked message and form state."""
    payload = world.slack.block_action(
        user, channel, thread_ts, STOP_ACTION_ID, key(channel, thread_ts)
    )
    payload["message"]["text"] = ALL_TEXT
    payload["state"] = {"values": {"b": {"a": {"type": "plain_text_input", "value": ALL_TEXT}}}}
    return payload


async def test_secrets_in_questions_commands_and_clicks_are_kept_nowhere(
    any_db_world: World,
):
    world = any_db_world
    world.model.reply_text("Nothing to worry about.")
    await world.start_bot()
    # A question where kelpie is enabled, answered.
    asked = await world.mention(SHOP_CHANNEL, ALICE, f"is this safe?\n{ALL_TEXT}")
    await world.wait_bot_replies(SHOP_CHANNEL, asked["ts"], 2)
    # A mention where it is not (answered "not enabled"), a thread there, chatter where it is.
    elsewhere = await world.mention(RANDOM_CHANNEL, BOB, ALL_TEXT)
    said = await world.wait_bot_replies(RANDOM_CHANNEL, elsewhere["ts"], 1)
    assert said[0].text == copy.NOT_ENABLED
    await world.slack.deliver_event(
        world.slack.message(RANDOM_CHANNEL, BOB, ALL_TEXT, thread_ts=elsewhere["ts"])
    )
    await world.slack.deliver_event(world.slack.message(DEV_CHANNEL, BOB, ALL_TEXT))
    # A slash command and a click, both with a response_url and secrets in them.
    command = world.slack.slash_command("/kelpie", f"role {ALL_TEXT}", ALICE, SHOP_CHANNEL)
    await world.slack.wait_ack(await world.slack.deliver("slash_commands", command))
    await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]))
    click = stop_click(world, ALICE, SHOP_CHANNEL, asked["ts"])
    await world.slack.wait_ack(await world.slack.deliver("interactive", click))
    await world.slack.wait_for(lambda s: s.ephemerals(SHOP_CHANNEL, ALICE))
    await world.drain()

    stored = await every_row(world.config.database.url)
    assert_nothing_raw(stored, [command["response_url"], click["response_url"]])


async def test_a_crash_before_handling_keeps_only_masked_content_until_the_replay(
    world: World, launch: Callable[..., Start], database_url: str
):
    start = launch(on(database_url))
    bot = await start()
    world.model.reply_text("Nothing to worry about.")
    command = world.slack.slash_command("/kelpie", f"role {ALL_TEXT}", ALICE, SHOP_CHANNEL)
    # The command waits on the channel's name (a fresh process has none cached): killed.
    await kill_waiting_on(
        world, bot, "conversations.info", lambda: world.slack.deliver("slash_commands", command)
    )
    # Unhandled, it is kept for the replay: masked, with the one address it answers on.
    kept = await rows(database_url, "SELECT body_json FROM inbound_events WHERE kind = 'command'")
    assert leaked(kept[0][0]) == []
    assert json.loads(kept[0][0])["response_url"] == command["response_url"]

    await start()
    await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]), timeout=TURN_S)
    await handled_once(database_url, "command")
    # A question asked now, with the restarted process.
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, f"is this safe?\n{ALL_TEXT}")
    await world.slack.deliver_event(mention)
    await world.slack.wait_for(
        lambda s: len([m for m in s.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]) >= 2,
        timeout=TURN_S,
    )
    await handled_once(database_url, "app_mention")
    assert_nothing_raw(await every_row(database_url), [command["response_url"]])


async def test_what_is_kept_is_what_a_replay_needs_masked_and_nothing_else(world: World):
    async def enabled(channel: str, is_dm: bool) -> bool:
        return channel == SHOP_CHANNEL

    at_rest = AtRest(enabled)

    async def kept(body: dict[str, Any]) -> dict[str, Any]:
        content = await at_rest.content(delivery_key(body)[1], body)
        assert leaked(content) == []
        found = dict(json.loads(content)) if content else {}
        assert "token" not in found  # the verification token is a credential
        return found

    slack = world.slack
    asked = await kept(slack.event_envelope_payload(slack.mention(SHOP_CHANNEL, ALICE, ALL_TEXT)))
    assert "[MASKED]" in asked["event"]["text"] and "blocks" not in asked["event"]
    for event in (
        slack.mention(RANDOM_CHANNEL, BOB, ALL_TEXT),  # kelpie is not enabled there
        slack.message(SHOP_CHANNEL, BOB, ALL_TEXT),  # chatter where it is
    ):
        stub = (await kept(slack.event_envelope_payload(event)))["event"]
        assert set(stub) <= {"type", "user", "team", "channel", "channel_type", "ts", "event_ts"}
        assert (stub["channel"], stub["user"], stub["ts"]) == (event["channel"], BOB, event["ts"])
    click = await kept(stop_click(world, ALICE, SHOP_CHANNEL, asked["event"]["ts"]))
    assert set(click) & {"response_url", "state"} == set()
    assert set(click["message"]) <= {"type", "ts", "thread_ts"}
    assert click["actions"][0]["action_id"] == STOP_ACTION_ID
    command = slack.slash_command("/kelpie", f"role {ALL_TEXT}", ALICE, SHOP_CHANNEL)
    assert (await kept(command))["response_url"] == command["response_url"]
    rename = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "channel_rename"}}
    assert await at_rest.content("channel_rename", rename) == ""
