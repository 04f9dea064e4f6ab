"""Both provider clients end to end against the scripted ModelServer, real HTTP: every
contract test runs on `LiteLLMGateway` (real LiteLLM) and on `OpenAIWireGateway` (the
OpenAI wire spoken directly), which must behave the same."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.model.gateway import LiteLLMGateway
from bot.model.openai_wire import OpenAIWireGateway
from bot.model.streaming import ThinkFilter
from bot.model.types import (
    FinishReason,
    ModelError,
    ModelRequest,
    ProviderGateway,
    ProviderSettings,
)
from tests.peers.model_server import ModelServer, TextStep

API_KEY = "sk-test"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_pods",
            "description": "List pods in a namespace.",
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}},
                "required": ["namespace"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_events",
            "description": "List recent events for an object.",
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}},
            },
        },
    },
]

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are kelpie."},
    {"role": "user", "content": "Why is web-1 in dev crashing?"},
]


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    srv = ModelServer()
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


MakeGateway = Callable[..., ProviderGateway]
CLIENTS = [LiteLLMGateway, OpenAIWireGateway]


@pytest.fixture(params=CLIENTS, ids=["litellm", "openai-compatible"])
async def make_gateway(request: pytest.FixtureRequest) -> AsyncIterator[MakeGateway]:
    """Builds gateways of one client; closes them after the test."""
    built: list[ProviderGateway] = []

    def make(api_base: str, **overrides: Any) -> ProviderGateway:
        options: dict[str, Any] = {
            "model": "openai/test-model",
            "api_base": api_base,
            "api_key": API_KEY,
            "timeout_s": 5.0,
            "profile": "main",
        }
        options.update(overrides)
        gateway: ProviderGateway = request.param(ProviderSettings(**options))
        built.append(gateway)
        return gateway

    yield make
    for gateway in built:
        await gateway.close()


class Sink:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def __call__(self, text: str) -> None:
        self.deltas.append(text)

    @property
    def text(self) -> str:
        return "".join(self.deltas)


async def no_more_requests(server: ModelServer, expected: int) -> None:
    """Give hidden retries a chance to show up, then count."""
    await asyncio.sleep(0.3)
    assert len(server.requests) == expected


# --- successful streams -----------------------------------------------------------


async def test_a_text_answer_streamed_in_many_deltas_assembles(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    # How many batches reach the sink depends on how busy its loop is (the LiteLLM client
    # coalesces what arrived meanwhile); that it streams at all is the next test's.
    answer = "web-1 is in CrashLoopBackOff: the container exits with code 1."
    server.reply_text(answer, chunk_size=5, usage=(120, 17))
    sink = Sink()

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    assert sink.text == answer
    assert reply.text == answer
    assert reply.tool_calls == []
    assert reply.finish_reason is FinishReason.STOP
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (120, 17)
    assert reply.usage.estimated is False
    assert reply.model == "openai/test-model"
    server.assert_script_consumed()


async def test_parallel_tool_calls_split_across_chunks_assemble(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_tool_calls(
        [
            ("get_pods", {"namespace": "dev"}, "call_pods"),
            ("get_events", '{"namespace": "dev", "name": "web-1"}', "call_events"),
        ],
        text="Let me look.",
        chunk_size=4,
    )
    sink = Sink()

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES, TOOLS), sink)

    assert reply.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.id, c.name) for c in reply.tool_calls] == [
        ("call_pods", "get_pods"),
        ("call_events", "get_events"),
    ]
    assert json.loads(reply.tool_calls[0].arguments) == {"namespace": "dev"}
    assert reply.tool_calls[1].arguments == '{"namespace": "dev", "name": "web-1"}'
    assert reply.text == sink.text == "Let me look."
    server.assert_script_consumed()


async def test_length_finish_is_reported(server: ModelServer, make_gateway: MakeGateway) -> None:
    server.reply_text("This answer was cut by max_tokens", finish_reason="length")

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert reply.finish_reason is FinishReason.LENGTH


async def test_usage_is_estimated_when_the_server_sends_none(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_text("Nothing is wrong with web-1.", usage=False)

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES, TOOLS), Sink())

    # LiteLLM's final chunk then holds zeros (its token counter is off): kelpie estimates.
    assert server.usage_reported == []
    assert reply.usage.estimated is True
    assert reply.usage.input_tokens > 0
    assert reply.usage.output_tokens > 0
    sent_chars = len(json.dumps(MESSAGES)) + len(json.dumps(TOOLS))
    assert reply.usage.input_tokens == pytest.approx(sent_chars / 4, abs=1)


async def test_server_receives_messages_tools_and_options(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_text("ok")
    server.reply_text("ok again")
    gateway = make_gateway(server.api_base, temperature=0.2, max_tokens=256)

    await gateway.complete(ModelRequest(MESSAGES, TOOLS), Sink())
    await gateway.complete(ModelRequest(MESSAGES), Sink())

    with_tools, without_tools = server.requests
    assert with_tools["model"] == "test-model"
    assert with_tools["messages"] == MESSAGES
    assert with_tools["tools"] == TOOLS
    assert with_tools["stream"] is True
    assert with_tools["stream_options"] == {"include_usage": True}
    assert with_tools["temperature"] == 0.2
    assert with_tools["max_tokens"] == 256
    assert "tools" not in without_tools
    assert server.headers[0]["Authorization"] == f"Bearer {API_KEY}"
    assert server.recorded[0].path == "/v1/chat/completions"
    server.assert_script_consumed()


async def test_text_reaches_on_text_while_the_answer_still_streams(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    """The peer holds its stream after the first words until the sink has shown them:
    a client that waited for the whole answer would never finish."""
    rest = asyncio.Event()
    server.reply_text("First words. Then the rest of the answer.", chunk_size=6, hold=rest)
    shown: list[str] = []

    async def sink(text: str) -> None:
        shown.append(text)
        rest.set()

    async with asyncio.timeout(10):
        reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    assert shown[0] == "First "
    assert "".join(shown) == reply.text == "First words. Then the rest of the answer."


class Stopped(Exception):
    pass


@pytest.mark.parametrize("how", ["cancelled", "sink fails"])
async def test_a_call_stopped_midway_closes_its_stream(
    server: ModelServer, make_gateway: MakeGateway, how: str
) -> None:
    """A turn interrupted mid-answer (Stop, or Slack failing under the stream): the request
    is not left running, the model server sees its connection closed."""
    first_words = asyncio.Event()
    server.reply_text(
        "First words, and an answer that never comes.", chunk_size=6, hold=asyncio.Event()
    )

    async def sink(text: str) -> None:
        first_words.set()
        if how == "sink fails":
            raise Stopped()

    call = asyncio.create_task(make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink))
    await first_words.wait()
    if how == "cancelled":
        call.cancel()

    with pytest.raises(asyncio.CancelledError if how == "cancelled" else Stopped):
        await call
    await server.wait_connections_closed()
    assert len(server.requests) == 1


async def test_litellm_calls_run_on_a_thread_that_close_joins(server: ModelServer) -> None:
    before = set(threading.enumerate())
    server.reply_text("ok")
    server.reply_text("OK")
    gateway = LiteLLMGateway(
        ProviderSettings("openai/test-model", api_base=server.api_base, api_key=API_KEY)
    )

    await gateway.complete(ModelRequest(MESSAGES), Sink())
    await gateway.ping()
    (worker,) = [t for t in set(threading.enumerate()) - before if t.name == "kelpie-litellm"]
    await gateway.close()

    assert not worker.is_alive()
    server.assert_script_consumed()


@pytest.mark.parametrize("model", ["openai/o3-mini", "openai/gpt-5-mini"])
async def test_a_reasoning_model_is_sent_what_it_accepts(
    server: ModelServer, make_gateway: MakeGateway, model: str
) -> None:
    """OpenAI's reasoning models refuse `max_tokens` and a temperature other than 1 (the
    peer answers 400 as OpenAI does): both clients send `max_completion_tokens` and no
    temperature, for an answer and for `kelpie check`'s ping."""
    server.reply_text("Pods are fine.")
    server.reply_text("OK")
    gateway = make_gateway(server.api_base, model=model, temperature=0.2, max_tokens=256)

    reply = await gateway.complete(ModelRequest(MESSAGES, TOOLS), Sink())
    await gateway.ping()

    answer, ping = server.requests
    assert reply.text == "Pods are fine."
    assert (answer["max_completion_tokens"], ping["max_completion_tokens"]) == (256, 1)
    for body in (answer, ping):
        assert "max_tokens" not in body
        assert "temperature" not in body
    server.assert_script_consumed()


