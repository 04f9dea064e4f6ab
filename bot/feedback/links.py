"""A Slack thread link → (channel id, thread ts).

Slack's "Copy link" gives `https://WORKSPACE.slack.com/archives/C0123/p1733400000123456`
for a top-level message, and adds `?thread_ts=1733400000.123456&cid=C0123` for a reply in
a thread: the thread is then the `thread_ts`, not the reply's own `p…` stamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from bot.errors import ExportError

_ARCHIVES = re.compile(r"^/archives/([A-Z0-9]+)/p(\d{10})(\d{6})/?$")
_TS = re.compile(r"^\d{10}\.\d{6}$")


@dataclass(frozen=True)
class ThreadRef:
    channel_id: str
    thread_ts: str
    link: str  # as given


def parse_thread_link(link: str) -> ThreadRef:
    parts = urlsplit(link.strip())
    found = _ARCHIVES.match(parts.path)
    if parts.scheme not in ("https", "http") or found is None:
        raise ExportError(
            f"--thread: {link!r} is not a Slack message link; use Slack's 'Copy link' on the "
            "thread's first message (https://WORKSPACE.slack.com/archives/CHANNEL/p…)"
        )
    channel, seconds, micros = found.groups()
    thread_ts = (parse_qs(parts.query).get("thread_ts") or [f"{seconds}.{micros}"])[0]
    if not _TS.match(thread_ts):
        raise ExportError(f"--thread: the link's thread_ts {thread_ts!r} is not a Slack ts")
    return ThreadRef(channel, thread_ts, link.strip())
