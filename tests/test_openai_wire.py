"""What only the direct OpenAI-wire client has: its event-stream parser, its one kept-alive
session, its config rules, and a bot that never loads LiteLLM. (The contract it shares with
`LiteLLMGateway` runs on both in tests/test_model_gateway.py and test_model_auth.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from bot.config import AuthMethod, ConfigError, parse_config
from bot.model.model_map import map_capabilities, map_path
from bot.model.openai_wire import OpenAIWireGateway, SseParser
from bot.model.streaming import StreamAssembly, relay
from bot.model.types import ModelError, ModelRequest, ProviderSettings
from tests.peers.model_server import LongLineStep, ModelServer, RedirectStep, TrickleStep

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-wire-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "how is shop?"}]


async def _ignore(_: str) -> None:
    return None


def wire(peer: ModelServer, **settings: Any) -> OpenAIWireGateway:
    return OpenAIWireGateway(ProviderSettings("openai/test-model", peer.api_base, KEY, **settings))


# --- the event-stream parser --------------------------------------------------------------

EVENTS = [b'{"a": 1}', b'{"b": "x\\ny"}', b'{"c": "\xc3\xa9t\xc3\xa9"}', b"[DONE]"]


def _stream(newline: bytes) -> bytes:
    # One comment, one event of two data lines (joined by a newline), no space after a colon.
    parts = [b": keep-alive" + newline * 2]
    parts += [b"data: " + e + newline * 2 for e in EVENTS[:2]]
    parts.append(b"data:" + EVENTS[2] + newline + b"id: 7" + newline * 2)
    parts.append(b"data: [DO" + newline + b"data: NE]" + newline * 2)
    return b"".join(parts)


@given(st.sampled_from([b"\n", b"\r\n"]), st.lists(st.integers(1, 40), max_size=30))
def test_events_are_the_same_however_the_bytes_are_split(newline: bytes, cuts: list[int]) -> None:
    stream = _stream(newline)
    parser, events, at = SseParser(), [], 0
    for size in cuts:
        events += parser.feed(stream[at : at + size])
        at += size
    events += parser.feed(stream[at:]) + parser.finish()

    assert events == [*EVENTS[:3], b"[DO\nNE]"]
    assert json.loads(events[2]) == {"c": "été"}  # a character split across reads survives


def test_a_last_event_without_its_blank_line_still_counts() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"a": 1}\n\ndata: [DONE]') == [b'{"a": 1}']
    assert parser.finish() == [b"[DONE]"]


# --- the session -----------------------------------------------------------------------


async def test_one_connection_serves_every_request_until_close() -> None:
    async with ModelServer() as peer:
        for text in ("one", "two", "three"):
            peer.reply_text(text)
        gateway = wire(peer)
        replies = [await gateway.complete(ModelRequest(MESSAGES), _ignore) for _ in range(3)]

        assert [r.text for r in replies] == ["one", "two", "three"]
        assert peer.open_connections == 1  # kept alive and reused, not one per request
        await gateway.close()
        await peer.wait_connections_closed()


async def test_the_key_reaches_no_log_line_and_no_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with ModelServer() as peer:
        peer.reply_error(401, f"Incorrect API key provided: {KEY}.")
        gateway = wire(peer)
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert peer.headers[0]["Authorization"] == f"Bearer {KEY}"  # it was sent, only there
    assert "Incorrect API key provided: ***" in caplog.text
    assert KEY not in caplog.text
    assert KEY not in str(caught.value) and KEY not in caught.value.user_message
    assert KEY not in repr(gateway)


async def test_auth_none_sends_nothing_even_with_a_netrc_for_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login operator password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))  # the process environment, not kelpie's code
    async with ModelServer() as peer:
        peer.reply_text("ok")
        gateway = OpenAIWireGateway(
            ProviderSettings("openai/test-model", peer.api_base, auth=AuthMethod.NONE)
        )
        await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert "Authorization" not in peer.headers[0]


async def test_the_environments_proxy_carries_the_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP(S)_PROXY applies as under LiteLLM: the peer plays the proxy for a host that
    does not resolve, so only a proxied request can arrive."""
    async with ModelServer() as peer:
        monkeypatch.setenv("HTTP_PROXY", peer.root)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        peer.reply_text("via the proxy")
        settings = ProviderSettings("openai/test-model", "http://model.invalid/v1", KEY)
        gateway = OpenAIWireGateway(settings)
        reply = await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert reply.text == "via the proxy"
    assert peer.headers[0]["Host"] == "model.invalid"