# --- <think> blocks ---------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 8])
async def test_think_block_split_across_chunks_never_reaches_on_text(
    server: ModelServer, chunk_size: int, make_gateway: MakeGateway
) -> None:
    server.reply_text("Answer: restart it.", think="secret reasoning", chunk_size=chunk_size)
    sink = Sink()

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    assert all("<" not in d and "secret" not in d for d in sink.deltas), sink.deltas
    assert sink.text == reply.text == "Answer: restart it."


async def test_unclosed_think_block_is_dropped(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_text("Before. <think>still thinking when the stream ended", chunk_size=3)
    sink = Sink()

    reply = await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    assert sink.text == reply.text == "Before. "


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        (["<think>a</think>b"], "b"),
        (["<thi", "nk>a</th", "ink>\n\nb"], "b"),
        (["x<", "think>y</think>z<think>w</think>!"], "xz!"),
        (["a <", "b"], "a <b"),  # a lone "<" that is not a tag survives
        (["tail <thi"], "tail <thi"),  # a partial tag at the end is just text
        (["<think>open"], ""),
        (["5 < 6 and 7 > 3"], "5 < 6 and 7 > 3"),
    ],
)
def test_think_filter(deltas: list[str], expected: str) -> None:
    think = ThinkFilter()
    out = "".join(think.feed(d) for d in deltas) + think.finish()
    assert out == think.text == expected


