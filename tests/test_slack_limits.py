"""Nothing is ever too long for Slack: 30,000+ character answers of mixed Markdown arrive
whole on every path (native stream, chat.update fallback, posted answer), split below
Slack's limits at paragraph and code-block boundaries, with code blocks and tables intact;
a part Slack refuses is retried smaller; a huge answer goes up as a file. The fake Slack
refuses oversized messages with Slack's own error codes."""

from __future__ import annotations

import re
from typing import Any

from bot.slack.markdown import open_fence, to_mrkdwn
from bot.slack.safe_text import escape_mrkdwn, quoted
from tests.peers.slack_server import Message
from tests.test_approvals import card_text, click, has_buttons, wait_card, wait_said
from tests.world import ALICE, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World

NATIVE = {"slack": {"streaming": "native"}}
TURN_S = 60


def table(rows: int, tag: int) -> str:
    lines = ["| pod | status | restarts |", "|---|---|---:|"]
    lines += [f"| api-{tag}-{i} | Running | {i} |" for i in range(rows)]
    return "\n".join(lines)


def code(lines: int, tag: int) -> str:
    body = "\n".join(f"{tag:02d}:{i:04d} INFO GET /healthz 200 in 3ms" for i in range(lines))
    return f"```\n{body}\n```"


def mixed_answer(target: int, *, code_lines: int = 40) -> str:
    """Headings, paragraphs, lists, code blocks and tables, about `target` characters."""
    parts: list[str] = []
    tag = 0
    while sum(len(p) + 2 for p in parts) < target:
        parts.append(f"## Finding {tag}")
        parts.append(f"The **checkout-api** pod {tag} restarts because its heap is too small. " * 6)
        parts.append("\n".join(f"- step {tag}.{i}: check `kubectl get pods`" for i in range(5)))
        parts.append(code(code_lines, tag))
        parts.append(table(12, tag))
        tag += 1
    return "\n\n".join(parts)


def bot_messages(world: World, thread_ts: str) -> list[Message]:
    return [m for m in world.slack.thread(SHOP_CHANNEL, thread_ts) if m.is_bot]


def without_seams(text: str) -> str:
    """The text with the fence pairs that close and reopen a code block across messages."""
    return re.sub(r"\n```\n\n```\n", "\n", text)


def assert_tables_whole(shown: list[str], answer: str, *, as_code: bool) -> None:
    """Every table row's block shows in one message, header included."""
    for tag in range(answer.count("| pod |")):
        first, last = f"api-{tag}-0 ", f"api-{tag}-11 "
        holders = [text for text in shown if first in text]
        assert len(holders) == 1, f"table {tag} is split"
        assert last in holders[0]
        if as_code:
            assert "pod " in holders[0]


async def test_a_30000_character_streamed_answer_arrives_whole(world: World):
    answer = mixed_answer(32_000)
    assert len(answer) > 30_000
    world.model.reply_text(answer, chunk_size=300)
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "explain everything")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    streams = bot_messages(world, mention["ts"])
    assert len(streams) >= 3 and all(m.kind == "stream" for m in streams)
    assert all(not m.streaming for m in streams)
    # Slack refused nothing, every message is within its ~12,000 characters, every code
    # block in a message is closed, and the messages read as the answer, in order.
    assert not [c.error for c in world.slack.calls if not c.ok]
    assert all(len(m.text) <= 12_000 for m in streams)
    assert all(open_fence(m.text) is None for m in streams)
    assert without_seams("\n\n".join(m.text for m in streams)) == answer
    assert_tables_whole([m.text for m in streams], answer, as_code=False)


async def test_a_code_block_longer_than_a_message_is_closed_and_reopened(world: World):
    answer = "The logs:\n\n" + code(600, 1) + "\n\nThat is all."
    assert len(answer) > 20_000
    world.model.reply_text(answer, chunk_size=500)
    await world.start_bot(NATIVE)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "logs?")
    await world.slack.wait_for_call("chat.stopStream", timeout=TURN_S)
    await world.drain()

    streams = bot_messages(world, mention["ts"])
    assert len(streams) >= 3
    assert all(len(m.text) <= 12_000 and open_fence(m.text) is None for m in streams)
    assert all(m.text.startswith("```") for m in streams[1:])
    assert without_seams("\n\n".join(m.text for m in streams)) == answer