async def test_an_error_body_that_arrives_in_pieces_is_read_whole() -> None:
    """The error's code may sit in a later TCP segment than its start (a proxy, a slow
    server): the whole body decides, here that the conversation is too long."""
    error = {"error": {"message": "This model's maximum context length is 8192 tokens."}}
    error["error"].update(type="invalid_request_error", param="messages")
    error["error"]["code"] = "context_length_exceeded"
    body = json.dumps(error).encode()

    async def split(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=400)
        response.content_type = "application/json"
        await response.prepare(request)
        for part in (body[:20], body[20:]):
            await response.write(part)
            await asyncio.sleep(0.05)  # two segments, not one
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", split)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    gateway = OpenAIWireGateway(
        ProviderSettings("openai/test-model", f"http://127.0.0.1:{port}/v1", KEY)
    )
    try:
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), _ignore)
    finally:
        await gateway.close()
        await runner.cleanup()

    assert caught.value.user_message == (
        "The conversation no longer fits the model's context window: start a new thread."
    )


async def test_options_are_fields_of_the_request_body() -> None:
    async with ModelServer() as peer:
        peer.reply_text("ok")
        gateway = wire(peer, temperature=0.3, options={"top_p": 0.5, "temperature": 1.5, "seed": 7})
        await gateway.complete(ModelRequest(MESSAGES, reasoning_effort="low"), _ignore)
        await gateway.close()

    (body,) = peer.requests
    assert (body["top_p"], body["seed"], body["reasoning_effort"]) == (0.5, 7, "low")
    assert "temperature" not in body  # a reasoning request sends none, as through LiteLLM


# --- configuration ---------------------------------------------------------------------


def _profile(**settings: Any) -> dict[str, Any]:
    return {
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": "/nonexistent"}]},
        "models": {"profiles": {"default": {"client": "openai-compatible", **settings}}},
    }


@pytest.mark.parametrize(
    ("model", "field", "code"),
    [
        ("gpt-5", "max_tokens", "unsupported_parameter"),
        ("o4-mini", "max_tokens", "unsupported_parameter"),
        ("o1", "temperature", "unsupported_value"),
    ],
)
async def test_the_peer_refuses_what_openai_refuses_from_reasoning_models(
    model: str, field: str, code: str
) -> None:
    body: dict[str, Any] = {"model": model, "messages": MESSAGES, field: 0.5}
    async with ModelServer() as peer, aiohttp.ClientSession() as session:
        async with session.post(peer.api_base + "/chat/completions", json=body) as response:
            status, answer = response.status, await response.json()

    assert status == 400
    error = answer["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", field, code)
    assert field in error["message"]
    assert peer.rejected and not peer.pending_steps


@pytest.mark.parametrize(
    ("model", "effort", "sent"),
    [
        ("openai/gpt-5.1", "low", {"max_completion_tokens": 64}),
        ("openai/gpt-5-mini", None, {"max_completion_tokens": 64}),
        ("openai/o3", None, {"max_completion_tokens": 64}),
        ("openai/gpt-5-chat-latest", None, {"max_tokens": 64, "temperature": 0.2}),
        ("openai/gpt-4o", None, {"max_tokens": 64, "temperature": 0.2}),
    ],
)
async def test_limits_and_temperature_are_sent_as_each_model_takes_them(
    model: str, effort: str | None, sent: dict[str, Any]
) -> None:
    """Reasoning models get `max_completion_tokens` and no temperature, chat models (the
    gpt-5-chat ones included) `max_tokens` and their temperature."""
    async with ModelServer() as peer:
        peer.reply_text("ok")
        gateway = OpenAIWireGateway(
            ProviderSettings(model, peer.api_base, KEY, temperature=0.2, max_tokens=64)
        )
        try:
            await gateway.complete(ModelRequest(MESSAGES, reasoning_effort=effort), _ignore)
        finally:
            await gateway.close()

    (body,) = peer.requests
    fields = ("max_tokens", "max_completion_tokens", "temperature")
    assert {name: body[name] for name in fields if name in body} == sent
    peer.assert_script_consumed()


