"""Live progress in the thread, end to end against the peers: native streaming, the
chat.update fallback, auto's fallback memory, the Stop button, interrupts, stream expiry,
Slack's own stop, 429s, long answers and file uploads."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import ToolFinished, ToolStarted, TurnFinish, TurnFinished, TurnStats
from bot.agent.session import IncomingMessage
from bot.config import SlackConfig, StreamingMode
from bot.slack.markdown import SECTION_LIMIT, to_mrkdwn
from bot.slack.progress import STOP_ACTION_ID, SlackReporters
from bot.values import Role, SessionInfo, ToolStatus, ts_after
from tests.peers.model_server import HangStep, TextStep
from tests.peers.slack_server import Message, RecordedCall, SlackServer
from tests.world import (
    ALICE,
    BOB,
    SHOP_CHANNEL,
    World,
)

NATIVE = {"slack": {"streaming": "native"}}
# A ceiling for a turn to get somewhere (the first one imports LiteLLM), not a speed check.
TURN_S = 30
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


# --------------------------------------------------------------------------- helpers


def key(channel: str, thread_ts: str) -> str:
    return f"T0TEST:{channel}:{thread_ts}"


def stream_calls(world: World, channel: str) -> list[RecordedCall]:
    """startStream/appendStream/stopStream calls for `channel` that Slack accepted."""
    return [
        c
        for c in world.slack.calls
        if c.method in STREAM_METHODS and c.params.get("channel") == channel and c.ok
    ]


def chunks_of(calls: list[RecordedCall]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    for call in calls:
        if call.params.get("markdown_text"):
            chunks.append({"type": "markdown_text", "text": call.params["markdown_text"]})
        chunks += call.params.get("chunks") or []
    return chunks


def streamed_text(calls: list[RecordedCall]) -> str:
    return "".join(c["text"] for c in chunks_of(calls) if c["type"] == "markdown_text")


def task_statuses(calls: list[RecordedCall]) -> dict[str, list[str]]:
    """Each task's statuses in the order Slack received them (first-seen task order)."""
    statuses: dict[str, list[str]] = {}
    for chunk in chunks_of(calls):
        if chunk["type"] == "task_update":
            statuses.setdefault(chunk["title"], []).append(chunk["status"])
    return statuses


def bot_messages(world: World, channel: str, thread_ts: str) -> list[Message]:
    return [m for m in world.slack.thread(channel, thread_ts) if m.is_bot]


def has_stop_button(message: Message) -> bool:
    return any(
        element.get("action_id") == STOP_ACTION_ID
        for block in message.blocks
        for element in block.get("elements") or []
    )


def footer_of(message: Message) -> str:
    contexts = [b for b in message.blocks if b.get("type") == "context"]
    return contexts[-1]["elements"][0]["text"] if contexts else ""


async def stop_button(world: World, channel: str, thread_ts: str, after: str = "") -> Message:
    """A bot message of the thread with a Stop button; posted after `after` (the message
    whose turn it must stop), not an earlier turn's still closing."""

    def find(server: SlackServer) -> Message | None:
        return next(
            (
                m
                for m in bot_messages(world, channel, thread_ts)
                if has_stop_button(m) and (not after or ts_after(m.ts, after))
            ),
            None,
        )

    found: Message = await world.slack.wait_for(find, timeout=TURN_S)
    return found


async def click_stop(world: World, user: str, channel: str, thread_ts: str) -> None:
    button = await stop_button(world, channel, thread_ts)
    payload = world.slack.block_action(
        user, channel, button.ts, STOP_ACTION_ID, key(channel, thread_ts)
    )
    envelope = await world.slack.deliver("interactive", payload)
    await world.slack.wait_ack(envelope)


async def appended_in_progress(world: World, channel: str) -> RecordedCall:
    def in_progress(call: RecordedCall) -> bool:
        return call.params.get("channel") == channel and any(
            c.get("status") == "in_progress" for c in call.params.get("chunks") or []
        )

    return await world.slack.wait_for_call("chat.appendStream", in_progress, timeout=TURN_S)


# --------------------------------------------------------------------------- native


