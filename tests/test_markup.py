"""Markup injection: text from the model, the cluster or a person never becomes a ping, a
mention or a disguised link in Slack, and no post unfurls.

What Slack received (the peer's record of every Web API call) is the evidence."""

from __future__ import annotations

import json
from typing import Any

from bot.slack.markdown import STREAM_LINK_HOLD, StreamLinks, show_link_targets, to_mrkdwn
from bot.slack.safe_text import escape_markdown, escape_mrkdwn, plain_text
from tests.world import ALICE, OPS_CHANNEL, SHOP_CHANNEL, World

HOSTILE = "<!channel> ping <@U0BOB> and <!subteam^S0SRE> see <http://evil.example|looks-safe>"
LIVE = ("<!channel>", "<@U0BOB>", "<!subteam^S0SRE>", "|looks-safe>")


def live_markup(text: str) -> list[str]:
    """The pieces of hostile markup that reached Slack unescaped."""
    return [token for token in LIVE if token in text]


def mrkdwn_texts(value: Any) -> list[str]:
    """Every mrkdwn text in a message's arguments: `text`, `markdown_text` and mrkdwn objects
    in blocks (plain_text objects are shown literally, so they are left out)."""
    found: list[str] = []
    if isinstance(value, dict):
        if value.get("type") == "plain_text":
            return found
        for key, item in value.items():
            if key in ("text", "markdown_text") and isinstance(item, str):
                found.append(item)
            else:
                found += mrkdwn_texts(item)
    elif isinstance(value, list):
        for item in value:
            found += mrkdwn_texts(item)
    return found


def posted(world: World) -> str:
    calls = [c for c in world.slack.calls if c.method.startswith("chat.")]
    return "\n".join(text for call in calls for text in mrkdwn_texts(call.params))


def test_the_escape_function_and_plain_text():
    assert escape_mrkdwn("a & <b> &lt;") == "a &amp; &lt;b&gt; &amp;lt;"
    assert plain_text("<!here>")["text"] == "<!here>"
    assert plain_text("x" * 5000)["text"].endswith("…")


def test_model_markdown_keeps_formatting_but_cannot_ping_or_disguise():
    text = to_mrkdwn(f"**Summary** {HOSTILE} and [docs](https://k8s.io) ![x](javascript:alert)")
    assert live_markup(text) == []
    assert "*Summary*" in text and "docs (<https://k8s.io>)" in text
    assert "&lt;!channel&gt;" in text and "<javascript" not in text