@pytest.mark.parametrize(
    ("settings", "client"),
    [
        ({"model": "openai/gpt-4o"}, "openai-compatible"),
        ({"model": "openai/gpt-4o", "options": {"top_p": 0.9, "seed": 7}}, "openai-compatible"),
        ({"model": "anthropic/claude-sonnet-4-20250514"}, "litellm"),
        ({"model": "ollama_chat/qwen3:8b"}, "litellm"),
        ({"model": "openai/gpt-4o", "options": {"extra_headers": {"X-A": "b"}}}, "litellm"),
        ({"model": "openai/gpt-4o", "options": {"num_retries": 3}}, "litellm"),
        ({"model": "openai/gpt-4o", "client": "litellm"}, "litellm"),
    ],
)
def test_the_default_client_is_the_wire_where_it_can_serve_the_profile(
    settings: dict[str, Any], client: str
) -> None:
    """`client: auto` (the default): the wire client exactly where `client:
    openai-compatible` would be accepted, LiteLLM everywhere else."""
    data = {**_profile(), "models": {"profiles": {"default": settings}}}
    profile = parse_config(data).models.active_profile
    assert profile.client.value == settings.get("client", "auto")
    assert profile.client_choice.client.value == client


@pytest.mark.parametrize(
    ("settings", "sentence"),
    [
        (
            {"model": "anthropic/claude-sonnet-4-20250514"},
            "client openai-compatible needs an openai/ model reference",
        ),
        (
            {"model": "openai/gpt-4o", "options": {"drop_params": True, "top_p": 0.9}},
            "client openai-compatible sends options as request fields; drop_params are "
            "LiteLLM settings or fields kelpie sets itself: remove them or use client: litellm",
        ),
        ({"model": "openai/gpt-4o", "client": "openai"}, "client"),
    ],
)
def test_a_profile_the_wire_cannot_serve_is_one_sentence(
    settings: dict[str, Any], sentence: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_profile(**settings))
    (problem,) = caught.value.problems
    assert "models.profiles.default" in problem and sentence in problem


# --- no LiteLLM ------------------------------------------------------------------------


def test_the_model_map_is_read_without_importing_litellm() -> None:
    script = (
        "import sys\n"
        "from bot.model.model_map import map_capabilities\n"
        "print(map_capabilities('openai/gpt-4o'), map_capabilities('openai/o3-mini'))\n"
        "print(map_capabilities('openai/test-model'))\n"
        "print('litellm' in sys.modules)\n"
    )
    out = _python(script).splitlines()
    assert out == [
        "ModelCapabilities(parallel_tool_calls=True, reasoning=False, recommended_tier=None) "
        "ModelCapabilities(parallel_tool_calls=False, reasoning=True, recommended_tier=None)",
        "ModelCapabilities(parallel_tool_calls=False, reasoning=False, recommended_tier=None)",
        "False",
    ]
    assert map_path() is not None and map_capabilities("openai/gpt-5").reasoning is True


TURN = """
import asyncio, sys, tempfile
from pathlib import Path
from tests.world import ALICE, SHOP_CHANNEL, running_world

async def main():
    with tempfile.TemporaryDirectory() as tmp:
        async with running_world(Path(tmp)) as world:
            world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
            world.model.reply_text("All pods are running.")
            # Only openai/ profiles, every one on the default client (auto).
            review = {"model": "openai/test-model", "api_base": world.model.api_base}
            profiles = {"default": {"tier": "high"}, "review": review}
            await world.start_bot({"models": {"profiles": profiles}})
            mention = await world.mention(SHOP_CHANNEL, ALICE, "how is shop?")
            await world.slack.wait_for(lambda s: any(
                m.is_bot and "All pods are running." in m.text
                for m in s.thread(SHOP_CHANNEL, mention["ts"])), timeout=60)
            await world.drain()
            world.model.assert_script_consumed()
            print("answered")
    heavy = ("litellm", "openai", "mcp", "mcp_types", "uvicorn", "starlette")
    print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))

asyncio.run(main())
"""


