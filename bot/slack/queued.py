"""A queued turn's notice in its thread ("Queued: kelpie is answering N other requests"),
with a Stop button while the turn waits for a slot. The button goes once the turn cannot
be stopped there any more, and the sentence stays: when the turn starts answering (its
progress opens: `started`), or when it is dropped while it waits (a newer message in the
thread replaced it). A Stop pressed on the notice replaces the sentence with who stopped
it, and nothing touches the notice after that: a turn stopped from another replica gets
its slot here but never starts, so its notice is left as that replica wrote it."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import copy
from bot.slack.markdown import section_blocks
from bot.slack.progress.common import QUEUED_STOP_BLOCK, SLACK_FAILURES
from bot.slack.progress.render import stop_button_block

log = logging.getLogger(__name__)


class QueuedNotice:
    """One waiting turn's notice (the scheduler's `QueuedNotice`)."""

    def __init__(
        self, notices: QueuedNotices, channel: str, thread_ts: str, session_key: str
    ) -> None:
        self._notices = notices
        self.channel = channel
        self._thread_ts = thread_ts
        self._session_key = session_key
        self.ts: str | None = None
        self.text = ""
        self.settled = False

    async def queued(self, running: int, ahead: int) -> None:
        # With kelpie's Stop button: a turn can be stopped before it ever runs.
        self.text = copy.queued(running, ahead)
        stop = stop_button_block(self._session_key, QUEUED_STOP_BLOCK)
        try:
            response = await self._notices.client.chat_postMessage(
                channel=self.channel,
                thread_ts=self._thread_ts,
                text=self.text,
                blocks=[*section_blocks(self.text), stop],
            )
        except SLACK_FAILURES as error:
            log.error("could not show in %s that a turn is queued: %s", self.channel, error)
            return
        self.ts = str(response.get("ts") or "") or None
        if self.ts is not None:
            self._notices.waiting[self.ts] = self

    async def left(self, started: bool) -> None:
        if self.ts is None:
            return
        self._notices.waiting.pop(self.ts, None)
        if self.settled:
            return
        if started:
            # Its Stop reaches it until its progress opens (`QueuedNotices.started`).
            self._notices.starting[self._session_key] = self
        else:
            await self._notices.show(self.channel, self.ts, self.text)


class QueuedNotices:
    """The notices of turns waiting here (`waiting`, by ts) or given a slot and about to
    start (`starting`, by session: one waits for the slot per session at a time)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self.waiting: dict[str, QueuedNotice] = {}
        self.starting: dict[str, QueuedNotice] = {}
        self._showing: set[asyncio.Task[None]] = set()

    def notice(self, channel: str, thread_ts: str, session_key: str) -> QueuedNotice:
        return QueuedNotice(self, channel, thread_ts, session_key)

    def started(self, session_key: str) -> None:
        """The session's turn starts answering: its notice, if it had one, loses its Stop
        (beside the turn, which does not wait for Slack)."""
        notice = self.starting.pop(session_key, None)
        if notice is None or notice.ts is None or notice.settled:
            return
        task = asyncio.create_task(self.show(notice.channel, notice.ts, notice.text))
        self._showing.add(task)
        task.add_done_callback(self._showing.discard)

    async def stopped(self, channel: str, ts: str, text: str) -> None:
        """The turn of the notice at `ts` was stopped before it ran: `text` replaces the
        notice for good."""
        for notice in (self.waiting.get(ts), *self.starting.values()):
            if notice is not None and notice.ts == ts:
                notice.settled = True
        await self.show(channel, ts, text)

    async def show(self, channel: str, ts: str, text: str) -> None:
        """The notice as `text` alone, without its button."""
        try:
            await self.client.chat_update(
                channel=channel, ts=ts, text=text, blocks=section_blocks(text)
            )
        except SLACK_FAILURES as error:  # only the notice is left as it was
            log.warning("could not update the queued notice %s: %s", ts, error)
