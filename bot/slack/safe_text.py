"""Untrusted text → safe Slack mrkdwn: the one escaping function.

Text from the model, the cluster or a person becomes live markup in mrkdwn unless `&`, `<`
and `>` are escaped: `<!channel>` pings everyone, `<@U…>` mentions, `<http://evil|safe>`
disguises a link. Every untrusted piece goes through `escape_mrkdwn` (or into a
`plain_text` object, `plain_text`) before it is put into a message; kelpie's own mentions
and links are built by its templates (bot/slack/copy.py, people.py) around escaped text.

Where untrusted text sits among kelpie's own words and must not pass for them (an approval
card: the model's reason, values read from the cluster), escaping is not enough: a newline
and `*Pre-approved*` would still look like a line of the card. There it is shown as quoted
data (`quoted`, `quoted_inline`): inside code, which nothing in the text can end.
"""

from __future__ import annotations

import re
from typing import Any

from bot.slack.markdown import show_link_targets

# Slack's limit on a plain_text object in most blocks (header: 150, button: 75).
PLAIN_TEXT_LIMIT = 3000


def escape_mrkdwn(text: str) -> str:
    """Escape Slack's three control characters; all of `&` too, so an entity written by
    the model (`&lt;!here&gt;`) shows as written instead of being decoded into markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# Between two backticks or tildes: in code, "```" would end the block early, and "```" or
# "~~~" at a line's start would be taken for a fence where a long text is split.
_RUN = re.compile(r"(?<=[`~])(?=[`~])")
_ZERO_WIDTH_SPACE = "\u200b"
# Looks like a backtick, cannot end a code span.
_GRAVE = "\u02cb"


def quoted(text: str) -> str:
    """Untrusted text as a code block that nothing in it can end: escaped (no mention, link
    or entity) and with no two backticks or tildes in a row, so its newlines, bold and
    fences all show as data inside the block. Split with `markdown.split_text`, every piece
    is such a block."""
    return f"```\n{_RUN.sub(_ZERO_WIDTH_SPACE, escape_mrkdwn(text))}\n```"


def quoted_inline(text: str) -> str:
    """Untrusted text within one of kelpie's lines: a code span on one line (whitespace
    runs, newlines included, become one space) that no backtick of its own can end."""
    flat = " ".join(text.split()) or "-"
    return f"`{escape_mrkdwn(flat).replace('`', _GRAVE)}`"


def one_line(text: str) -> str:
    """Escaped and on one line: mrkdwn that cannot start a line of its own."""
    return escape_mrkdwn(" ".join(text.split()))


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
