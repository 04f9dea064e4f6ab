"""Channel names for role matching, looked up with conversations.info and cached briefly so a
renamed channel is picked up (and forgotten at once on a channel_rename event)."""

from __future__ import annotations

import asyncio
import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.pipeline.roles import ChannelBinding, ChannelRoles
from bot.values import SessionInfo

log = logging.getLogger(__name__)


class ChannelDirectory:
    def __init__(self, client: AsyncWebClient, ttl_s: float = 300.0) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._names: dict[str, tuple[float, str | None]] = {}
        # One lookup per channel at a time: a burst of mentions in a channel kelpie has not
        # seen yet asks Slack once, not once per mention (conversations.info is rate limited).
        self._lookups: dict[str, asyncio.Task[str | None]] = {}

    async def name(self, channel_id: str) -> str | None:
        cached = self._names.get(channel_id)
        if cached is not None and time.monotonic() - cached[0] < self._ttl_s:
            return cached[1]
        lookup = self._lookups.get(channel_id)
        if lookup is None:
            lookup = asyncio.create_task(self._look_up(channel_id))
            self._lookups[channel_id] = lookup
            lookup.add_done_callback(lambda _task: self._lookups.pop(channel_id, None))
        # Shielded: one waiter giving up (an interrupted turn) does not fail the others.
        return await asyncio.shield(lookup)

    async def _look_up(self, channel_id: str) -> str | None:
        try:
            response = await self._client.conversations_info(channel=channel_id)
        except SlackApiError as error:
            # Not cached: the next message asks again rather than matching no name for minutes.
            log.warning("conversations.info %s failed: %s", channel_id, error.response.get("error"))
            return None
        name = response["channel"].get("name")
        self._names[channel_id] = (time.monotonic(), name)
        return name

    def forget(self, channel_id: str) -> None:
        self._names.pop(channel_id, None)


class ChannelBindings:
    """A channel's binding under the running config, for the re-check at a click and for
    a turn run after its message was admitted (`external`: for someone from another
    organisation, as the adapter admits them)."""

    def __init__(self, channels: ChannelDirectory, roles: ChannelRoles) -> None:
        self._channels = channels
        self._roles = roles

    async def current(
        self, session: SessionInfo, *, external: bool = False
    ) -> ChannelBinding | None:
        name = None if session.is_dm else await self._channels.name(session.channel_id)
        binding = self._roles.bind(session.channel_id, name, session.is_dm)
        if binding is not None and external:
            return self._roles.for_external_user(binding)
        return binding

    async def enabled(self, channel_id: str, is_dm: bool) -> bool:
        """Whether kelpie answers in the channel; Slack is asked for its name only when the
        config could match it by name (before a request is acknowledged: no round trip
        for a channel bound by id)."""
        needs_name = not is_dm and self._roles.needs_name(channel_id, is_dm)
        name = await self._channels.name(channel_id) if needs_name else None
        return self._roles.bind(channel_id, name, is_dm) is not None