async def test_a_hostile_answer_is_escaped_and_no_post_unfurls(world: World):
    world.model.reply_text(f"Here: {HOSTILE} and [safe](http://evil.example/phish)")
    await world.start_bot({"slack": {"streaming": "update"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "summarise")

    def answered(server: Any) -> str | None:
        texts = [m.text for m in server.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
        return next((text for text in texts if "Here:" in text), None)

    answer = await world.slack.wait_for(answered, timeout=60)
    await world.drain()
    assert "&lt;!channel&gt; ping &lt;@U0BOB&gt;" in answer
    assert "safe (<http://evil.example/phish>)" in answer
    assert live_markup(posted(world)) == []
    posts = world.slack.calls_to("chat.postMessage")
    assert posts and all(
        c.params.get("unfurl_links") is False and c.params.get("unfurl_media") is False
        for c in posts
    )


async def test_a_streamed_answer_and_progress_lines_are_escaped(world: World):
    world.model.reply_tool_calls([("describe_pod", {"namespace": "shop", "name": "<!here>"})])
    world.model.reply_text(HOSTILE)
    await world.start_bot({"slack": {"streaming": "native"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "look")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.drain()
    sent = posted(world)
    assert "&lt;!channel&gt;" in sent and "<!here>" not in sent
    assert live_markup(sent) == []


LYING_LINKS = (
    "Read [the runbook](https://evil.example/phish) or ![status](https://evil.example/i.png) "
    "or [wiki](https://en.wikipedia.org/wiki/Pod_(k8s)). Cited [E1] stays as written. "
    "See [the docs][1].\n\n[1]: https://evil.example/ref"
)
SHOWN = (
    "Read the runbook (https://evil.example/phish) or status (https://evil.example/i.png) "
    "or wiki (https://en.wikipedia.org/wiki/Pod_(k8s)). Cited [E1] stays as written. "
    "See [the docs][1].\n\n1: https://evil.example/ref"
)


def streamed(pieces: list[str]) -> str:
    links = StreamLinks()
    return "".join(links.feed(piece) for piece in pieces) + links.flush()


def test_a_streamed_link_shows_its_address_wherever_the_deltas_split_it():
    assert show_link_targets(LYING_LINKS) == SHOWN
    for size in (1, 2, 3, 5, 8, 13, len(LYING_LINKS)):
        pieces = [LYING_LINKS[i : i + size] for i in range(0, len(LYING_LINKS), size)]
        assert streamed(pieces) == SHOWN, size
    # Nothing is held once a bracket can no longer open a link.
    links = StreamLinks()
    assert links.feed("see [E1] and") == "see [E1] and"
    assert links.feed(" [x") == " " and links.feed("]") == "" and links.feed(" y") == "[x] y"


def test_a_link_too_long_to_wait_for_goes_out_unable_to_become_a_link():
    label = "a" * (STREAM_LINK_HOLD + 10)
    out = streamed(["[", label, "](https://evil.example)"])
    assert "](https://evil.example)" in out  # the address shows as text ...
    assert out.startswith("\\[")  # ... because its `[` was escaped when it was let go


def test_link_patterns_take_linear_time_on_hostile_runs():
    # A backtracking engine took ~4 s for 20,000 `[`; RE2 takes milliseconds. No timing
    # threshold here (bench/ measures): the size is one the old engine could not finish in
    # a test's lifetime (quadratic: ~1,000 s), so finishing at all is the proof.
    hostile = "[" * 300_000
    assert show_link_targets(hostile) == hostile
    assert streamed([hostile[:150_000], hostile[150_000:]]).count("[") == len(hostile)
    assert to_mrkdwn("![a" * 100_000).count("!") == 100_000


async def test_task_updates_in_the_native_stream_are_escaped(world: World):
    hostile_name = "<!channel>[ok](https://e.x)<https://e.x|ok><@U0BOB>"
    world.model.reply_tool_calls([("describe_pod", {"namespace": "shop", "name": hostile_name})])
    answer = LYING_LINKS.split(" Cited")[0]  # no evidence reference: the ledger holds none
    world.model.reply_text(f"Found it: {answer}")
    await world.start_bot({"slack": {"streaming": "native"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "look")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.drain()
    stream = next(m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.tasks)
    (task,) = stream.tasks.values()
    fields = [str(task.get(key, "")) for key in ("title", "details", "output")]
    shown = "\n".join(fields)
    assert task["title"] == "describe_pod"
    assert task["details"] == (
        "ns=shop name=&lt;!channel&gt;ok (https://e.x)&lt;https://e.x|ok&gt;&lt;@U0BOB&gt;"
    )
    # The tool's answer repeats the name: escaped there too.
    assert "name '&lt;!channel&gt;ok (https://e.x)&lt;https://e.x|ok&gt;" in task["output"]
    assert all(token not in shown for token in ("<!channel>", "<@U0BOB>", "|ok>", "](http"))
    # The answer's links show their real address in the stream too, split over deltas.
    text = "".join(c["text"] for c in stream.chunks if c.get("type") == "markdown_text")
    assert SHOWN.split(" Cited")[0] in text and "](http" not in text


CODE_ANSWER = (
    "Try `curl [x](http://a.example)` or:\n```sh\nsee [docs](https://k8s.io) "
    "<https://b.example|ok>\n[1]: http://ref.example\n```\nand [real](https://c.example)."
)


async def test_links_inside_code_reach_the_stream_as_written(world: World):
    world.model.reply_text(CODE_ANSWER, chunk_size=3)  # fences and spans split over deltas
    await world.start_bot({"slack": {"streaming": "native"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "how do I look?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 1)
    await world.drain()
    stream = next(m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.chunks)
    text = "".join(c["text"] for c in stream.chunks if c.get("type") == "markdown_text")
    # Code as the model wrote it (escaped, so `<…|ok>` is no link either); prose rewritten.
    assert (
        "Try `curl [x](http://a.example)` or:\n```sh\nsee [docs](https://k8s.io) "
        "&lt;https://b.example|ok&gt;\n[1]: http://ref.example\n```\n"
        "and real (https://c.example)."
    ) in text
    assert live_markup(text) == []


def test_code_keeps_its_links_as_written_wherever_the_deltas_split_it():
    shown = CODE_ANSWER.replace("[real](https://c.example)", "real (https://c.example)")
    assert show_link_targets(CODE_ANSWER) == shown
    for size in (1, 2, 3, 5, 8, 13, len(CODE_ANSWER)):
        pieces = [CODE_ANSWER[i : i + size] for i in range(0, len(CODE_ANSWER), size)]
        assert streamed(pieces) == shown, size
    # A backtick nothing closes on its line is no code: the link after it shows its address.
    assert streamed(["`not code [a](http", "://e.example)\n"]) == "`not code a (http://e.example)\n"
    # Neither is a fence left open to the end unlike a span: all of it stays as written.
    assert show_link_targets("~~~\n[b](http://f.example)") == "~~~\n[b](http://f.example)"


def test_escape_markdown_escapes_and_shows_link_targets():
    assert escape_markdown("<!here> [ok](https://evil.example)") == (
        "&lt;!here&gt; ok (https://evil.example)"
    )


# Written to pass for kelpie's own lines on the card: a "Pre-approved" line, a closed code
# block and a fake preview after it, with a ping, a mention and a disguised link.
FORGERY = (
    "\n\n```\n\n:white_check_mark: *Pre-approved by <@U0CAROL>* <!channel>\n"
    "*Preview (server-side dry run):*\n~~~\nnothing changes\n~~~ <http://evil.example|runbook>"
)


def quoted_blocks(text: str) -> list[str]:
    """The code blocks of a mrkdwn text, and what lies outside any of them."""
    parts = text.split("```")
    return [*parts[1::2], "OUTSIDE:" + "".join(parts[0::2])]


async def test_a_cards_reason_and_rollback_preview_are_quoted_data(world: World):
    # The revision to roll back to carries an annotation written to forge the card.
    (old,) = [
        rs
        for rs in world.kube.objects("ReplicaSet")
        if rs["metadata"]["annotations"].get("deployment.kubernetes.io/revision") == "1"
        and rs["metadata"]["name"].startswith("checkout-api")
    ]
    old["spec"]["template"]["metadata"]["annotations"] = {"note": f"ok{FORGERY}"}
    world.kube.put("ReplicaSet", old)
    reason = f"{HOSTILE}{FORGERY}"
    world.model.reply_tool_calls(
        [("rollback_deployment", {"namespace": "shop", "name": "checkout-api", "reason": reason})]
    )
    world.model.reply_text("Asked.")
    await world.start_bot()
    mention = await world.mention(OPS_CHANNEL, ALICE, "roll checkout-api back")

    def card(server: Any) -> Any:
        for message in server.thread(OPS_CHANNEL, mention["ts"]):
            if "approval:" in json.dumps(message.blocks or []):
                return message
        return None

    message = await world.slack.wait_for(card, timeout=20)
    call = next(c for c in world.slack.calls_to("chat.postMessage") if "approval:" in str(c.params))
    sent = mrkdwn_texts(call.params)  # the card as Slack received it, fallback text included
    assert live_markup("\n".join(sent)) == []
    assert not any(
        block.get("text", {}).get("type") == "plain_text" for block in message.blocks
    )  # nothing untrusted is left to Slack's plain-text rendering either
    pieces = [piece for text in sent for piece in quoted_blocks(text)]
    # Both forgeries show, whole and escaped, but only inside code blocks: nothing in them
    # closed their block (no run of backticks), so no line of theirs passes for the card's.
    inside = [p for p in pieces if not p.startswith("OUTSIDE:")]
    assert any("ok" in p and "Pre-approved by &lt;@U0CAROL&gt;" in p for p in inside)
    assert any("&lt;!channel&gt; ping" in p and "Pre-approved" in p for p in inside)
    assert not any("Pre-approved" in p or "nothing changes" in p for p in pieces if p not in inside)
    assert all("``" not in p and "~~~" not in p for p in inside)
    outside = "".join(p for p in pieces if p.startswith("OUTSIDE:"))
    assert outside.count("*Preview (server-side dry run):*") == 1  # kelpie's own, once
    assert f"<@{ALICE}>" in outside  # kelpie's own template still mentions


async def test_a_command_reply_escapes_what_the_person_typed(world: World):
    await world.start_bot()
    command = world.slack.slash_command("/kelpie", "<!channel>", ALICE, SHOP_CHANNEL)
    await world.slack.deliver("slash_commands", command)
    reply = await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]))
    text = str(reply[-1].body.get("text"))
    assert "Unknown subcommand" in text and "&lt;!channel&gt;" in text
    assert "<!channel>" not in text
