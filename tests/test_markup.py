"""Markup injection: text from the model, the cluster or a person never becomes a ping, a
mention or a disguised link in Slack, and no post unfurls.

What Slack received (the peer's record of every Web API call) is the evidence."""

from __future__ import annotations

import json
from typing import Any

from bot.slack.markdown import to_mrkdwn
from bot.slack.safe_text import escape_mrkdwn, plain_text
from tests.world import ALICE, CAROL, OPS_CHANNEL, SHOP_CHANNEL, World

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


async def test_card_fields_from_the_model_are_plain_text(world: World):
    reason = f"{HOSTILE} *urgent*"
    world.model.reply_tool_calls(
        [
            (
                "scale_deployment",
                {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": reason},
            )
        ]
    )
    world.model.reply_text("Asked.")
    await world.start_bot()
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")

    def card(server: Any) -> Any:
        for message in server.thread(OPS_CHANNEL, mention["ts"]):
            if "approval:" in json.dumps(message.blocks or []):
                return message
        return None

    message = await world.slack.wait_for(card, timeout=20)
    plain = [
        block["text"]["text"]
        for block in message.blocks
        if block.get("text", {}).get("type") == "plain_text"
    ]
    assert any(reason in text for text in plain)  # shown literally, as written
    assert live_markup("\n".join(mrkdwn_texts(message.blocks))) == []
    assert f"<@{ALICE}>" in json.dumps(message.blocks)  # kelpie's own template still mentions
    assert CAROL  # the approver fixture exists for this channel


async def test_a_command_reply_escapes_what_the_person_typed(world: World):
    await world.start_bot()
    command = world.slack.slash_command("/kelpie", "<!channel>", ALICE, SHOP_CHANNEL)
    await world.slack.deliver("slash_commands", command)
    reply = await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]))
    text = str(reply[-1].body.get("text"))
    assert "Unknown subcommand" in text and "&lt;!channel&gt;" in text
    assert "<!channel>" not in text