async def test_native_stream_shows_tasks_in_order_then_the_answer_and_a_footer(world: World):
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    # The tool runs until its progress was appended (a quick turn ends in one write).
    pods_listed = world.kube.hold(r"/namespaces/shop/pods$")
    world.model.reply_tool_calls([("list_deployments", {"namespace": "shop"})])
    answer = "**checkout-api** has one pod in `CrashLoopBackOff`:\n\n- OOMKilled\n- 7 restarts"
    world.model.reply_text(answer)
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "why is checkout-api crashlooping?")
    await world.slack.wait_for_call("chat.appendStream", timeout=TURN_S)
    pods_listed.set()
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    calls = stream_calls(world, SHOP_CHANNEL)
    assert calls[0].method == "chat.startStream"
    assert calls[-1].method == "chat.stopStream"
    assert "chat.appendStream" in [c.method for c in calls]
    start = calls[0].params
    assert start["thread_ts"] == mention["ts"]
    assert (start["recipient_user_id"], start["recipient_team_id"]) == (ALICE, "T0TEST")
    assert any(c.get("type") == "plan_update" for c in start["chunks"])
    # One task per tool call, in the order they ran, each in_progress → complete.
    statuses = task_statuses(calls)
    assert list(statuses) == ["list_pods", "list_deployments"]
    assert all(s[0] == "in_progress" and s[-1] == "complete" for s in statuses.values())
    # The markdown chunks are the answer, exactly, as the model wrote it.
    assert streamed_text(calls) == answer

    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert len(replies) == 1  # the Stop message is gone once the turn is over
    stream = replies[0]
    assert stream.kind == "stream" and not stream.streaming
    assert stream.text == answer
    tasks = list(stream.tasks.values())
    assert tasks[0]["details"] == "ns=shop" and "pods" in tasks[0]["output"]
    assert not has_stop_button(stream)
    footer = calls[-1].params["blocks"][0]["elements"][0]["text"]
    assert footer == footer_of(stream)
    assert "test-model" in footer and "3 rounds" in footer and "2 tool calls" in footer
    assert " in / " in footer and footer.endswith(" s")
    # Under the footer, the answer's buttons (Record; tests/test_record.py), then Slack's
    # feedback buttons (tests/test_feedback.py).
    assert [b["type"] for b in stream.blocks] == ["context", "actions", "context_actions"]
    [record] = stream.blocks[1]["elements"]
    assert record["text"]["text"] == "Record"
    assert world.slack.reactions(SHOP_CHANNEL, mention["ts"]) == ["white_check_mark"]
    assert world.slack.calls_to("chat.update") == []


async def test_the_model_is_asked_while_slack_holds_the_threads_first_post(world: World):
    # Slack takes about one post a second per channel, so in a busy channel a turn's first
    # post may wait seconds. The turn does not wait for it: both rounds run meanwhile, and
    # what they did shows, in order, once the stream is open.
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    answer = "All three `checkout-api` pods are **Running**."
    world.model.reply_text(answer)
    await world.start_bot(NATIVE)
    first_post = world.slack.hold("chat.startStream")
    mention = await world.mention(SHOP_CHANNEL, ALICE, "are the checkout pods fine?")
    await world.model.wait_for_requests(2, timeout=TURN_S)
    start = await world.slack.wait_for_call("chat.startStream", timeout=TURN_S)
    assert start.response == {}  # not answered yet: Slack still holds the first post
    first_post.set()
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    calls = stream_calls(world, SHOP_CHANNEL)
    assert [calls[0].method, calls[-1].method] == ["chat.startStream", "chat.stopStream"]
    statuses = task_statuses(calls)
    assert list(statuses) == ["list_pods"]
    assert statuses["list_pods"][0] == "in_progress" and statuses["list_pods"][-1] == "complete"
    assert streamed_text(calls) == answer
    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert [(m.kind, m.streaming, m.text) for m in replies] == [("stream", False, answer)]


