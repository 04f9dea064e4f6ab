"""Stored before acknowledged, through the fake Slack peer, on SQLite and PostgreSQL.

When the store cannot take a delivery, kelpie does not acknowledge it (Socket Mode: no ack;
HTTP: a 5xx), so Slack delivers it again; the redelivery is answered. A delivery that was
stored is acknowledged, and a repeat of it runs nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import text

from tests.long_batch import LongBatch
from tests.postgres import PostgresServer
from tests.world import ALICE, SHOP_CHANNEL, World


@contextmanager
def store_outage(world: World, request: pytest.FixtureRequest) -> Iterator[None]:
    """The database refuses writes: SQLite locked by another process's exclusive
    transaction; PostgreSQL stopped."""
    url = world.config.database.url
    if url.startswith("sqlite"):
        locker = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            locker.rollback()
            locker.close()
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    server.pause()
    try:
        yield
    finally:
        server.resume()


async def test_socket_mode_leaves_an_event_it_cannot_store_unacknowledged(
    any_db_world: World, request: pytest.FixtureRequest
):
    world = any_db_world
    world.model.reply_text("All good in shop.")
    bot = await world.start_bot()
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")

    with store_outage(world, request):
        first = await world.slack.deliver_event(mention, event_id="Ev0STORE0001")
        with pytest.raises(TimeoutError):
            await world.slack.wait_ack(first, timeout=4)
    assert world.model.requests == []

    # Slack delivers it again; now it is stored, acknowledged and answered, once.
    again = await world.slack.deliver_event(mention, event_id="Ev0STORE0001", retry_attempt=1)
    await world.slack.wait_ack(again)
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    assert replies[-1].text == "All good in shop."
    repeat = await world.slack.deliver_event(mention, event_id="Ev0STORE0001", retry_attempt=2)
    await world.slack.wait_ack(repeat)
    await world.drain()
    assert len(world.model.requests) == 1
    # Handled, the delivery is kept as its key only (against a repeat): nothing of it.
    async with bot.db.sessions() as session:
        row = (
            await session.exec(  # type: ignore[call-overload]
                text("SELECT kind, body_json FROM inbound_events WHERE key = 'Ev0STORE0001'")
            )
        ).one()
    assert tuple(row) == ("app_mention", "")


async def test_a_mention_is_stored_and_acknowledged_ahead_of_other_turns_queued_writes(
    any_db_world: World,
):
    world = any_db_world
    world.model.reply_text("All good in shop.")
    bot = await world.start_bot()
    # Other turns' deferred writes hold the store's one writer for a minute.
    batch = LongBatch()
    committed = batch.start(bot.db)
    await batch.started()

    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    envelope = await world.slack.deliver_event(mention, event_id="Ev0AHEAD0001")
    await world.slack.wait_ack(envelope, timeout=30)
    # Acknowledged while that batch is still being applied, and stored before.
    assert not committed.done() and batch.ran < batch.count
    async with bot.db.sessions() as session:
        stored = (
            await session.exec(  # type: ignore[call-overload]
                text("SELECT kind FROM inbound_events WHERE key = 'Ev0AHEAD0001'")
            )
        ).all()
    assert [row[0] for row in stored] == ["app_mention"]

    batch.finish()
    await committed
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    assert replies[-1].text == "All good in shop."


async def test_http_mode_answers_5xx_for_an_event_it_cannot_store(
    any_db_world: World, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
):
    world = any_db_world
    world.model.reply_text("All good in shop.")
    bot = await world.start_bot({"slack": {"mode": "http"}})
    url = f"http://127.0.0.1:{bot.http_port}/slack/events"
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    body = world.slack.event_envelope_payload(mention, event_id="Ev0STORE0002")

    caplog.clear()
    with store_outage(world, request), caplog.at_level(logging.INFO):
        status, answer = await world.slack.post_signed(url, body)
    # A 503 Slack retries, and one clear line in the log: no traceback, no bare 500.
    assert status == 503, answer
    # The background retention pass may meet the same outage and say so on its own logger;
    # what is asserted here is what the request itself left in the log.
    errors = [
        r for r in caplog.records if r.levelno >= logging.ERROR and r.name != "bot.store.retention"
    ]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["could not store a Slack request"]
    assert "Slack delivers it again" in errors[0].getMessage() and errors[0].exc_info is None
    await asyncio.sleep(0.2)
    assert world.model.requests == []

    status, _ = await world.slack.post_signed(url, body, retry_num=1, retry_reason="http_error")
    assert status == 200
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    assert replies[-1].text == "All good in shop."
    status, _ = await world.slack.post_signed(url, body, retry_num=2, retry_reason="timeout")
    assert status == 200
    await world.drain()
    assert len(world.model.requests) == 1
