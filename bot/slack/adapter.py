"""Bolt listeners: Slack events in, accepted messages out to the agent.

Owns what Slack-specific rules decide whether a message starts a turn: mentions, DMs,
thread follow-ups, ignoring the bot's own messages and message subtypes. Retried deliveries
never get here: the inbox middleware (`bot.slack.inbox`) stores each request before it is
acknowledged and stops repeats by key. Listeners return at once; turns run as tasks in the
`TurnScheduler`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import logs
from bot.agent.session import AcceptedMessage, AgentSessions, IncomingMessage
from bot.agent.turns import Busy, CapReached, TurnScheduler
from bot.config import SlackConfig
from bot.pipeline.roles import ChannelBinding, ChannelRoles
from bot.slack import copy
from bot.slack.channels import ChannelDirectory
from bot.slack.inbox import DELIVERY_KEY, REPLAYED, Handled
from bot.slack.payloads import PersonMessage, is_from_a_person, person_message
from bot.slack.progress.common import Json
from bot.slack.queued import QueuedNotices
from bot.store.repositories import SessionRepository
from bot.values import ts_after

log = logging.getLogger(__name__)

_MENTION = re.compile(r"<@[A-Z0-9]+>")

# Withdraws the session's pending approval cards that this person asked for.
Withdraw = Callable[[int, str], Awaitable[int]]


class BotMessages(Protocol):
    """Alerting apps' messages in watched channels (bot.alerts.watch)."""

    def watches(self, event: Any) -> bool: ...

    async def handle(self, key: str, event: Any, *, replayed: bool) -> bool: ...