async def test_a_long_streamed_answer_takes_a_bounded_number_of_appends(world: World):
    paragraph = "The checkout-api pod restarts because the JVM heap is too small. " * 8
    answer = "\n\n".join(f"{i}. {paragraph}" for i in range(16))[:8000]
    world.model.reply_text(answer, chunk_size=4)  # about 2,000 tokens, 2,000 deltas
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "explain in detail")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    calls = stream_calls(world, SHOP_CHANNEL)
    appends = [c for c in calls if c.method == "chat.appendStream"]
    assert len(appends) < 40  # far fewer than the 2,000 deltas
    assert streamed_text(calls) == answer
    assert all(len(streamed_text([c])) <= 12_000 for c in calls)
    assert bot_messages(world, SHOP_CHANNEL, mention["ts"])[0].text == answer


async def test_denied_and_failed_calls_show_as_errors_in_the_stream(world: World):
    world.kube.forbid("GET", r"/namespaces/shop/pods$")
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_tool_calls([("restart_deployment", {"name": "checkout-api"})])
    world.model.reply_text("I cannot read or change that here.")
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "fix checkout-api")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    stream = bot_messages(world, SHOP_CHANNEL, mention["ts"])[0]
    tasks = {t["title"]: t for t in stream.tasks.values()}
    assert tasks["list_pods"]["status"] == "error" and "403" in tasks["list_pods"]["output"]
    assert tasks["restart_deployment"]["status"] == "error"
    assert "denied" in tasks["restart_deployment"]["output"]


async def test_a_model_failure_ends_the_stream_with_one_clear_sentence(world: World):
    for _ in range(3):
        world.model.reply_error(500)
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "status?")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()
    stream = bot_messages(world, SHOP_CHANNEL, mention["ts"])[0]
    assert stream.text.startswith(":warning: ") and "500" in stream.text
    assert "\n" not in stream.text
    assert "context_actions" not in str(stream.blocks)  # an error is not an answer to rate
    assert world.slack.reactions(SHOP_CHANNEL, mention["ts"]) == ["x"]


async def test_text_a_failed_append_may_have_lost_is_posted_as_a_message(world: World):
    world.slack.fail("chat.appendStream", "internal_error", times=1)
    # A slow tool after some text: the text goes out in an append while the tool runs
    # (a short answer alone would go out with the stream's final write).
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})], text="Looking.")
    world.kube.delay(r"/namespaces/shop/pods$", 1.5)
    world.model.reply_text("Part of this may not have been streamed.")
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "status?")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()
    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert [m.kind for m in replies] == ["stream", "message"]
    assert replies[1].text == "Part of this may not have been streamed."


# --------------------------------------------------------------------------- update mode