def test_a_bot_with_only_openai_profiles_never_loads_litellm() -> None:
    """A whole turn in Slack (two rounds, a tool call) in a fresh interpreter, every profile
    an `openai/` one on the default client: neither LiteLLM nor the openai SDK is ever
    imported; nor, with no MCP server or client configured, the MCP SDK (~30 MB)."""
    assert _python(TURN).splitlines()[-2:] == ["answered", "[]"]


def _python(script: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# --- bounds: what one reply may cost ------------------------------------------------------


async def test_a_line_without_end_stops_the_read_at_one_megabyte() -> None:
    async with ModelServer() as peer:
        peer.enqueue(LongLineStep(256 << 20))  # a 256 MB line
        gateway = wire(peer)
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert caught.value.user_message == (
        "The model server sent a line longer than 1 MB, so kelpie stopped reading the answer."
    )
    assert not caught.value.retryable
    # The client hung up near the bound (socket buffers hold a few MB), not after 256 MB.
    assert peer.line_bytes_sent < 16 << 20


async def test_a_reply_over_four_megabytes_ends_the_call_with_one_sentence() -> None:
    seen: list[str] = []

    async def person(text: str) -> None:
        seen.append(text)

    async with ModelServer() as peer:
        peer.reply_text("y" * (5 << 20), chunk_size=32 << 10)  # every line well under 1 MB
        gateway = wire(peer)
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), person)
        await gateway.close()

    assert caught.value.user_message == (
        "The model's answer grew past 4 MB, so kelpie stopped reading it: "
        "ask for something shorter."
    )
    assert not caught.value.retryable
    assert 0 < len("".join(seen)) <= 4 << 20  # streamed until the bound, not beyond


async def test_a_trickle_that_beats_every_read_timeout_meets_the_overall_deadline() -> None:
    async with ModelServer() as peer:
        peer.enqueue(TrickleStep("slowly " * 10, interval=0.05))  # 3.5 s, a read each 50 ms
        gateway = wire(peer, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), _ignore)
        elapsed = time.monotonic() - started
        await gateway.close()

    assert caught.value.user_message == "The model server did not answer within 0.5 s."
    assert elapsed < 2.5


async def test_a_redirect_to_another_origin_is_not_followed() -> None:
    async with ModelServer() as peer, ModelServer() as elsewhere:
        elsewhere.reply_text("the conversation arrived")
        peer.enqueue(RedirectStep(307, elsewhere.api_base + "/chat/completions"))
        gateway = wire(peer)
        with pytest.raises(ModelError) as caught:
            await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert caught.value.user_message == (
        "The model server redirected the request to another address, which kelpie does "
        "not follow: check models.profiles.default.api_base."
    )
    assert elsewhere.recorded == []  # neither the conversation nor the key left
    assert len(peer.recorded) == 1


async def test_a_redirect_on_the_same_origin_is_followed_with_the_conversation() -> None:
    async with ModelServer() as peer:
        peer.enqueue(RedirectStep(308, "/chat/completions"))  # /v1/… → /…: same server
        peer.reply_text("moved")
        gateway = wire(peer)
        reply = await gateway.complete(ModelRequest(MESSAGES), _ignore)
        await gateway.close()

    assert reply.text == "moved"
    assert [r.path for r in peer.recorded] == ["/v1/chat/completions", "/chat/completions"]
    assert peer.requests[1]["messages"] == MESSAGES


async def test_a_long_answer_of_tiny_deltas_is_assembled_in_linear_time() -> None:
    """200,000 one-character deltas: appending to one string copies it each time (about
    20 GB copied, many seconds holding the loop); parts joined once take well under one."""
    count = 200_000

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        delta = {"choices": [{"index": 0, "delta": {"content": "z"}}]}
        for _ in range(count):
            yield delta
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

    assembly = StreamAssembly()
    started = time.process_time()
    text = await relay(chunks(), assembly, _ignore)
    spent = time.process_time() - started

    assert text == "z" * count and assembly.raw_text == text
    assert spent < 2.0, f"assembling {count} deltas took {spent:.1f} s of CPU"
