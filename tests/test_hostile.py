"""Hostile input gets a clear answer, never a crash: malformed and forged Slack requests
over HTTP and Socket Mode, generated with Hypothesis. What the HTTP client got back, what
the log says and what the thread shows are the evidence."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.peers.model_server import TextStep
from tests.peers.slack_server import SIGNING_SECRET
from tests.world import ALICE, OPS_CHANNEL, SHOP_CHANNEL, World

HTTP = {"slack": {"mode": "http"}}
FORM = "application/x-www-form-urlencoded"
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
# Fields kelpie reads, with values of any type.
event_fields = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["app_mention", "message"]) | json_values,
        "user": st.just(ALICE) | json_values,
        "channel": st.just(SHOP_CHANNEL) | json_values,
        "text": st.text() | json_values,
        "ts": st.just("1700000000.000100") | json_values,
        "thread_ts": json_values,
        "subtype": json_values,
        "channel_type": json_values,
        "bot_id": json_values,
    },
)


def signed(raw: bytes, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/json",
    }


async def post(url: str, raw: bytes, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=headers) as response,
    ):
        return response.status


@pytest.fixture
async def http_url(world: World) -> str:
    bot = await world.start_bot(HTTP)
    return f"http://127.0.0.1:{bot.http_port}/slack/events"


async def test_malformed_requests_get_a_4xx_sentence(http_url: str):
    cases = {
        "bad utf-8": (b'{"type": "event_callback", "x": "\xff\xfe"}', 400),
        "bad json": (b'{"type": "event_callback", ', 400),
        "deep nesting": (b"[" * 100_000 + b"]" * 100_000, 400),
        "json that is not an object": (b"[1, 2, 3]", 400),
        "too large": (b"{" + b" " * (2 << 20) + b"}", 413),
    }
    for name, (raw, expected) in cases.items():
        assert await post(http_url, raw, signed(raw)) == expected, name
    raw = b'{"type": "event_callback"}'
    assert await post(http_url, raw, {"Content-Type": "application/json"}) == 401
    assert await post(http_url, raw, signed(raw, timestamp=int(time.time()) - 900)) == 401
    assert await post(http_url, raw, {**signed(raw), "X-Slack-Request-Timestamp": "nan"}) == 401


@FUZZ
@given(body=json_values, as_form=st.booleans())
async def test_no_http_request_gets_a_500(http_url: str, body: Any, as_form: bool):
    raw = json.dumps(body).encode()
    if as_form:
        raw = b"payload=" + raw
    headers = signed(raw)
    if as_form:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    status = await post(http_url, raw, headers)
    assert 200 <= status < 500


@FUZZ
@given(event=event_fields)
async def test_no_event_shape_crashes_a_listener(
    world: World, http_url: str, event: dict[str, Any], caplog: pytest.LogCaptureFixture
):
    envelope = world.slack.event_envelope_payload(event)
    raw = json.dumps(envelope).encode()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        status = await post(http_url, raw, signed(raw))
        await world.drain()
    assert 200 <= status < 500  # 404: an event type kelpie has no listener for
    crashed = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert crashed == []


async def test_malformed_signature_headers_get_a_401_and_one_log_line(
    http_url: str, caplog: pytest.LogCaptureFixture
):
    raw = b'{"type": "event_callback"}'
    good = signed(raw)
    cases = {
        "5,000-digit timestamp": {**good, "X-Slack-Request-Timestamp": "1" * 5000},
        "negative timestamp": {**good, "X-Slack-Request-Timestamp": "-1700000000"},
        "non-ascii digits": {**good, "X-Slack-Request-Timestamp": "\uff11" * 10},
        "no signature": {k: v for k, v in good.items() if k != "X-Slack-Signature"},
        "garbled signature": {**good, "X-Slack-Signature": "v0=\u00ff" + "z" * 5000},
        "no timestamp": {k: v for k, v in good.items() if k != "X-Slack-Request-Timestamp"},
    }
    for name, headers in cases.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert await post(http_url, raw, headers) == 401, name
        assert [r.levelno for r in caplog.records] == [logging.WARNING], name
        assert not any(r.exc_info for r in caplog.records), name


# Field names kelpie or Bolt read somewhere in a request, planted anywhere in the body.
READ_FIELDS = (
    "type team_id enterprise_id api_app_id event_id authorizations team enterprise user "
    "channel actions action_id block_id value container message_ts thread_ts message view "
    "is_ext_shared_channel is_enterprise_install response_url response_urls trigger_id event "
    "user_team subtype ts text channel_type bot_id item previous_message assistant_thread "
    "function_data id user_id channel_id"
).split()


def fields(value: Any) -> list[tuple[dict[str, Any], str]]:
    """Every (object, field name) in `value`, nested ones included."""
    found: list[tuple[dict[str, Any], str]] = []
    children = list(value.values()) if isinstance(value, dict) else value
    if isinstance(value, dict):
        found += [(value, name) for name in value]
    if isinstance(value, dict | list):
        for child in children:
            found += fields(child)
    return found


@st.composite
def wrong_typed(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with one to four of its fields, or fields kelpie or Bolt read planted in any
    of its objects, given values of any JSON type."""
    body = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        node, name = draw(st.sampled_from(fields(body)))
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            name = draw(st.sampled_from(READ_FIELDS))
        node[name] = draw(json_values)
    return body


