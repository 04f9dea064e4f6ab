"""An alert's investigation in its thread, whoever brought the alert (a webhook's group, a
message an alerting app posted in a watched channel): under the channel's role, counted
against the channel's hour (`alerts.max_investigations_per_hour`) and the global turn
limits, or a line starting "No investigation ran:" saying why. Its question is a user-role
message marked as the alert's; its asker is the alert, never a person, so it approves
nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.session import AgentSessions, IncomingMessage
from bot.agent.turns import CapReached, TurnScheduler
from bot.pipeline.roles import ChannelBinding, ChannelRoles
from bot.slack.channels import ChannelDirectory
from bot.slack.queued import QueuedNotices
from bot.store.alerts import AlertGroups

log = logging.getLogger(__name__)

Count = Callable[[str, str], None]

# What kelpie writes in an alert's thread when it does not investigate.
NO_ROLE = "No investigation ran: this channel has no role in kelpie's config."
STORM = (
    "No investigation ran: this channel had its {limit} alert investigations of the last "
    "hour (alerts.max_investigations_per_hour). Mention me in this thread to look into it."
)
BUSY = (
    "No investigation ran: kelpie's turn limit per {cap} ({limit}) is reached. "
    "Mention me in this thread to look into it."
)


@dataclass(frozen=True)
class AlertTurns:
    """What starting an investigation needs: the same pieces a person's message uses."""

    agent: AgentSessions
    scheduler: TurnScheduler
    roles: ChannelRoles
    channels: ChannelDirectory
    notices: QueuedNotices


@dataclass(frozen=True)
class Investigation:
    key: str  # the delivery's inbox key: its turn is accepted once
    group: str  # the alert group's row (its channel's hour is counted on it)
    channel: str
    thread_ts: str
    asker: str  # ALERT_ASKER_PREFIX + where the alert came from
    source: str  # the metrics' receiver label
    question: str
    # Counted against the channel's hour already (a delivery taken over after a crash).
    counted: bool = False


class Investigations:
    def __init__(
        self,
        client: AsyncWebClient,
        groups: AlertGroups,
        turns: AlertTurns,
        limit: int,
        count: Count,
        clock: Callable[[], datetime],
    ) -> None:
        self._client = client
        self._groups = groups
        self._turns = turns
        self._limit = limit
        self._count = count
        self._clock = clock
        self._team_id: str | None = None

    async def start(self, job: Investigation) -> bool:
        """True when its turn was accepted (which marks its delivery handled)."""
        name = await self._turns.channels.name(job.channel)
        binding = self._turns.roles.bind(job.channel, name, False)
        if binding is None:
            await post_line(self._client, job.channel, NO_ROLE, job.thread_ts)
            return False
        if not job.counted and not await self._take_hour(job):
            return False
        incoming = IncomingMessage(
            team_id=await self.team(),
            channel_id=job.channel,
            channel_name=name,
            is_dm=False,
            thread_ts=job.thread_ts,
            ts=job.thread_ts,
            user=job.asker,
            text=job.question,
            event_key=job.key,
        )
        started = await self._submit(incoming, binding, job.group)
        if started:
            self._count(job.source, "investigated")
        return started

    async def _take_hour(self, job: Investigation) -> bool:
        """Count it against its channel's hour, or say in its thread that the hour is used."""
        limit = self._limit
        if await self._groups.take_investigation(job.group, job.channel, self._clock(), limit):
            return True
        log.info("alert %s: channel %s had %d investigations", job.group, job.channel, limit)
        self._count(job.source, "limited")
        await post_line(self._client, job.channel, STORM.format(limit=limit), job.thread_ts)
        return False

    async def _submit(self, incoming: IncomingMessage, binding: ChannelBinding, group: str) -> bool:
        scheduler = self._turns.scheduler
        # Each group is its own asker for the per-asker cap (one receiver is not one person:
        # its groups would otherwise queue behind each other); the channel's cap still holds.
        asker = f"{incoming.user}/{group}"
        busy = scheduler.admit(incoming.session_key, asker, incoming.channel_id)
        if busy is not None:
            # Not run: it does not count against the channel's hour.
            await self._groups.save(group, investigated_at=None)
            cap = "channel" if busy.cap is CapReached.LANE else "asker"
            text = BUSY.format(cap=cap, limit=busy.limit)
            await post_line(self._client, incoming.channel_id, text, incoming.ts)
            return False
        reserved = await scheduler.reserve(incoming.session_key)
        try:
            accepted = await self._turns.agent.accept(incoming, binding, claim=reserved)
        except BaseException:
            if reserved:
                scheduler.unreserve(incoming.session_key)
            scheduler.release(incoming.session_key, asker)
            raise
        if accepted is None:  # accepted before (a replay): its turn exists
            if reserved:
                scheduler.unreserve(incoming.session_key)
            scheduler.release(incoming.session_key, asker)
            return False
        scheduler.submit(
            incoming.session_key,
            lambda abort: self._turns.agent.run_turn(accepted, abort),
            lane=incoming.channel_id,
            on_queued=self._turns.notices.notice(
                incoming.channel_id, incoming.thread_ts, incoming.session_key
            ),
            person=asker,
            reserved=reserved,
        )
        return True

    async def team(self) -> str:
        """The workspace this bot is in (asked once): the first part of a session key."""
        if self._team_id is None:
            answer = await self._client.auth_test()
            self._team_id = str(answer.get("team_id") or "")
        return self._team_id


async def post_line(
    client: AsyncWebClient,
    channel: str,
    text: str,
    thread_ts: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> str | None:
    """Post kelpie's own line (its ts), or log why Slack refused it (None)."""
    try:
        answer = await client.chat_postMessage(
            channel=channel, text=text, thread_ts=thread_ts, metadata=metadata
        )
    except SlackApiError as error:
        log.error("could not post an alert line in %s: %s", channel, error.response.get("error"))
        return None
    return str(answer.get("ts"))
