"""What a dead process left in Slack, put right by the replica (or restart) that took over.

- A turn that was running: every stream message (or progress message) it left open is
  closed (a long answer goes on in a second stream message), and the thread is
  told, in one sentence, that the answer is unfinished; the session leaves `processing`.
- A turn that finished while its workspace's budget had no room for its closing calls:
  they are sent (its thread stops showing it at work), as that process would have.
- A delivery acknowledged but never handled (a message, a click, a slash command):
  dispatched again through Bolt, marked as a replay so the inbox lets it through (its key
  is already recorded). What it does is claimed once in the store: the turn ledger accepts a
  message at most once, and an approval click goes through `ApprovalService.resume`, whose
  compare-and-set decides an approval once (a card that expired meanwhile expires).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import partial

from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import copy
from bot.slack.inbox import DELIVERY_KEY, REPLAYED, Handled
from bot.slack.markdown import section_blocks
from bot.slack.progress.closing import ClosingCalls, read_calls
from bot.slack.progress.common import SLACK_FAILURES, error_code
from bot.slack.progress.sessions import AgentSessions, SessionStatus
from bot.values import OrphanDelivery, OrphanTurn, PendingClosing

log = logging.getLogger(__name__)


class SlackOrphanNotices:
    """Implements the takeover's `OrphanNotices` port."""

    def __init__(self, client: AsyncWebClient, sessions: AgentSessions) -> None:
        self._client = client
        self._sessions = sessions

    async def close(self, turn: OrphanTurn) -> None:
        """A person's stop asked before the turn's replica died is what ended it: the
        thread says who stopped it, as that replica would have, not that kelpie died."""
        channel, thread_ts = turn.channel_id, turn.thread_ts
        stopper = turn.stopped_by
        lost_header, lost = copy.TURN_LOST_HEADER, copy.TURN_LOST
        if turn.released:
            lost_header, lost = copy.TURN_RELEASED_HEADER, copy.TURN_RELEASED
        header = copy.stopped_by(stopper) if stopper else lost_header
        edit = not turn.answered
        edited = [
            await self._close_message(channel, ts, header, edit=edit) for ts in turn.open_messages
        ]
        await self._sessions.set(turn.team_id, channel, thread_ts, SessionStatus.ACTIVE)
        if stopper and edited and all(edited):
            return  # its messages say who stopped it, as a stopped turn's own would
        sentence = copy.stopped_by(stopper) if stopper else lost
        await self._client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=sentence)

    async def _close_message(self, channel: str, ts: str, header: str, *, edit: bool) -> bool:
        """A native stream is stopped as it stands; a progress message (or a stream Slack
        already ended) is edited to say `header`: True when it says it. Not when the turn's
        answer was stored (`edit` False): its close may have gone out before the crash, and
        the message then shows the answer, which is never overwritten."""
        try:
            await self._client.chat_stopStream(channel=channel, ts=ts)
            return False
        except SLACK_FAILURES as error:
            if not edit:
                log.info("message %s of an answered turn left as it is (%s)", ts, error_code(error))
                return False
            log.info("stream %s not stopped (%s); editing it instead", ts, error_code(error))
        try:
            await self._client.chat_update(
                channel=channel,
                ts=ts,
                text=header,
                blocks=section_blocks(header),
            )
        except SLACK_FAILURES as error:
            log.warning("could not close message %s: %s", ts, error_code(error))
            return False
        return True


class SlackClosings:
    """Implements the takeover's `Closings` port: a finished turn's closing calls left
    unsent by a process that stopped, sent here once the budget allows, then marked sent."""

    def __init__(self, calls: ClosingCalls, sent: Callable[[str, Sequence[str]], None]) -> None:
        self._calls = calls
        self._sent = sent

    def resend(self, closing: PendingClosing) -> None:
        self._calls.later(read_calls(closing.calls_json), partial(self._sent, closing.turn_id))


class SlackRedelivery:
    """Implements the takeover's `Redelivery` port: the stored body, through Bolt again.
    Its listener marks it handled when done; one that no listener takes is handled here."""

    def __init__(self, app: AsyncApp, handled: Handled) -> None:
        self._app = app
        self._handled = handled

    async def redeliver(self, delivery: OrphanDelivery) -> None:
        body = json.loads(delivery.body_json)
        context = {REPLAYED: True, DELIVERY_KEY: delivery.key}
        request = AsyncBoltRequest(body=body, mode="socket_mode", context=context)
        response = await self._app.async_dispatch(request)
        log.info("took over %s %s (%s)", delivery.kind, delivery.key, response.status)
        if response.status == 404:  # no listener for it (a button kelpie does not handle)
            await self._handled(delivery.key)