def requests_kelpie_gets(world: World) -> list[tuple[dict[str, Any], bool]]:
    """A mention, one from a shared channel, and clicks on Stop and Approve (interactive:
    sent as a form), as Slack sends them: the bases the fuzz plants wrong types in."""
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    shared = world.slack.event_envelope_payload(mention)
    shared["is_ext_shared_channel"] = True
    ts = "1700000000.000100"
    stop = world.slack.block_action(ALICE, SHOP_CHANNEL, ts, "kelpie_stop", f"T0:C0SHOP:{ts}")
    approve = world.slack.block_action(ALICE, OPS_CHANNEL, ts, "kelpie_approve", "no-such-card")
    event = world.slack.event_envelope_payload(mention)
    return [(event, False), (shared, False), (stop, True), (approve, True)]


def as_slack_sends(body: dict[str, Any], interactive: bool) -> tuple[bytes, str]:
    if interactive:
        return urlencode({"payload": json.dumps(body)}).encode(), FORM
    return json.dumps(body).encode(), "application/json"


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_wrong_json_types_never_reach_bolt(
    world: World, http_url: str, data: st.DataObject, caplog: pytest.LogCaptureFixture
):
    world.model.reply_default(TextStep("Looked at it."))  # a mention left intact is answered
    base, interactive = data.draw(st.sampled_from(requests_kelpie_gets(world)))
    raw, content_type = as_slack_sends(data.draw(wrong_typed(base)), interactive)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        status = await post(http_url, raw, {**signed(raw), "Content-Type": content_type})
        await world.drain()
    assert status < 500
    crashed = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert crashed == []


async def test_a_replayed_request_is_processed_once(world: World, http_url: str):
    command = world.slack.slash_command("/kelpie", "help", ALICE, SHOP_CHANNEL)
    raw, content_type = world.slack.encode_http_body(command)
    headers = {**signed(raw.encode()), "Content-Type": content_type}
    assert await post(http_url, raw.encode(), headers) == 200
    assert await post(http_url, raw.encode(), headers) == 200  # the same signature again
    await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]))
    assert len(world.slack.responses_to(command["response_url"])) == 1


async def test_events_from_another_workspace_are_ignored(world: World, http_url: str):
    mention = world.slack.mention(SHOP_CHANNEL, ALICE, "is shop healthy?")
    envelope = world.slack.event_envelope_payload(mention)
    envelope["team_id"] = "T0INTRUDER"
    raw = json.dumps(envelope).encode()
    assert await post(http_url, raw, signed(raw)) == 200
    await world.drain()
    assert world.model.requests == []
    assert [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot] == []


async def test_a_lone_surrogate_and_a_wrong_thread_ts_get_answers_not_silence(world: World):
    world.model.reply_text("Answered despite the odd character.")
    world.model.reply_text("Answered in the right thread.")
    await world.start_bot()
    odd = await world.mention(SHOP_CHANNEL, ALICE, "status \ud800 of shop?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, odd["ts"], 1)
    assert replies
    await world.drain()
    sent = json.dumps(world.model.requests[0]["messages"])
    assert "status \\ufffd of shop?" in sent
    wrong = world.slack.mention(SHOP_CHANNEL, ALICE, "and now?")
    wrong["thread_ts"] = {"not": "a string"}
    await world.slack.deliver_event(wrong)
    await world.drain()
    assert len(world.model.requests) == 1  # refused as malformed, not copied into a reply
    calls = [c.params for c in world.slack.calls_to("chat.postMessage")]
    assert all(isinstance(p.get("thread_ts", ""), str) for p in calls)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(min_size=1, max_size=200))
async def test_every_valid_message_is_answered_over_socket_mode(world: World, text: str):
    if not world.bots:
        await world.start_bot()
    world.model.reply_text("Looked at it.")
    mention = await world.mention(SHOP_CHANNEL, ALICE, text)
    replies = await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    assert replies
    await world.drain()


async def test_people_from_another_organisation_get_the_external_users_role(world: World):
    await world.start_bot()
    partner = world.slack.mention(SHOP_CHANNEL, ALICE, "list the pods")
    partner["user_team"] = "T0PARTNER"
    await world.slack.deliver_event(partner)
    replies = await world.wait_bot_replies(SHOP_CHANNEL, partner["ts"], 1)
    assert "only people from this workspace" in replies[-1].text
    await world.drain()
    assert world.model.requests == []

    await world.stop_bot(world.bots[-1])
    world.model.reply_text("Read-only answer.")
    await world.start_bot({"slack": {"external_users_role": "viewer"}})
    partner = world.slack.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    partner["user_team"] = "T0PARTNER"
    await world.slack.deliver_event(partner)
    await world.wait_bot_replies(OPS_CHANNEL, partner["ts"], 1)
    await world.drain()
    system = world.model.requests[0]["messages"][0]["content"]
    assert "role: viewer" in system  # not the channel's operator role
    offered = {tool["function"]["name"] for tool in world.model.requests[0]["tools"]}
    assert "scale_deployment" not in offered