# --- failures ---------------------------------------------------------------------


async def test_http_500_is_retryable_and_not_retried_by_litellm(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_error(500, "upstream exploded")

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is True
    assert caught.value.user_message == "The model server did not answer (HTTP 500)."
    await no_more_requests(server, 1)
    server.assert_script_consumed()


async def test_http_429_is_retryable_and_not_retried_by_litellm(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_error(429, "slow down")

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is True
    assert "429" in caught.value.user_message
    await no_more_requests(server, 1)


async def test_cut_stream_is_retryable(server: ModelServer, make_gateway: MakeGateway) -> None:
    server.reply_cut("This answer will never finish", chunk_size=4)
    sink = Sink()

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    assert caught.value.retryable is True
    assert "broke off" in caught.value.user_message
    await no_more_requests(server, 1)


async def test_stream_ending_cleanly_without_finish_reason_is_retryable(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    """A clean end of the HTTP body is not enough: no finish_reason means no answer."""
    server.reply_cut("half an answer", abort=False)

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is True
    await no_more_requests(server, 1)


async def test_timeout_is_retryable(server: ModelServer, make_gateway: MakeGateway) -> None:
    server.reply_hang(10)

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base, timeout_s=0.5).complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is True
    assert "did not answer" in caught.value.user_message


async def test_connection_refused_is_retryable(make_gateway: MakeGateway) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(ModelError) as caught:
        await make_gateway(f"http://127.0.0.1:{port}/v1").complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is True
    assert caught.value.user_message == (
        "The model server could not be reached: check models.profiles.main.api_base."
    )


async def test_http_401_is_not_retryable_and_never_shows_the_key(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_error(401, f"Incorrect API key provided: {API_KEY}")

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    error = caught.value
    assert error.retryable is False
    assert error.user_message == "The model rejected the API key: check models.profiles.main.auth."
    assert API_KEY not in str(error)
    assert API_KEY not in error.user_message
    assert API_KEY not in repr(make_gateway(server.api_base))
    await no_more_requests(server, 1)


@pytest.mark.parametrize(("status", "needle"), [(404, "does not know model"), (400, "rejected")])
async def test_client_errors_are_not_retryable(
    server: ModelServer, status: int, needle: str, make_gateway: MakeGateway
) -> None:
    server.reply_error(status, "nope")

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert caught.value.retryable is False
    assert needle in caught.value.user_message
    assert "models.profiles.main" in caught.value.user_message


async def test_on_text_failure_is_not_a_model_error(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_text("Hello there", chunk_size=2)

    class SlackDown(Exception):
        pass

    async def failing_sink(text: str) -> None:
        raise SlackDown()

    with pytest.raises(SlackDown):
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), failing_sink)


async def test_exhausted_script_fails_loudly(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    with pytest.raises(ModelError):
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    with pytest.raises(AssertionError, match="script ran out"):
        server.assert_script_consumed()


# --- ping ---------------------------------------------------------------------------


async def test_ping_sends_one_non_streamed_token(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_text("OK")

    await make_gateway(server.api_base).ping()

    (body,) = await server.wait_for_requests(1)
    assert body["max_tokens"] == 1
    assert not body.get("stream")
    server.assert_script_consumed()


async def test_ping_reports_a_bad_key(server: ModelServer, make_gateway: MakeGateway) -> None:
    server.reply_error(401, "bad key")

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).ping()

    assert caught.value.retryable is False
    assert "API key" in caught.value.user_message


async def test_default_step_answers_when_the_queue_is_empty(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_default(TextStep("OK"))
    gateway = make_gateway(server.api_base)

    await gateway.ping()
    await gateway.ping()

    assert len(server.requests) == 2
    server.assert_script_consumed()


async def test_reply_with_decides_from_the_request(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    def decide(body: dict[str, Any]) -> TextStep:
        return TextStep(f"{len(body.get('tools', []))} tools offered")

    server.reply_with(decide)
    server.reply_with(decide)
    gateway = make_gateway(server.api_base)

    first = await gateway.complete(ModelRequest(MESSAGES, TOOLS), Sink())
    second = await gateway.complete(ModelRequest(MESSAGES), Sink())

    assert (first.text, second.text) == ("2 tools offered", "0 tools offered")
    server.assert_script_consumed()


# --- the same failure, the same sentence, whichever client ------------------------------

MAIN = "models.profiles.main"
FAILURES = [
    ((500, "upstream exploded", None), "The model server did not answer (HTTP 500).", True),
    ((503, "overloaded", None), "The model server did not answer (HTTP 503).", True),
    ((429, "slow down", None), "The model server is rate limiting requests (HTTP 429).", True),
    ((401, "bad key", None), f"The model rejected the API key: check {MAIN}.auth.", False),
    (
        (403, "not for you", None),
        f"The model server refused access (HTTP 403): check {MAIN}.auth.",
        False,
    ),
    (
        (404, "no such model", None),
        "The model server does not know model 'openai/test-model' (HTTP 404): "
        f"check {MAIN}.model and api_base.",
        False,
    ),
    (
        (400, "bad field", None),
        f"The model server rejected the request (HTTP 400): check {MAIN}.model and its options.",
        False,
    ),
    (
        (422, "unprocessable", None),
        f"The model server rejected the request (HTTP 422): check {MAIN}.model and its options.",
        False,
    ),
    (
        (
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens.",
            "context_length_exceeded",
        ),
        "The conversation no longer fits the model's context window: start a new thread.",
        False,
    ),
]


@pytest.mark.parametrize(("error", "sentence", "retryable"), FAILURES, ids=lambda v: str(v)[:24])
async def test_an_http_failure_reads_the_same_on_every_client(
    server: ModelServer,
    make_gateway: MakeGateway,
    error: tuple[int, str, str | None],
    sentence: str,
    retryable: bool,
) -> None:
    status, message, code = error
    server.reply_error(status, message, code=code)

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), Sink())

    assert (caught.value.user_message, caught.value.retryable) == (sentence, retryable)
    assert caught.value.sent is True  # the server answered: the request counts
    await no_more_requests(server, 1)


async def test_transport_failures_say_whether_the_request_was_sent(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server.reply_hang(10)
    server.reply_cut("half", abort=True)
    server.reply_cut("half", abort=False)
    seen = []
    for api_base, timeout_s in [
        (f"http://127.0.0.1:{port}/v1", 5.0),
        (server.api_base, 0.5),
        (server.api_base, 5.0),
        (server.api_base, 5.0),
    ]:
        with pytest.raises(ModelError) as caught:
            gateway = make_gateway(api_base, timeout_s=timeout_s)
            await gateway.complete(ModelRequest(MESSAGES), Sink())
        seen.append((caught.value.user_message, caught.value.retryable, caught.value.sent))

    broke_off = ("The model's answer broke off before it finished.", True, True)
    assert seen == [
        (f"The model server could not be reached: check {MAIN}.api_base.", True, False),
        ("The model server did not answer within 0.5 s.", True, True),
        broke_off,
        broke_off,
    ]


async def test_an_error_event_after_the_200_is_a_broken_answer(
    server: ModelServer, make_gateway: MakeGateway
) -> None:
    server.reply_cut("Half an", abort=False, error=f"The server had an error ({API_KEY})")
    sink = Sink()

    with pytest.raises(ModelError) as caught:
        await make_gateway(server.api_base).complete(ModelRequest(MESSAGES), sink)

    error = caught.value
    assert (error.user_message, error.retryable, error.sent) == (
        "The model's answer broke off before it finished.",
        True,
        True,
    )
    assert API_KEY not in str(error)
    assert sink.text == "Half an"  # what came before the error was already shown
    await no_more_requests(server, 1)