async def test_update_mode_edits_at_most_once_a_second_and_posts_the_answer_apart(world: World):
    # Slow tools, so the timeline changes over several seconds and gets several edits.
    world.kube.delay(r"/namespaces/shop/(pods|events)$", 1.5)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_tool_calls([("list_events", {"namespace": "shop"})])
    paragraphs = [f"## Finding {i}\n\n" + ("Pods restart after OOM kills. " * 60) for i in range(6)]
    answer = "\n\n".join(paragraphs)
    assert len(answer) > 10_000
    world.model.reply_text(answer, chunk_size=40)
    await world.start_bot()  # the world's default: streaming: update
    mention = await world.mention(SHOP_CHANNEL, ALICE, "what is wrong in shop?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()

    assert world.slack.calls_to("chat.startStream") == []
    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    progress, answers = replies[0], replies[1:]
    first_post = world.slack.calls_to("chat.postMessage")[0]
    assert STOP_ACTION_ID in str(first_post.params["blocks"])
    assert "`list_pods` ns=shop ✓" in progress.text and "`list_events` ns=shop ✓" in progress.text
    assert not has_stop_button(progress)
    assert "3 rounds" in footer_of(progress) and "2 tool calls" in footer_of(progress)
    # Every edit of the thread came at least a second after the previous one.
    edits = [c for c in world.slack.calls_to("chat.update") if c.params["ts"] == progress.ts]
    assert len(edits) >= 3
    gaps = [b.time - a.time for a, b in itertools.pairwise(edits)]
    assert all(gap >= 1.0 for gap in gaps), gaps
    # The answer: its own messages, sections within Slack's limits, nothing lost.
    assert len(answers) >= 1
    # The last one ends with the answer's buttons, then Slack's feedback buttons.
    assert [b["type"] for b in answers[-1].blocks[-2:]] == ["actions", "context_actions"]
    buttons = ("actions", "context_actions")
    sections = [b for m in answers for b in m.blocks if b["type"] not in buttons]
    assert len(sections) >= 4 and all(b["type"] == "section" for b in sections)
    assert all(len(b["text"]["text"]) <= SECTION_LIMIT for b in sections)
    assert all(len(m.blocks) <= 50 for m in answers)
    shown = "\n\n".join(b["text"]["text"] for b in sections)
    assert shown == to_mrkdwn(answer.strip())
    assert "*Finding 5*" in shown


async def test_auto_falls_back_to_updates_and_remembers_the_workspace(world: World):
    world.slack.fail("chat.startStream", "unknown_method")
    world.model.reply_text("First answer.")
    world.model.reply_text("Second answer.")
    await world.start_bot({"slack": {"streaming": "auto", "status_reactions": False}})
    first = await world.mention(SHOP_CHANNEL, ALICE, "one?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, first["ts"], 2)
    await world.drain()
    assert replies[-1].text == "First answer."
    assert len(world.slack.calls_to("chat.startStream")) == 1

    second = await world.mention(SHOP_CHANNEL, BOB, "two?")
    replies = await world.wait_bot_replies(SHOP_CHANNEL, second["ts"], 2)
    await world.drain()
    assert replies[-1].text == "Second answer."
    assert len(world.slack.calls_to("chat.startStream")) == 1  # straight to update mode
    assert world.slack.calls_to("reactions.add") == []  # status_reactions: false


# --------------------------------------------------------------------------- stop


async def test_stop_in_update_mode_by_the_asker(world: World):
    world.model.reply_hang(20)
    await world.start_bot()
    mention = await world.mention(SHOP_CHANNEL, ALICE, "slow question")
    await world.model.wait_for_requests(1)
    await click_stop(world, ALICE, SHOP_CHANNEL, mention["ts"])
    await world.drain()
    progress = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert len(progress) == 1  # no answer
    assert progress[0].text.startswith(f"*Stopped by <@{ALICE}>.*")
    assert not has_stop_button(progress[0])


async def test_slack_stop_control_on_the_stream_stops_the_turn(world: World):
    world.kube.delay(r"/namespaces/shop/pods$", 2)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.enqueue(HangStep(20, then=TextStep("too late")))
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "pods?")
    append = await appended_in_progress(world, SHOP_CHANNEL)
    world.slack.stop_stream_by_user(append.params["ts"])
    await world.slack.wait_for_call("chat.update", timeout=TURN_S)
    await world.drain()

    stream = bot_messages(world, SHOP_CHANNEL, mention["ts"])[0]
    assert stream.text.endswith(f"Stopped by <@{ALICE}>._")
    assert "too late" not in stream.text
    assert world.slack.calls_to("chat.stopStream") == []


# --------------------------------------------------------------------------- interrupt, expiry


async def interrupt_a_running_turn(world: World) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A turn whose tool is slow, then a follow-up in its thread while the tool runs."""
    world.kube.delay(r"/namespaces/shop/pods$", 10)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})], text="Let me look.")
    world.model.reply_text("Answer to the second message.")
    bot = await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "pods?")
    await appended_in_progress(world, SHOP_CHANNEL)
    follow_up = world.slack.message(
        SHOP_CHANNEL, ALICE, "actually, never mind", thread_ts=mention["ts"]
    )
    await world.slack.deliver_event(follow_up)
    await world.slack.wait_for(lambda s: len(s.calls_to("chat.startStream")) >= 2, timeout=TURN_S)
    await world.drain()
    return bot, mention, follow_up


async def test_a_new_message_interrupts_the_running_turn_which_ends_cleanly(world: World):
    bot, mention, _ = await interrupt_a_running_turn(world)

    first = bot_messages(world, SHOP_CHANNEL, mention["ts"])[0]
    assert first.kind == "stream" and not first.streaming
    assert first.text == "Let me look.\n\n_Interrupted by a newer message in this thread._"
    assert next(iter(first.tasks.values()))["status"] == "error"
    assert not has_stop_button(first)
    assert world.slack.reactions(SHOP_CHANNEL, mention["ts"]) == ["x"]
    # The model was never asked to go on with the interrupted turn.
    assert all("never mind" in str(r["messages"]) for r in world.model.requests[1:])
    session = await bot.sessions.find(key(SHOP_CHANNEL, mention["ts"]))
    assert session is not None
    stored = await bot.messages.all_for_session(session.id)
    calls = [call.id for m in stored for call in m.tool_calls]
    results = [m.tool_call_id for m in stored if m.role is Role.TOOL]
    assert calls and sorted(calls) == sorted(results)
    answers = [m for m in stored if m.role is Role.ASSISTANT and not m.tool_calls]
    assert all(m.content == "Answer to the second message." for m in answers if m.complete)


async def test_after_an_interrupt_the_new_message_gets_its_answer(world: World):
    _, mention, follow_up = await interrupt_a_running_turn(world)

    streams = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert len(streams) == 2
    assert streams[1].text == "Answer to the second message."
    assert world.slack.reactions(SHOP_CHANNEL, follow_up["ts"]) == ["white_check_mark"]


async def test_an_expired_stream_is_finished_and_the_turn_goes_on_in_a_new_one(world: World):
    world.kube.delay(r"/namespaces/shop/pods$", 1.5)
    world.kube.delay(r"/namespaces/shop/events$", 2)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})], text="Checking pods. ")
    world.model.reply_tool_calls([("list_events", {"namespace": "shop"})])
    answer = "All pods are fine apart from **checkout-api**."
    world.model.reply_text(answer)
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "pods?")
    append = await appended_in_progress(world, SHOP_CHANNEL)
    # Slack ends the stream while list_pods runs; the next append finds it gone.
    world.slack.expire_stream(append.params["ts"])
    await world.slack.wait_for(lambda s: len(s.calls_to("chat.startStream")) == 2, timeout=TURN_S)
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    first, second = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert first.ts == append.params["ts"] and first.stream_state == "stopped"
    assert [c.params["ts"] for c in world.slack.calls_to("chat.update")] == [first.ts]
    assert "Checking pods." in first.text and "`list_pods` ns=shop" in first.text
    assert "continued below" in first.text
    assert second.kind == "stream" and not second.streaming
    assert second.text == answer
    # Nothing the model wrote was lost across the two messages.
    assert streamed_text(stream_calls(world, SHOP_CHANNEL)) == "Checking pods. " + answer
    assert [t["status"] for t in second.tasks.values()][-1] == "complete"
    assert "3 rounds" in footer_of(second)


# --------------------------------------------------------------------------- 429


@pytest.mark.parametrize(
    "streaming,method", [("native", "chat.appendStream"), ("update", "chat.update")]
)
async def test_a_429_is_retried_after_retry_after_and_the_turn_completes(
    world: World, streaming: str, method: str
):
    world.slack.rate_limit(method, retry_after=1)
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    # A slow tool: its progress goes out as an append or edit before the turn ends.
    world.kube.delay(r"/namespaces/shop/pods$", 1.5)
    world.model.reply_text("Done despite the rate limit.")
    await world.start_bot({"slack": {"streaming": streaming}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "pods?")
    await world.slack.wait_for(
        lambda s: any(c.status == 429 for c in s.calls_to(method)), timeout=TURN_S
    )
    await world.drain()

    attempts = world.slack.calls_to(method)
    limited = next(i for i, c in enumerate(attempts) if c.status == 429)
    retry = attempts[limited + 1]
    assert retry.params == attempts[limited].params and retry.ok
    assert retry.time - attempts[limited].time >= 1.0
    texts = [m.text for m in bot_messages(world, SHOP_CHANNEL, mention["ts"])]
    assert any(t.endswith("Done despite the rate limit.") for t in texts)


# --------------------------------------------------------------------------- DMs and files


async def test_a_dm_streams_and_uses_the_assistant_status_instead_of_reactions(world: World):
    world.model.reply_text("Private answer.")
    await world.start_bot(NATIVE)
    dm = world.slack.im_message(ALICE, "what runs in shop?")
    await world.slack.deliver_event(dm)
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()
    statuses = [c.params["status"] for c in world.slack.calls_to("assistant.threads.setStatus")]
    assert statuses[0] and statuses[-1] == ""
    assert world.slack.calls_to("reactions.add") == []
    assert bot_messages(world, dm["channel"], dm["ts"])[0].text == "Private answer."


async def test_show_me_the_logs_uploads_them_as_a_file_in_the_thread(world: World):
    pods = [p["metadata"]["name"] for p in world.kube.objects("Pod")]
    crashing = next(name for name in pods if name.endswith("-m4n8p"))  # seed_demo's
    args = {"namespace": "shop", "pod": crashing, "previous": True}
    world.model.reply_tool_calls([("show_logs", args, "call_logs")])
    world.model.reply_default(TextStep("The logs are in the file above."))
    bot = await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "show me the logs of the crashing pod")
    await world.slack.wait_for_call("files.completeUploadExternal", timeout=TURN_S)
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    files = list(world.slack.files.values())
    # Named after what was asked for, never after the model's tool-call id.
    assert [f.filename for f in files] == [f"show_logs-shop-{crashing}.log"]
    assert "java.lang.OutOfMemoryError" in files[0].text
    assert files[0].completed and files[0].thread_ts == mention["ts"]
    replies = bot_messages(world, SHOP_CHANNEL, mention["ts"])
    assert [m.kind for m in replies].count("file") == 1
    # The logs are in the file only, never pasted into a message.
    assert all("OutOfMemoryError" not in m.text for m in replies if m.kind != "file")
    # The stream ends with the turn's answer, streamed or not.
    session = await bot.sessions.find(key(SHOP_CHANNEL, mention["ts"]))
    assert session is not None
    stored = await bot.messages.all_for_session(session.id)
    answer = next(m.content for m in reversed(stored) if m.role is Role.ASSISTANT)
    stream = next(m for m in replies if m.kind == "stream")
    assert answer and stream.text == answer


class OpenMessages:
    """The messages a reporter holds open (the turn ledger's part, kept in a set)."""

    def __init__(self) -> None:
        self.open: set[str] = set()

    async def opened(self, ts: str) -> None:
        self.open.add(ts)

    async def closed(self, ts: str) -> None:
        self.open.discard(ts)


async def test_a_show_tool_attachment_is_uploaded_as_a_file_and_nothing_else_is():
    async with SlackServer() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        reporters = SlackReporters(client, SlackConfig(streaming=StreamingMode.UPDATE))
        slack.set_channel(SHOP_CHANNEL, "shop-oncall")
        asked = slack.post_user_message(SHOP_CHANNEL, ALICE, "show me the logs")
        session = SessionInfo(
            1,
            key(SHOP_CHANNEL, asked.ts),
            "T0TEST",
            SHOP_CHANNEL,
            asked.ts,
            False,
            "viewer",
            "prod",
            "shop",
            ALICE,
        )
        message = IncomingMessage(
            "T0TEST", SHOP_CHANNEL, "shop-oncall", False, asked.ts, asked.ts, ALICE, "logs"
        )
        messages = OpenMessages()
        reporter = await reporters.open(session, message.origin, messages)
        assert len(messages.open) == 1  # the progress message, closed by whoever takes over
        logs = "".join(f"line {i}: GET /healthz 200\n" for i in range(2000))
        await reporter.emit(ToolStarted("call_1", "show_logs", "pod=api-1"))
        await reporter.emit(ToolFinished("call_1", "show_logs", ToolStatus.OK, "2000 lines", logs))
        await reporter.emit(ToolStarted("call_2", "pod_logs", "pod=api-1"))
        await reporter.emit(ToolFinished("call_2", "pod_logs", ToolStatus.OK, "2000 lines", logs))
        stats = TurnStats(model="test-model", rounds=1, tool_calls=2)
        await reporter.close(TurnFinished(TurnFinish.STOP, "Posted the logs.", stats))
        assert not messages.open

        files = list(slack.files.values())
        assert len(files) == 1
        assert files[0].filename == "show_logs-api-1.log" and files[0].text == logs
        assert files[0].completed and files[0].thread_ts == asked.ts
        thread = [m for m in slack.thread(SHOP_CHANNEL, asked.ts) if m.is_bot]
        assert any(m.kind == "file" for m in thread)
        assert all(len(m.text) < 4000 for m in thread)  # never pasted
