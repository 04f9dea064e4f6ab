"""Bolt listeners: Slack events in, accepted messages out to the agent.

Owns what Slack-specific rules decide whether a message starts a turn: mentions, DMs,
thread follow-ups, ignoring the bot's own messages and message subtypes, and deduplication
of retried deliveries by event id (persisted, so a retry after a restart is ignored too).
Listeners return at once; turns run as tasks in the `TurnScheduler`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import logs
from bot.agent.session import AgentSessions, IncomingMessage
from bot.agent.turns import TurnScheduler
from bot.config import SlackConfig
from bot.policy.roles import ChannelRoles
from bot.slack import copy
from bot.slack.channels import ChannelDirectory
from bot.store.repositories import EventLedger, SessionRepository

log = logging.getLogger(__name__)

_MENTION = re.compile(r"<@[A-Z0-9]+>")
# Subtypes that are still a person writing: everything else (edits, joins, bots) is ignored.
_PERSON_SUBTYPES = {None, "thread_broadcast", "file_share"}


class SlackAdapter:
    def __init__(
        self,
        app: AsyncApp,
        config: SlackConfig,
        channels: ChannelDirectory,
        roles: ChannelRoles,
        ledger: EventLedger,
        sessions: SessionRepository,
        agent: AgentSessions,
        scheduler: TurnScheduler,
    ) -> None:
        self._app = app
        self._config = config
        self._channels = channels
        self._roles = roles
        self._ledger = ledger
        self._sessions = sessions
        self._agent = agent
        self._scheduler = scheduler

    def register(self) -> None:
        self._app.event("app_mention")(self._on_mention)
        self._app.event("message")(self._on_message)
        self._app.event("channel_rename")(self._on_rename)
        self._app.error(self._on_error)

    @property
    def client(self) -> AsyncWebClient:
        return self._app.client

    async def _on_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("bot_id") or event.get("subtype") not in _PERSON_SUBTYPES:
            return
        await self._handle(body, event, is_dm=False)

    async def _on_message(
        self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]
    ) -> None:
        if event.get("bot_id") or event.get("subtype") not in _PERSON_SUBTYPES:
            return
        if event.get("user") is None or event.get("user") == context.get("bot_user_id"):
            return
        if event.get("channel_type") == "im":
            await self._handle(body, event, is_dm=True)
            return
        thread_ts = event.get("thread_ts")
        bot_user_id = context.get("bot_user_id")
        mentioned = bot_user_id is not None and f"<@{bot_user_id}>" in event.get("text", "")
        if not thread_ts or mentioned or not self._config.thread_followups:
            return  # top-level chatter, or an app_mention event handles it
        session_key = f"{_team(body, event)}:{event['channel']}:{thread_ts}"
        if await self._sessions.find(session_key) is None:
            return  # not a kelpie thread
        await self._handle(body, event, is_dm=False)

    async def _on_rename(self, event: dict[str, Any]) -> None:
        channel = event.get("channel") or {}
        if isinstance(channel, dict) and channel.get("id"):
            self._channels.forget(channel["id"])

    async def _on_error(self, error: Exception, body: dict[str, Any]) -> None:
        log.error("Slack request failed: %s (%s)", error, _event_kind(body))

    async def _handle(self, body: dict[str, Any], event: dict[str, Any], *, is_dm: bool) -> None:
        # The turn's task starts inside this block, so its log lines keep the event id too.
        with logs.bound(event_id=body.get("event_id")):
            await self._accept(body, event, is_dm=is_dm)

    async def _accept(self, body: dict[str, Any], event: dict[str, Any], *, is_dm: bool) -> None:
        event_id = body.get("event_id")
        channel_id = event.get("channel")
        user = event.get("user")
        ts = event.get("ts")
        if not (isinstance(channel_id, str) and isinstance(user, str) and isinstance(ts, str)):
            log.warning("ignoring a malformed %s event (no channel, user or ts)", _event_kind(body))
            return
        if not event_id or not await self._ledger.claim(event_id):
            log.info("ignoring duplicate delivery of event %s", event_id)
            return
        thread_ts = event.get("thread_ts") or ts
        channel_name = None if is_dm else await self._channels.name(channel_id)
        binding = self._roles.bind(channel_id, channel_name, is_dm)
        if binding is None:
            log.info("channel %s (%s) is not enabled; replied once", channel_id, channel_name)
            await self._reply(channel_id, thread_ts, copy.NOT_ENABLED)
            return
        message = IncomingMessage(
            team_id=_team(body, event),
            channel_id=channel_id,
            channel_name=channel_name,
            is_dm=is_dm,
            thread_ts=thread_ts,
            ts=ts,
            user=user,
            text=_MENTION.sub("", event.get("text", "")).strip(),
        )
        accepted = await self._agent.accept(message, binding)
        self._scheduler.submit(
            message.session_key, lambda abort: self._agent.run_turn(accepted, abort)
        )

    async def _reply(self, channel: str, thread_ts: str, text: str) -> None:
        try:
            await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text)
        except SlackApiError as error:
            log.error("could not reply in %s: %s", channel, error.response.get("error"))


def _team(body: dict[str, Any], event: dict[str, Any]) -> str:
    return str(body.get("team_id") or event.get("team") or "")


def _event_kind(body: dict[str, Any]) -> str:
    event = body.get("event")
    if isinstance(event, dict):
        return str(event.get("type"))
    return str(body.get("type", "request"))
