"""What of a Slack request the inbox keeps at rest: what a replay after a crash needs, and
nothing more, masked by the outbound masker like everything else kelpie keeps.

- A message or mention: who wrote where and when; its text only when it may start a turn
  in a channel where kelpie is enabled (a mention, a DM, a thread reply). Chatter and
  anything from a channel kelpie is not enabled in is kept as that id-level stub: a replay
  of it can still say "not enabled here", never what was written.
- A message of an alerting app in a channel kelpie watches (`alerts.watch`): its ids and
  its readable text (attachments included), which its investigation asks about.
- A click: what its listener reads (who, where, which button); not the clicked message's
  content, not the form state, not its `response_url`, which no listener uses.
- A slash command: its fields, with its `response_url`, the one way to answer it where
  kelpie is not a member; the inbox drops the whole body once the command was handled.
- Anything else is handled at once and never replayed: nothing is kept.

The verification token is never kept (a credential).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.model.outbound import mask_value_async
from bot.slack.payloads import is_from_a_person
from bot.store.inbox import TAKEN_OVER

log = logging.getLogger(__name__)

# Whether kelpie is enabled in a channel (channel id, is a DM).
Enabled = Callable[[str, bool], Awaitable[bool]]

# An event's envelope, as Bolt reads it to dispatch a replay (team, app, ids).
_ENVELOPE = (
    "type",
    "team_id",
    "api_app_id",
    "event_id",
    "event_time",
    "enterprise_id",
    "context_team_id",
    "context_enterprise_id",
    "is_ext_shared_channel",
    "authorizations",
)
# A message event's ids: who wrote where and when, never what.
_EVENT_IDS = (
    "type",
    "subtype",
    "user",
    "user_team",
    "team",
    "channel",
    "channel_type",
    "ts",
    "thread_ts",
    "event_ts",
    "bot_id",
)
_MESSAGE_EVENTS = frozenset({"message", "app_mention"})
# The clicked message is kept as its ids only (its content is kelpie's own card or notice).
_CLICKED_MESSAGE_IDS = ("type", "ts", "thread_ts")
_CLICK_DROPPED = frozenset({"token", "response_url", "response_urls", "state", "message"})


# The text kept of a bot's message kelpie watches for alerts (None: not watched).
WatchedText = Callable[[Any], str | None]


class AtRest:
    def __init__(self, enabled: Enabled, watched: WatchedText | None = None) -> None:
        self._enabled = enabled
        self._watched = watched

    async def content(self, kind: str, body: dict[str, Any]) -> str:
        """The JSON the inbox keeps for a request of `kind` ("" when nothing is kept)."""
        if kind not in TAKEN_OVER:
            return ""
        if kind in _MESSAGE_EVENTS:
            kept = await self._event(body)
        elif kind == "block_actions":
            kept = _click(body)
        else:
            kept = {k: v for k, v in body.items() if k not in ("token", "response_url")}
        masked, _ = await mask_value_async(kept, "inbox")
        if kind == "command" and isinstance(body.get("response_url"), str):
            # Not masked: the address the replayed command answers through, dropped with
            # the rest of the body once it was handled.
            masked["response_url"] = body["response_url"]
        return json.dumps(masked, sort_keys=True)

    async def _event(self, body: dict[str, Any]) -> dict[str, Any]:
        event = body.get("event")
        event = event if isinstance(event, dict) else {}
        ids = {k: event[k] for k in _EVENT_IDS if k in event}
        watched = self._watched(event) if self._watched is not None else None
        if watched is not None:
            # An alerting app's message: what its investigation asks, after a takeover too.
            ids |= {"text": watched, "app_id": event.get("app_id")}
        elif await self._may_start_a_turn(event):
            ids["text"] = event.get("text")
        return {k: body[k] for k in _ENVELOPE if k in body} | {"event": ids}

    async def _may_start_a_turn(self, event: dict[str, Any]) -> bool:
        channel = event.get("channel")
        if not is_from_a_person(event) or not isinstance(channel, str):
            return False
        is_dm = event.get("channel_type") == "im"
        if event.get("type") == "message" and not is_dm and not event.get("thread_ts"):
            return False  # top-level chatter: a mention of kelpie comes as an app_mention
        try:
            return await self._enabled(channel, is_dm)
        except Exception as error:  # the listener still has the whole message in memory
            log.warning("could not tell if %s is enabled; kept its ids only: %s", channel, error)
            return False


def _click(body: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in body.items() if k not in _CLICK_DROPPED}
    message = body.get("message")
    if isinstance(message, dict):
        kept["message"] = {k: message[k] for k in _CLICKED_MESSAGE_IDS if k in message}
    return kept