async def test_a_30000_character_answer_in_update_mode_arrives_in_parts(world: World):
    answer = mixed_answer(32_000)
    world.model.reply_text(answer, chunk_size=300)
    await world.start_bot()  # streaming: update
    mention = await world.mention(SHOP_CHANNEL, ALICE, "explain everything")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 4)
    await world.drain()

    answers = bot_messages(world, mention["ts"])[1:]
    assert len(answers) >= 3
    assert not [c.error for c in world.slack.calls if not c.ok]
    sections = [b["text"]["text"] for m in answers for b in m.blocks if b["type"] == "section"]
    assert all(len(s) <= 3_000 for s in sections)
    assert all(len(m.blocks) <= 50 for m in answers)
    # (The last one ends with the answer's buttons, which hold no section text.)
    assert all(
        sum(len(b["text"]["text"]) for b in m.blocks if b["type"] == "section") <= 12_000
        for m in answers
    )
    assert all(open_fence(s) is None for s in sections)
    assert "\n\n".join(sections) == to_mrkdwn(answer)
    assert_tables_whole(sections, answer, as_code=True)


async def test_a_part_slack_refuses_is_posted_again_in_smaller_parts(world: World):
    answer = mixed_answer(20_000)
    world.model.reply_text(answer, chunk_size=500)
    # This workspace refuses messages with more than 5,000 characters of block text.
    world.slack.max_blocks_text = 5_000
    await world.start_bot({"slack": {"streaming": "update", "status_reactions": False}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "explain everything")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()

    refused = [c for c in world.slack.calls_to("chat.postMessage") if not c.ok]
    assert refused and all(c.error == "msg_blocks_too_long" for c in refused)
    answers = bot_messages(world, mention["ts"])
    shown = "\n\n".join(
        b["text"]["text"] for m in answers for b in m.blocks if b["type"] == "section"
    )
    # Nothing lost: every paragraph, row and code line of the answer is in the thread.
    for paragraph in to_mrkdwn(answer).split("\n\n"):
        for line in paragraph.split("\n"):
            assert line in shown


async def test_a_huge_answer_goes_up_as_a_file_with_a_short_summary(world: World):
    answer = mixed_answer(60_000)
    world.model.reply_text(answer, chunk_size=1000)
    await world.start_bot()  # streaming: update
    mention = await world.mention(SHOP_CHANNEL, ALICE, "explain everything, in full")
    await world.slack.wait_for_call("files.completeUploadExternal", timeout=TURN_S)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 3)
    await world.drain()

    files = list(world.slack.files.values())
    assert [f.filename for f in files] == ["answer.md"]
    assert files[0].text == answer and files[0].thread_ts == mention["ts"]
    messages = [m for m in bot_messages(world, mention["ts"]) if m.kind == "message"]
    summary = messages[-1]
    assert len(summary.text) < 2_000
    assert "*Finding 0*" in summary.text and "in the file" in summary.text


# --------------------------------------------------------------------------- approval cards


def scale_with_reason(world: World, reason: str) -> None:
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": reason}
    # Large deltas: LiteLLM's per-chunk cost would otherwise dominate the test's time.
    world.model.reply_tool_calls([("scale_deployment", args)], chunk_size=500)


def received(world: World, thread_ts: str) -> str:
    """Everything the thread shows a person: block texts of kelpie's messages, and files."""
    texts = [
        str(block.get("text", {}).get("text", ""))
        for message in world.slack.thread(OPS_CHANNEL, thread_ts)
        if message.is_bot
        for block in message.blocks or []
    ]
    return "\n".join(texts + [f.text for f in world.slack.files.values()])


def assert_all_shown(reason: str, shown: str) -> None:
    """Every line of the reason shows (quoted: escaped, whole), in order."""
    at = 0
    for line in reason.splitlines():
        if line.strip():
            found = shown.find(quoted(line.strip()).removeprefix("```\n").removesuffix("\n```"), at)
            assert found >= 0, f"not shown: {line[:80]!r}"
            at = found


