"""Untrusted text → safe Slack mrkdwn: the one escaping function.

Text from the model, the cluster or a person becomes live markup in mrkdwn unless `&`, `<`
and `>` are escaped: `<!channel>` pings everyone, `<@U…>` mentions, `<http://evil|safe>`
disguises a link. Every untrusted piece goes through `escape_mrkdwn` (or into a
`plain_text` object, `plain_text`) before it is put into a message; kelpie's own mentions
and links are built by its templates (bot/slack/copy.py, people.py) around escaped text.
"""

from __future__ import annotations

from typing import Any

from bot.slack.markdown import show_link_targets

# Slack's limit on a plain_text object in most blocks (header: 150, button: 75).
PLAIN_TEXT_LIMIT = 3000


def escape_mrkdwn(text: str) -> str:
    """Escape Slack's three control characters; all of `&` too, so an entity written by
    the model (`&lt;!here&gt;`) shows as written instead of being decoded into markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_markdown(text: str) -> str:
    """Untrusted text for a field Slack renders as Markdown (the native stream's text and
    task updates): escaped like mrkdwn, and every link shows its real address."""
    return escape_mrkdwn(show_link_targets(text))


def plain_text(text: str, limit: int = PLAIN_TEXT_LIMIT) -> dict[str, Any]:
    """A `plain_text` text object: Slack shows it literally (no mentions, links or
    formatting), cut to `limit` characters."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}
