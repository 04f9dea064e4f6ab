"""The status indicator: the assistant thread status in DMs, an `eyes` reaction elsewhere."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import TurnFinish
from bot.agent.session import TurnOrigin
from bot.slack import copy
from bot.slack.pacing import BudgetSpent, without_waiting
from bot.slack.progress.common import (
    SLACK_FAILURES,
    Json,
    WorkspaceMemory,
    error_code,
    slack_call,
)
from bot.values import SessionInfo

log = logging.getLogger(__name__)

# The answer to a reaction call that finds the reaction as it was asked to be.
_REACTION_ALREADY = {"reactions_add": "already_reacted", "reactions_remove": "no_reaction"}


class StatusIndicator:
    """Shows that kelpie works on a message: the assistant thread status in DMs (Slack's
    AI-app threads live there; a workspace that refuses it is remembered), otherwise an
    `eyes` reaction replaced by `white_check_mark` or `x` at the end."""

    def __init__(
        self,
        client: AsyncWebClient,
        memory: WorkspaceMemory,
        session: SessionInfo,
        origin: TurnOrigin,
        *,
        reactions: bool,
    ) -> None:
        self._client = client
        self._memory = memory
        self._session = session
        self._origin = origin
        self._reactions = reactions
        self._kind: str | None = None

    async def start(self) -> None:
        session = self._session
        if session.is_dm and session.team_id not in self._memory.no_assistant_status_teams:
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=session.channel_id,
                    thread_ts=session.thread_ts,
                    status=copy.ASSISTANT_STATUS,
                )
                self._kind = "assistant"
                return
            except SLACK_FAILURES as error:
                log.info("assistant status refused (%s); using reactions", error_code(error))
                if isinstance(error, SlackApiError):
                    self._memory.no_assistant_status_teams.add(session.team_id)
        # A turn no person's message prompted (after a decision) has nothing to react to.
        if not self._reactions or self._origin.message_ts is None:
            return
        # The first reply must not wait for a reaction: under a burst the thread's own
        # messages show that kelpie works on it.
        try:
            with without_waiting("reactions.add"):
                await self._react("reactions_add", "eyes")
        except BudgetSpent:
            log.info("no reaction on %s: the workspace's budget is spent", self._origin.message_ts)
            return
        self._kind = "reaction"

    def ending_calls(self, finish: TurnFinish) -> list[Json]:
        """The calls that show the turn over: the assistant status cleared, or the `eyes`
        reaction replaced by `white_check_mark` or `x` (as data: they may go out later)."""
        session = self._session
        if self._kind == "assistant":
            return [
                slack_call(
                    "assistant.threads.setStatus",
                    channel_id=session.channel_id,
                    thread_ts=session.thread_ts,
                    status="",
                )
            ]
        if self._kind != "reaction":
            return []
        ok = finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS)
        on = {"channel": session.channel_id, "timestamp": self._origin.message_ts}
        return [
            slack_call("reactions.remove", **on, name="eyes"),
            slack_call("reactions.add", **on, name="white_check_mark" if ok else "x"),
        ]

    async def _react(self, method: str, name: str) -> None:
        try:
            await getattr(self._client, method)(
                channel=self._session.channel_id, timestamp=self._origin.message_ts, name=name
            )
        except SLACK_FAILURES as error:
            code = error_code(error)
            # A turn resumed on the same message (after a decision, or taken over) finds
            # its reaction there already, or gone: what Slack shows is what was asked for.
            if code != _REACTION_ALREADY.get(method):
                log.info("%s %s failed: %s", method, name, code)
