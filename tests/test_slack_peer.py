"""The Slack peer talks with the official SDKs: slack_sdk's web and Socket Mode clients and Bolt."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.peers.slack_server import SlackServer

CHANNEL = "C0DEV"
ALICE = "U0ALICE"


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer() as server:
        server.set_channel(CHANNEL, "dev")
        server.set_user(ALICE, "alice")
        yield server


@pytest.fixture
async def client(slack: SlackServer) -> AsyncIterator[AsyncWebClient]:
    web_client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    yield web_client
    if web_client.session is not None:
        await web_client.session.close()


async def test_auth_post_update_and_thread_view(slack: SlackServer, client: AsyncWebClient) -> None:
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == (
        slack.bot_user_id,
        slack.bot_id,
        slack.team_id,
    )

    parent = slack.post_user_message(CHANNEL, ALICE, "why is api crashlooping?")
    first = await client.chat_postMessage(channel=CHANNEL, thread_ts=parent.ts, text="Looking…")
    second = await client.chat_postMessage(
        channel=CHANNEL,
        thread_ts=parent.ts,
        text="fallback",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*OOMKilled*"}}],
    )
    await client.chat_update(channel=CHANNEL, ts=first["ts"], text="Found it: OOMKilled")

    thread = slack.thread(CHANNEL, parent.ts)
    assert [m.text for m in thread] == [
        "why is api crashlooping?",
        "Found it: OOMKilled",
        "fallback",
    ]
    assert thread[1].is_bot and thread[1].updates == 1
    assert thread[2].ts == second["ts"]
    assert thread[2].blocks[0]["text"]["text"] == "*OOMKilled*"
    recorded = slack.calls_to("chat.postMessage")[1]
    assert recorded.token == slack.bot_token
    assert isinstance(recorded.params["blocks"], list)

    # Form bodies with JSON-encoded fields, and query-string params (chat.delete), work too.
    await client.api_call(
        "chat.postMessage",
        data={"channel": CHANNEL, "text": "form", "blocks": '[{"type": "divider"}]'},
    )
    assert slack.calls_to("chat.postMessage")[-1].params["blocks"] == [{"type": "divider"}]
    await client.chat_delete(channel=CHANNEL, ts=second["ts"])
    assert [m.text for m in slack.thread(CHANNEL, parent.ts)][-1] == "Found it: OOMKilled"


async def test_bad_token_and_unknown_method(slack: SlackServer) -> None:
    bad = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_url)
    with pytest.raises(SlackApiError) as bad_auth:
        await bad.auth_test()
    assert bad_auth.value.response["error"] == "invalid_auth"

    good = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    with pytest.raises(SlackApiError) as unknown:
        await good.api_call("views.publish", json={"user_id": ALICE})
    assert unknown.value.response["error"] == "unknown_method"

    with pytest.raises(SlackApiError) as wrong_type:
        await good.apps_connections_open(app_token=slack.bot_token)
    assert wrong_type.value.response["error"] == "not_allowed_token_type"


async def test_chat_stream_records_chunks(slack: SlackServer, client: AsyncWebClient) -> None:
    parent = slack.post_user_message(CHANNEL, ALICE, "roll out api")
    stream = await client.chat_stream(
        channel=CHANNEL,
        thread_ts=parent.ts,
        recipient_team_id=slack.team_id,
        recipient_user_id=ALICE,
        buffer_size=5,
    )
    await stream.append(markdown_text="Hello ")
    await stream.append(markdown_text="world")
    await stream.append(chunks=[TaskUpdateChunk(id="t1", title="Scale api", status="in_progress")])
    assert stream.ts is not None
    live = slack.get_message(CHANNEL, stream.ts)
    assert live is not None and live.streaming

    with pytest.raises(SlackApiError) as conflict:
        await client.chat_update(channel=CHANNEL, ts=stream.ts, text="too early")
    assert conflict.value.response["error"] == "streaming_state_conflict"

    await stream.append(chunks=[TaskUpdateChunk(id="t1", title="Scale api", status="complete")])
    await stream.stop(
        markdown_text="!",
        blocks=[{"type": "context", "elements": [{"type": "mrkdwn", "text": "done"}]}],
    )

    assert [c.method for c in slack.calls if c.method.endswith("Stream")] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.stopStream",
    ]
    start = slack.calls_to("chat.startStream")[0]
    assert start.params["chunks"] == [{"type": "markdown_text", "text": "Hello "}]
    assert start.params["recipient_user_id"] == ALICE

    thread = slack.thread(CHANNEL, parent.ts)
    streamed = thread[-1]
    assert streamed.kind == "stream" and not streamed.streaming
    assert streamed.text == "Hello world!"
    assert streamed.tasks["t1"]["status"] == "complete"
    assert streamed.blocks[-1]["type"] == "context"

    with pytest.raises(SlackApiError) as stopped:
        await client.chat_appendStream(channel=CHANNEL, ts=streamed.ts, markdown_text="more")
    assert stopped.value.response["error"] == "message_not_in_streaming_state"


async def test_stream_errors_and_expiry(slack: SlackServer, client: AsyncWebClient) -> None:
    parent = slack.post_user_message(CHANNEL, ALICE, "hi")
    with pytest.raises(SlackApiError) as missing:
        await client.chat_startStream(channel=CHANNEL, thread_ts=parent.ts, markdown_text="x")
    assert missing.value.response["error"] == "missing_recipient_user_id"

    # In a DM no recipient is needed.
    dm = slack.dm_channel(ALICE)
    dm_parent = slack.post_user_message(dm, ALICE, "hi")
    started = await client.chat_startStream(channel=dm, thread_ts=dm_parent.ts, markdown_text="a")
    slack.expire_stream(started["ts"])
    with pytest.raises(SlackApiError) as expired:
        await client.chat_appendStream(channel=dm, ts=started["ts"], markdown_text="b")
    assert expired.value.response["error"] == "message_not_in_streaming_state"
    # The documented fallback: finish the broken message with chat.update.
    await client.chat_update(channel=dm, ts=started["ts"], text="final answer")
    assert slack.thread(dm, dm_parent.ts)[-1].text == "final answer"

    slack.fail("chat.startStream", "unknown_method", times=1)
    with pytest.raises(SlackApiError) as injected:
        await client.chat_startStream(channel=dm, thread_ts=dm_parent.ts, markdown_text="c")
    assert injected.value.response["error"] == "unknown_method"
    await client.chat_startStream(channel=dm, thread_ts=dm_parent.ts, markdown_text="c")


async def test_an_archived_channel_refuses_new_messages(
    slack: SlackServer, client: AsyncWebClient
) -> None:
    """As in Slack: chat.postMessage and chat.postEphemeral answer `is_archived` there, and
    conversations.info shows it archived; unarchived, posting works again."""
    slack.archive_channel(CHANNEL)
    for post in (
        lambda: client.chat_postMessage(channel=CHANNEL, text="hi"),
        lambda: client.chat_postEphemeral(channel=CHANNEL, user=ALICE, text="hi"),
    ):
        with pytest.raises(SlackApiError) as refused:
            await post()
        assert refused.value.response["error"] == "is_archived"
    info = await client.conversations_info(channel=CHANNEL)
    assert info["channel"]["is_archived"] is True
    slack.archive_channel(CHANNEL, archived=False)
    assert (await client.chat_postMessage(channel=CHANNEL, text="hi"))["ok"]


async def test_files_upload_v2_lands_in_thread(slack: SlackServer, client: AsyncWebClient) -> None:
    parent = slack.post_user_message(CHANNEL, ALICE, "logs please")
    await client.files_upload_v2(
        channel=CHANNEL,
        thread_ts=parent.ts,
        content="line 1\nline 2\n",
        filename="api.log",
        title="api logs",
        initial_comment="Last 2 lines",
    )
    shown = slack.thread(CHANNEL, parent.ts)[-1]
    assert shown.kind == "file" and shown.text == "Last 2 lines"
    (uploaded,) = shown.files
    assert (uploaded.filename, uploaded.title, uploaded.text) == (
        "api.log",
        "api logs",
        "line 1\nline 2\n",
    )
    assert (uploaded.channel, uploaded.thread_ts) == (CHANNEL, parent.ts)


async def test_rate_limit_is_retried_by_handler(slack: SlackServer) -> None:
    client = AsyncWebClient(
        token=slack.bot_token,
        base_url=slack.api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(),
            AsyncRateLimitErrorRetryHandler(max_retry_count=1),
        ],
    )
    slack.rate_limit("chat.postMessage", retry_after=0, times=1)
    response = await client.chat_postMessage(channel=CHANNEL, text="hello")
    assert response["ok"]
    calls = slack.calls_to("chat.postMessage")
    assert [c.status for c in calls] == [429, 200]
    assert [m.text for m in slack.channel_messages(CHANNEL)] == ["hello"]

    # Without the handler a 429 surfaces as an error.
    plain = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    slack.rate_limit("chat.update", retry_after=7)
    with pytest.raises(SlackApiError) as limited:
        await plain.chat_update(channel=CHANNEL, ts=response["ts"], text="x")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"


async def test_misc_methods(slack: SlackServer, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="hi")
    await client.reactions_add(channel=CHANNEL, timestamp=posted["ts"], name="eyes")
    await client.reactions_add(channel=CHANNEL, timestamp=posted["ts"], name="white_check_mark")
    await client.reactions_remove(channel=CHANNEL, timestamp=posted["ts"], name="eyes")
    assert slack.reactions(CHANNEL, posted["ts"]) == ["white_check_mark"]

    await client.chat_postEphemeral(channel=CHANNEL, user=ALICE, text="only you")
    assert [(e.user, e.text) for e in slack.ephemerals(CHANNEL)] == [(ALICE, "only you")]

    info = await client.conversations_info(channel=CHANNEL)
    assert info["channel"]["name"] == "dev"
    slack.set_channel(CHANNEL, "dev-renamed")
    info = await client.conversations_info(channel=CHANNEL)
    assert info["channel"]["name"] == "dev-renamed"

    user = await client.users_info(user=ALICE)
    assert user["user"]["name"] == "alice"

    slack.set_usergroup("S0ONCALL", [ALICE])
    group = await client.usergroups_users_list(usergroup="S0ONCALL")
    assert group["users"] == [ALICE]

    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts=posted["ts"], status="is thinking…"
    )
    assert slack.status(CHANNEL, posted["ts"]) == "is thinking…"


async def _post_button(slack: SlackServer) -> str:
    """Post an approval message with an `approve` button as the bot; return its ts."""
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    posted = await client.chat_postMessage(
        channel=CHANNEL,
        text="Approve scaling api to 5?",
        blocks=[
            {
                "type": "actions",
                "block_id": "approval",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "value": "yes",
                    }
                ],
            }
        ],
    )
    return str(posted["ts"])


def _bolt_app(slack: SlackServer) -> AsyncApp:
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
        signing_secret=slack.signing_secret,
    )

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        await say(text=f"echo: {event['text']}", thread_ts=event["ts"])

    @app.action("approve")
    async def on_approve(ack: Any, respond: Any, body: dict[str, Any]) -> None:
        await ack()
        await respond(replace_original=True, text=f"approved by <@{body['user']['id']}>")

    @app.command("/kelpie")
    async def on_command(ack: Any, command: dict[str, Any]) -> None:
        await ack(text=f"got {command['text']}")

    return app


async def test_bolt_socket_mode_mention(slack: SlackServer) -> None:
    app = _bolt_app(slack)
    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        await slack.wait_connected()
        event = slack.mention(CHANNEL, ALICE, "hello there")
        envelope_id = await slack.deliver_event(event)
        ack = await slack.wait_ack(envelope_id)
        assert ack.payload is None

        await slack.wait_for(lambda s: len(s.thread(CHANNEL, event["ts"])) == 2)
        reply = slack.thread(CHANNEL, event["ts"])[-1]
        assert reply.is_bot and reply.text == f"echo: <@{slack.bot_user_id}> hello there"
        assert slack.calls_to("apps.connections.open")[0].token == slack.app_token

        # A slash command's ack carries its response payload back through the socket.
        command_id = await slack.deliver(
            "slash_commands", slack.slash_command("/kelpie", "pods", ALICE, CHANNEL)
        )
        assert (await slack.wait_ack(command_id)).payload == {"text": "got pods"}

        # A button click: ack, then respond() through the loopback response_url.
        button = await _post_button(slack)
        payload = slack.block_action(ALICE, CHANNEL, button, "approve", "yes")
        action_id = await slack.deliver("interactive", payload)
        await slack.wait_ack(action_id)
        await slack.wait_for(lambda s: s.responses_to(payload["response_url"]))
        assert slack.get_message(CHANNEL, button).text == f"approved by <@{ALICE}>"  # type: ignore[union-attr]

        # Dropping the socket with Slack's disconnect message makes the client reconnect.
        await slack.disconnect_all(reason="refresh_requested")
        await slack.wait_for(lambda s: len(s.calls_to("apps.connections.open")) == 2)
        await slack.wait_connected()
    finally:
        await handler.close_async()


async def test_bolt_http_signed_requests(slack: SlackServer) -> None:
    app = _bolt_app(slack)

    async def slack_events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", slack_events)
    runner = web.AppRunner(web_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        event = slack.mention(CHANNEL, ALICE, "over http")
        body = slack.event_envelope_payload(event)
        status, _ = await slack.post_signed(url, body)
        assert status == 200
        await slack.wait_for(lambda s: len(s.thread(CHANNEL, event["ts"])) == 2)

        status, _ = await slack.post_signed(url, body, signing_secret="not-the-secret")
        assert status == 401
        status, _ = await slack.post_signed(url, body, timestamp=int(time.time()) - 600)
        assert status == 401

        status, text = await slack.post_signed(
            url, slack.slash_command("/kelpie", "nodes", ALICE, CHANNEL)
        )
        assert (status, text) == (200, "got nodes")

        button = await _post_button(slack)
        payload = slack.block_action(ALICE, CHANNEL, button, "approve", "yes")
        status, _ = await slack.post_signed(url, payload)
        assert status == 200
        await slack.wait_for(lambda s: s.responses_to(payload["response_url"]))
        assert slack.get_message(CHANNEL, button).text == f"approved by <@{ALICE}>"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_response_url_semantics(slack: SlackServer) -> None:
    button = await _post_button(slack)
    payload = slack.block_action(ALICE, CHANNEL, button, "approve", "yes")
    assert payload["actions"][0]["block_id"] == "approval"
    assert payload["message"]["ts"] == button and payload["channel"]["name"] == "dev"
    webhook = AsyncWebhookClient(payload["response_url"])

    assert (await webhook.send(text="only alice sees this")).status_code == 200
    assert [(e.user, e.text, e.source) for e in slack.ephemerals(CHANNEL)] == [
        (ALICE, "only alice sees this", "response_url")
    ]
    await webhook.send(text="everyone sees this", response_type="in_channel")
    assert [m.text for m in slack.channel_messages(CHANNEL)][-1] == "everyone sees this"
    await webhook.send_dict({"delete_original": True})
    assert slack.get_message(CHANNEL, button).deleted  # type: ignore[union-attr]

    # A response_url allows five uses.
    await webhook.send(text="4")
    await webhook.send(text="5")
    assert (await webhook.send(text="6")).status_code == 404
    assert [r.status for r in slack.responses_to(payload["response_url"])] == [200] * 5 + [404]


async def test_socket_mode_several_connections_dm_and_drop(slack: SlackServer) -> None:
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
        signing_secret=slack.signing_secret,
    )

    @app.message("")
    async def on_dm(message: dict[str, Any], say: Any) -> None:
        await say(text=f"dm: {message['text']}")

    handlers = [AsyncSocketModeHandler(app, slack.app_token) for _ in range(2)]
    for handler in handlers:
        await handler.connect_async()
    try:
        await slack.wait_connected(count=2)
        dm = slack.dm_channel(ALICE)
        first = slack.im_message(ALICE, "one")
        second = slack.im_message(ALICE, "two")
        assert first["channel"] == dm and first["channel_type"] == "im"
        ids = [await slack.deliver_event(first), await slack.deliver_event(second)]
        for envelope_id in ids:
            await slack.wait_ack(envelope_id)
        await slack.wait_for(lambda s: len(s.channel_messages(dm)) == 4)
        assert sorted(m.text for m in slack.channel_messages(dm) if m.is_bot) == [
            "dm: one",
            "dm: two",
        ]

        # A retried delivery carries retry_attempt; Bolt turns it into x-slack-retry-num.
        retry_id = await slack.deliver(
            "events_api",
            slack.event_envelope_payload(first, event_id="Ev0RETRY"),
            retry_attempt=1,
        )
        await slack.wait_ack(retry_id)
        assert slack.sent_envelopes[-1]["retry_attempt"] == 1

        # An abrupt close (no disconnect message): both clients reconnect on their own.
        opened = len(slack.calls_to("apps.connections.open"))
        await slack.disconnect_all()
        await slack.wait_for(lambda s: len(s.calls_to("apps.connections.open")) == opened + 2)
        await slack.wait_connected(count=2)
        await slack.wait_ack(await slack.deliver_event(slack.im_message(ALICE, "three")))
        await slack.wait_for_call(
            "chat.postMessage", lambda call: call.params.get("text") == "dm: three"
        )
    finally:
        for handler in handlers:
            await handler.close_async()