class SlackAdapter:
    def __init__(
        self,
        app: AsyncApp,
        config: SlackConfig,
        channels: ChannelDirectory,
        roles: ChannelRoles,
        sessions: SessionRepository,
        agent: AgentSessions,
        scheduler: TurnScheduler,
        withdraw: Withdraw,
        handled: Handled,
        notices: QueuedNotices,
        watched: BotMessages | None = None,
    ) -> None:
        self._notices = notices
        self._watched = watched
        self._app = app
        self._config = config
        self._channels = channels
        self._roles = roles
        self._sessions = sessions
        self._agent = agent
        self._scheduler = scheduler
        self._withdraw = withdraw
        self._handled = handled

    def register(self) -> None:
        self._app.event("app_mention")(self._on_mention)
        self._app.event("message")(self._on_message)
        self._app.event("channel_rename")(self._on_rename)
        self._app.error(self._on_error)

    @property
    def client(self) -> AsyncWebClient:
        return self._app.client

    async def _on_mention(
        self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]
    ) -> None:
        try:
            if is_from_a_person(event):
                message = self._parse(body, event)
                replayed = bool(context.get(REPLAYED))
                if message is not None and await self._handle(message, False, replayed):
                    return  # its turn's acceptance marked the delivery handled
        except Exception:
            log.exception("app_mention listener failed for event %s", _event_id(body))
        await self._done(body)

    async def _on_message(
        self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]
    ) -> None:
        try:
            if self._watched is not None and self._watched.watches(event):
                if await self._watched_message(body, event, context):
                    return  # its investigation's acceptance marked the delivery handled
            elif await self._message(body, event, context):
                return  # its turn's acceptance marked the delivery handled
        except Exception:
            log.exception("message listener failed for event %s", _event_id(body))
        await self._done(body)

    async def _done(self, body: dict[str, Any]) -> None:
        """The delivery is handled (nothing to do, or a reply said why): no replica takes
        it over. A turn's acceptance marks it in its own transaction instead."""
        event_id = body.get("event_id")
        if isinstance(event_id, str):
            try:
                await self._handled(event_id)
            except Exception as error:  # taken over later, and accepted at most once
                log.error("could not mark event %s handled: %s", event_id, error)

    async def _watched_message(
        self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]
    ) -> bool:
        """An alerting app's message in a watched channel: True when investigated."""
        assert self._watched is not None
        key = context.get(DELIVERY_KEY) or body.get("event_id")
        if not isinstance(key, str):
            return False
        with logs.bound(event_id=key):
            return await self._watched.handle(key, event, replayed=bool(context.get(REPLAYED)))

    async def _message(
        self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]
    ) -> bool:
        """True when the message started a turn."""
        bot_user_id = context.get("bot_user_id")
        if not is_from_a_person(event) or event.get("user") in (None, bot_user_id):
            return False
        message = self._parse(body, event)
        if message is None:
            return False
        replayed = bool(context.get(REPLAYED))
        if message.channel_type == "im":
            return await self._handle(message, True, replayed)
        mentioned = bot_user_id is not None and f"<@{bot_user_id}>" in message.text
        if not message.thread_ts or mentioned or not self._config.thread_followups:
            return False  # top-level chatter, or an app_mention event handles it
        session_key = f"{message.team_id}:{message.channel}:{message.thread_ts}"
        if await self._sessions.find(session_key) is None:
            return False  # not a kelpie thread
        return await self._handle(message, False, replayed)

    async def _on_rename(self, event: dict[str, Any]) -> None:
        channel = event.get("channel") if isinstance(event, dict) else None
        if isinstance(channel, dict) and isinstance(channel.get("id"), str):
            self._channels.forget(channel["id"])

    async def _on_error(self, error: Exception, body: dict[str, Any]) -> None:
        log.error(
            "Slack request failed: %s (%s, event %s)",
            error,
            _event_kind(body),
            _event_id(body),
            exc_info=error,
        )

    @staticmethod
    def _parse(body: dict[str, Any], event: dict[str, Any]) -> PersonMessage | None:
        message = person_message(body, event)
        if message is None:
            log.warning(
                "ignoring a malformed %s event %s (a field is missing or has the wrong type)",
                _event_kind(body),
                _event_id(body),
            )
        return message

    async def _handle(self, message: PersonMessage, is_dm: bool, replayed: bool) -> bool:
        """True when the message started a turn (stored with its delivery marked handled)."""
        # The turn's task starts inside this block, so its log lines keep the event id too.
        with logs.bound(event_id=message.event_id):
            return await self._accept(message, is_dm=is_dm, replayed=replayed)

    async def _accept(self, message: PersonMessage, *, is_dm: bool, replayed: bool) -> bool:
        channel_id, thread_ts = message.channel, message.reply_ts
        channel_name = None if is_dm else await self._channels.name(channel_id)
        binding = self._roles.bind(channel_id, channel_name, is_dm)
        if binding is not None and message.is_external:
            binding = self._roles.for_external_user(binding)
            if binding is None:
                log.info(
                    "%s is from another organisation (%s); replied once",
                    message.user,
                    message.user_team,
                )
                await self._reply(channel_id, thread_ts, copy.NOT_FOR_EXTERNAL_USERS)
                return False
        if binding is None:
            log.info("channel %s (%s) is not enabled; replied once", channel_id, channel_name)
            await self._reply(channel_id, thread_ts, copy.NOT_ENABLED)
            return False
        incoming = IncomingMessage(
            team_id=message.team_id,
            channel_id=channel_id,
            channel_name=channel_name,
            is_dm=is_dm,
            thread_ts=thread_ts,
            ts=message.ts,
            user=message.user,
            text=_MENTION.sub("", message.text).strip(),
            event_key=message.event_id or None,
            external=message.is_external,
        )
        if replayed and await self._came_late(incoming):
            log.info("replayed message %s is older than its thread; not answered", message.ts)
            await self._reply(channel_id, thread_ts, copy.message_came_late(incoming.user))
            return False
        # A place is reserved before anything is stored: a burst cannot slip past the caps.
        busy = self._scheduler.admit(incoming.session_key, incoming.user, channel_id)
        if busy is not None:
            log.info(
                "%s in %s: the %s cap (%d) is reached; replied once",
                incoming.user,
                channel_id,
                busy.cap,
                busy.limit,
            )
            await self._reply(channel_id, thread_ts, _busy_sentence(busy))
            return False
        # Nothing else in the thread here and a place free: the turn is stored as running
        # (where no other replica runs one) in the same commit as its message.
        reserved = await self._scheduler.reserve(incoming.session_key)
        try:
            accepted = await self._store(incoming, binding, claim=reserved)
        except BaseException:
            self._release(incoming, reserved)
            raise
        if accepted is None:  # accepted before this delivery was replayed: its turn exists
            self._release(incoming, reserved)
            return False

        self._scheduler.submit(
            incoming.session_key,
            lambda abort: self._agent.run_turn(accepted, abort),
            lane=channel_id,
            on_queued=self._notices.notice(channel_id, thread_ts, incoming.session_key),
            person=incoming.user,
            reserved=reserved,
        )
        return True

    async def _came_late(self, incoming: IncomingMessage) -> bool:
        """A message replayed after a crash is late when its thread has seen something newer
        (another message handled, a card posted): answered now, it would be answered out of
        order and would withdraw the newer cards."""
        session = await self._sessions.find(incoming.session_key)
        if session is None:
            return False
        seen = await self._sessions.activity_ts(session.id)
        return any(ts_after(ts, incoming.ts) for ts in seen)

    def _release(self, incoming: IncomingMessage, reserved: bool) -> None:
        if reserved:
            self._scheduler.unreserve(incoming.session_key)
        self._scheduler.release(incoming.session_key, incoming.user)

    async def _store(
        self, incoming: IncomingMessage, binding: ChannelBinding, *, claim: bool
    ) -> AcceptedMessage | None:
        session = await self._sessions.find(incoming.session_key)
        if session is not None:
            # A requester's new message withdraws their pending cards (before it is stored,
            # so the turn it starts already knows); anyone else's leaves them alone.
            await self._withdraw(session.id, incoming.user)
        return await self._agent.accept(incoming, binding, claim=claim)

    async def _reply(
        self, channel: str, thread_ts: str, text: str, blocks: list[Json] | None = None
    ) -> None:
        try:
            await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
            )
        except SlackApiError as error:
            log.error("could not reply in %s: %s", channel, error.response.get("error"))


def _busy_sentence(busy: Busy) -> str:
    if busy.cap is CapReached.PERSON:
        return copy.person_busy(busy.limit)
    return copy.channel_busy(busy.limit)


def _event_id(body: Any) -> str:
    event_id = body.get("event_id") if isinstance(body, dict) else None
    return event_id if isinstance(event_id, str) else "(none)"


def _event_kind(body: Any) -> str:
    if not isinstance(body, dict):
        return "request"
    event = body.get("event")
    if isinstance(event, dict):
        return str(event.get("type"))
    return str(body.get("type", "request"))
