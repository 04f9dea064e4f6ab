"""Alerts already in Slack (`alerts.watch`): in a channel where an alerting app or bot
posts, each of its top-level messages (by bot or app id, and `text_re` when given) gets an
investigation in its thread, under the channel's role and with the same bounds as a
webhook's alert group (bot.alerts.investigate).

The message came through the inbox (stored before acknowledged, its text kept for a
takeover: `kept_text`); it is claimed once in the store under its channel and ts (an
alert group of its own), so a Slack retry, the same event on another replica, or the same
message in two deliveries is investigated once. Messages of bots not configured are left
to the adapter, which ignores them as before."""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import re2

from bot.alerts.investigate import Count, Investigation, Investigations
from bot.alerts.threads import QUESTION
from bot.config import AlertsConfig, AlertWatch
from bot.store.alerts import AlertGroups
from bot.store.tables import AlertGroupRow
from bot.values import ALERT_ASKER_PREFIX

log = logging.getLogger(__name__)

# The metrics' receiver label for alerts that came as Slack messages.
SOURCE = "slack"
# Subtypes an alerting app's own new message comes with (none: a bot user's chat.postMessage;
# bot_message: an incoming webhook or a classic bot). Edits, deletes, joins are not alerts.
_NEW_MESSAGE = (None, "bot_message")
# How much of a message becomes the question (an alert is short; the rest is noise).
_MAX_TEXT = 6000


@dataclass(frozen=True)
class BotMessage:
    channel: str
    ts: str
    sender: str  # the bot id, else the app id
    bot_id: str | None
    app_id: str | None
    text: str


def bot_message(event: Any) -> BotMessage | None:
    """A new top-level message of a bot or app, as the Events API delivers it; None for
    anything else (a person's message, an edit, a thread reply, a field of the wrong type)."""
    if not isinstance(event, dict) or event.get("type") != "message":
        return None
    if event.get("subtype") not in _NEW_MESSAGE:
        return None
    channel, ts = event.get("channel"), event.get("ts")
    bot_id, app_id = _id(event.get("bot_id")), _id(event.get("app_id"))
    if not isinstance(channel, str) or not isinstance(ts, str) or not (bot_id or app_id):
        return None
    thread_ts = event.get("thread_ts")
    if thread_ts is not None and thread_ts != ts:
        return None  # a reply in a thread (its own or another): not a new alert
    sender = bot_id or app_id or ""
    return BotMessage(channel, ts, sender, bot_id, app_id, readable_text(event))


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def readable_text(event: dict[str, Any]) -> str:
    """What a person reads of the message: its text, its attachments' (Alertmanager's and
    Grafana's Slack notifications put the alert there) and its blocks' text."""
    parts = [_str(event.get("text"))]
    for attachment in _dicts(event.get("attachments")):
        said = [_str(attachment.get(k)) for k in ("pretext", "title", "text")]
        for item in _dicts(attachment.get("fields")):
            said.append(f"{_str(item.get('title'))}: {_str(item.get('value'))}")
        said = [line for line in said if line.strip(": ")]
        parts += said or [_str(attachment.get("fallback"))]
    for block in _dicts(event.get("blocks")):
        if block.get("type") in ("header", "section"):
            text = block.get("text")
            parts.append(_str(text.get("text")) if isinstance(text, dict) else "")
    seen: list[str] = []
    for part in parts:
        if part and part not in seen:  # a block often repeats the text
            seen.append(part)
    return "\n".join(seen)[:_MAX_TEXT]


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class _Watched:
    config: AlertWatch
    pattern: re2._Regexp | None

    def sends(self, message: BotMessage) -> bool:
        return (message.bot_id in self.config.bot_ids) or (message.app_id in self.config.app_ids)

    def matches(self, text: str) -> bool:
        return self.pattern is None or self.pattern.fullmatch(text) is not None


class WatchedChannels:
    def __init__(
        self,
        config: AlertsConfig,
        groups: AlertGroups,
        investigations: Investigations,
        count: Count,
        clock: Callable[[], datetime],
    ) -> None:
        self._watched = {
            entry.channel: _Watched(entry, _compiled(entry.text_re)) for entry in config.watch
        }
        self._groups = groups
        self._investigations = investigations
        self._count = count
        self._clock = clock

    def _pick(self, event: Any) -> tuple[BotMessage, _Watched] | None:
        # Every message event passes here: a channel not watched costs one dict lookup.
        channel = event.get("channel") if isinstance(event, dict) else None
        watched = self._watched.get(channel) if isinstance(channel, str) else None
        message = bot_message(event) if watched is not None else None
        if message is None or watched is None or not watched.sends(message):
            return None
        return message, watched

    def watches(self, event: Any) -> bool:
        """A configured bot's new message in its watched channel (whether it matches
        `text_re` or not: either way it is not the adapter's)."""
        return self._pick(event) is not None

    def kept_text(self, event: Any) -> str | None:
        """What the inbox keeps of a watched message for a takeover (None: not watched, or
        not matching its `text_re`: nothing to investigate, nothing kept)."""
        picked = self._pick(event)
        if picked is None or not picked[1].matches(picked[0].text):
            return None
        return picked[0].text

    async def handle(self, key: str, event: Any, *, replayed: bool) -> bool:
        """True when its investigation's turn was accepted (its delivery marked handled)."""
        picked = self._pick(event)
        if picked is None:
            return False
        message, watched = picked
        self._count(SOURCE, "received")
        if not watched.matches(message.text):
            log.info(
                "%s's message %s in %s does not match text_re",
                message.sender,
                message.ts,
                message.channel,
            )
            self._count(SOURCE, "dropped")
            return False
        group = f"{SOURCE}:{message.channel}:{message.ts}"
        counted = False
        if not await self._groups.claim(self._row(group, message)):
            existing = await self._groups.find(group) if replayed else None
            if existing is None:
                log.info(
                    "%s's message %s was taken before; handled once", message.sender, message.ts
                )
                self._count(SOURCE, "deduplicated")
                return False
            counted = existing.investigated_at is not None  # taken over after a crash
        self._count(SOURCE, "routed")
        return await self._investigations.start(self._job(key, group, message, watched, counted))

    def _row(self, group: str, message: BotMessage) -> AlertGroupRow:
        return AlertGroupRow(
            key=group,
            channel_id=message.channel,
            thread_ts=message.ts,
            status="firing",
            alerts_json="[]",
            firing_count=1,
            fired_at=self._clock(),
        )

    @staticmethod
    def _job(
        key: str, group: str, message: BotMessage, watched: _Watched, counted: bool
    ) -> Investigation:
        instruction = watched.config.instruction
        extra = f"\nThe channel's watch adds: {instruction}" if instruction else ""
        return Investigation(
            key=key,
            group=group,
            channel=message.channel,
            thread_ts=message.ts,
            asker=f"{ALERT_ASKER_PREFIX}{message.sender}",
            source=SOURCE,
            question=QUESTION.format(
                receiver=message.sender,
                body=html.escape(message.text, quote=False),
                instruction=extra,
            ),
            counted=counted,
        )


def _compiled(pattern: str | None) -> re2._Regexp | None:
    # Anchored like routes' match_re; `.` matches line breaks (a message has several lines).
    return re2.compile(f"(?s:{pattern})") if pattern is not None else None