async def test_a_card_with_a_30000_character_reason_shows_all_of_it(world: World):
    reason = mixed_answer(32_000) + "\n\n<!channel> <@U0BOB> & co"
    assert len(reason) > 30_000
    scale_with_reason(world, reason)
    # The decision's turn finds the 32,000-character call over the low tier's history
    # budget: the low tier summarizes it first (tests/test_long_threads.py).
    world.model.reply_text("Earlier: a scale of checkout-api to 5 was proposed.")
    world.model.reply_text("Scaled.")
    await world.start_bot()
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    card = await wait_card(world, mention["ts"], timeout=TURN_S)
    await world.drain()

    # Slack refused nothing; the full text is in the thread above the card, which shows
    # its opening and says where the rest is; nothing of it is live markup.
    assert not [c.error for c in world.slack.calls if not c.ok]
    thread = [m.ts for m in world.slack.thread(OPS_CHANNEL, mention["ts"]) if m.is_bot]
    details = [
        m for m in world.slack.thread(OPS_CHANNEL, mention["ts"]) if "full preview" in m.text
    ]
    assert details and details[0].ts < card.ts and len(thread) >= 5
    assert "in the thread just above" in card_text(card) and has_buttons(card)
    shown = received(world, mention["ts"])
    assert_all_shown(reason, shown)
    assert "<!channel>" not in shown and "<@U0BOB>" not in shown

    # The decided card (same layout, updated) is accepted too.
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    final = world.slack.get_message(OPS_CHANNEL, card.ts)
    assert "Approved by" in card_text(final) and not has_buttons(final)
    assert not [c.error for c in world.slack.calls if not c.ok and c.method.startswith("chat.")]


async def test_a_reason_longer_than_a_section_is_split_on_the_card_not_cut(world: World):
    reason = mixed_answer(6_000)
    scale_with_reason(world, reason)
    await world.start_bot()
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    card = await wait_card(world, mention["ts"], timeout=TURN_S)
    await world.drain()
    assert not [c.error for c in world.slack.calls if not c.ok]
    assert "just above" not in card_text(card)
    assert_all_shown(reason, card_text(card))


# --------------------------------------------------------------------------- command replies


def squeezed(text: str) -> str:
    """Text without whitespace or fences: what survives splitting at lines and re-fencing."""
    return re.sub(r"\s+", "", text.replace("```", ""))


async def test_a_long_command_reply_arrives_whole_in_pieces_only_the_asker_sees(world: World):
    world.model.reply_text("Read it.")
    world.model.reply_text("Read that too.")
    approver = {"roles": {"viewer": {"approval": {"approvers": {"users": [CAROL]}}}}}
    bot = await world.start_bot(approver)
    mention = await world.mention(SHOP_CHANNEL, ALICE, mixed_answer(36_000))
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    follow_up = world.slack.message(
        SHOP_CHANNEL, ALICE, mixed_answer(40_000, code_lines=30), thread_ts=mention["ts"]
    )
    await world.slack.deliver_event(follow_up)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    session = await bot.core.sessions.find(f"T0TEST:{SHOP_CHANNEL}:{mention['ts']}")
    assert session is not None
    payload = await bot.core.payloads.last_for_session(session.id)
    assert payload is not None and len(payload) > 60_000

    command = world.slack.slash_command("/kelpie", "payload", CAROL, SHOP_CHANNEL)
    await world.slack.deliver("slash_commands", command)
    wanted = squeezed(escape_mrkdwn(payload))

    def whole(server: Any) -> list[Any] | None:
        pieces = server.ephemerals(SHOP_CHANNEL, CAROL)
        return pieces if wanted in squeezed("".join(p.text for p in pieces)) else None

    pieces = await world.slack.wait_for(whole, timeout=TURN_S)
    await world.drain()
    assert len(pieces) > 5 and all(len(p.text) <= 12_000 for p in pieces)
    assert [p.source for p in pieces[:5]] == ["response_url"] * 5  # its five uses
    assert {p.source for p in pieces[5:]} == {"api"}  # the rest: chat.postEphemeral
    assert all(open_fence(p.text) is None for p in pieces)  # each piece renders alone
    assert "secrets masked" in pieces[0].text
    assert not [r.status for r in world.slack.response_posts if r.status != 200]
    assert not [c.error for c in world.slack.calls if not c.ok]
    assert not world.slack.ephemerals(SHOP_CHANNEL, ALICE)


async def test_a_reply_the_response_url_refuses_comes_as_an_ephemeral_message(world: World):
    await world.start_bot()
    command = world.slack.slash_command("/kelpie", "help", ALICE, SHOP_CHANNEL)
    command["response_url"] = command["response_url"].rsplit("/", 1)[0] + "/expired"
    await world.slack.deliver("slash_commands", command)
    shown = await world.slack.wait_for(lambda s: s.ephemerals(SHOP_CHANNEL, ALICE))
    assert [r.status for r in world.slack.response_posts] == [404]
    assert shown[0].source == "api" and "answers questions about your Kubernetes" in shown[0].text
