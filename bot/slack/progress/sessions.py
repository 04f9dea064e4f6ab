"""Each thread kelpie works in is a Slack agent session; its stop button stops the turn.

The session is `processing` (titled with the question's first line) while a turn runs,
`suspended` once a turn ends with an approval card waiting for a person (the turn ends at
the card; the decision resumes it as a new turn, `processing` again), and `active` once a
turn ends with nothing waiting. While it is `processing` Slack shows its own stop button; a
press stops the session's streams on Slack's side and sends `agent_session_stopped`, which
stops the turn exactly like kelpie's Stop button (same permission check, same sentence in
the thread). Slack does not change the status by itself, so the turn's end moves it off
`processing`, and a decision that starts no turn (a restart's reconciliation) settles it.

A workspace whose app is not declared as an agent refuses `agents.sessions.setStatus`: the
turn goes on without a session (and without a stop button), remembered for the workspace.
One not subscribed to `agent_session_stopped` answers with a warning: the session works,
Slack shows no stop button, and the log (and `kelpie check`) says what to enable.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.session import TurnOrigin
from bot.slack.pacing import BudgetSpent, without_waiting
from bot.slack.progress.common import (
    SLACK_FAILURES,
    ActiveTurn,
    ActiveTurns,
    Json,
    WorkspaceMemory,
    error_code,
    slack_call,
)
from bot.slack.progress.render import truncate
from bot.values import SessionInfo

log = logging.getLogger(__name__)

STOP_EVENT = "agent_session_stopped"
MISSING_STOP_SUBSCRIPTION = "missing_agent_session_stopped_event_subscription"
TITLE_CHARS = 200


class SessionStatus(StrEnum):
    PROCESSING = "processing"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    CLOSED = "closed"


def session_title(question: str) -> str:
    """The question's first non-empty line, at most 200 characters."""
    line = next((line.strip() for line in question.splitlines() if line.strip()), "")
    return truncate(line, TITLE_CHARS) or "kelpie"


class AgentSessions:
    """Sets a thread's agent session status; remembers what each workspace refused."""

    def __init__(self, client: AsyncWebClient, memory: WorkspaceMemory) -> None:
        self._client = client
        self._memory = memory

    async def set(
        self, team_id: str, channel_id: str, thread_ts: str, status: SessionStatus, **created: str
    ) -> None:
        """`created`: `title` and `initiator_user_id`, which count only at creation."""
        if team_id in self._memory.no_agent_session_teams:
            return
        try:
            response = await self._client.agents_sessions_setStatus(
                channel_id=channel_id, thread_ts=thread_ts, status=status.value, **created
            )
        except SLACK_FAILURES as error:
            log.warning("agent session status refused (%s): no stop button", error_code(error))
            if isinstance(error, SlackApiError):
                self._memory.no_agent_session_teams.add(team_id)
            return
        warnings = str(response.get("warning") or "") + str(
            (response.get("response_metadata") or {}).get("warnings") or ""
        )
        if (
            MISSING_STOP_SUBSCRIPTION in warnings
            and team_id not in self._memory.no_session_stop_teams
        ):
            self._memory.no_session_stop_teams.add(team_id)
            log.warning(
                "Slack shows no stop button: subscribe the app to the %s event "
                "(`kelpie manifest` lists it)",
                STOP_EVENT,
            )

    async def start_turn(self, session: SessionInfo, origin: TurnOrigin) -> None:
        # The turn's first reply must not wait for the session: under a burst it goes
        # without (no Slack stop button; kelpie's own Stop is on its progress message).
        try:
            with without_waiting("agents.sessions.setStatus"):
                await self._start(session, origin)
        except BudgetSpent:
            log.info("no agent session for %s: the workspace's budget is spent", session.thread_ts)

    async def _start(self, session: SessionInfo, origin: TurnOrigin) -> None:
        await self.set(
            session.team_id,
            session.channel_id,
            session.thread_ts,
            SessionStatus.PROCESSING,
            title=session_title(origin.text),
            initiator_user_id=origin.asker,
        )

    async def end_turn(self, turn: ActiveTurn, *, awaiting_approval: bool) -> None:
        await self.set(turn.team_id, turn.channel_id, turn.thread_ts, idle(awaiting_approval))

    def end_calls(self, turn: ActiveTurn, awaiting_approval: bool) -> list[Json]:
        """`end_turn` as data, for when it goes out later (none in a workspace without
        sessions)."""
        if turn.team_id in self._memory.no_agent_session_teams:
            return []
        status = idle(awaiting_approval).value
        call = slack_call(
            "agents.sessions.setStatus",
            channel_id=turn.channel_id,
            thread_ts=turn.thread_ts,
            status=status,
        )
        return [call]


def idle(awaiting_approval: bool) -> SessionStatus:
    """A session no turn works in: `suspended` while a card waits for a person (Slack
    shows no stop button: there is nothing of kelpie's to stop), else `active`."""
    return SessionStatus.SUSPENDED if awaiting_approval else SessionStatus.ACTIVE


# Asks the Stop button's owner to stop a turn for `user` (who-may-stop check, the refusal
# whisper and the interrupt included); True when the turn was stopped.
StopTurn = Callable[[str, ActiveTurn], Awaitable[bool]]
# The same for a thread whose turn runs on another replica (by session key), or whose
# turns are queued, not running yet (on any replica); None when there is no such turn.
StopElsewhere = Callable[[str, str], Awaitable[bool | None]]


class SessionStopEvents:
    """`agent_session_stopped` → the same stop as kelpie's Stop button, wherever the turn
    runs (Slack sends the event to any replica)."""

    def __init__(
        self,
        app: AsyncApp,
        turns: ActiveTurns,
        sessions: AgentSessions,
        stop: StopTurn,
        stop_elsewhere: StopElsewhere,
        stop_queued: StopElsewhere,
    ) -> None:
        self._app = app
        self._turns = turns
        self._sessions = sessions
        self._stop = stop
        self._stop_elsewhere = stop_elsewhere
        self._stop_queued = stop_queued

    def register(self) -> None:
        self._app.event("agent_session_stopped")(self._on_stopped)

    async def _on_stopped(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        channel = str(event.get("channel") or "")
        thread_ts = str(event.get("thread_ts") or "")
        user = str(event.get("user") or "")
        team = str(body.get("team_id") or "")
        turn = self._turns.by_thread(channel, thread_ts)
        if turn is None:
            # The turn may run on another replica, which stops it and settles the session.
            stopped = await self._stop_elsewhere(user, f"{team}:{channel}:{thread_ts}")
            if stopped is None:
                # Nothing runs there (any more): a turn still queued never runs, and the
                # session leaves processing.
                log.info("agent session in %s/%s stopped, no turn running", channel, thread_ts)
                await self._stop_queued(user, f"{team}:{channel}:{thread_ts}")
                await self._sessions.set(team, channel, thread_ts, SessionStatus.ACTIVE)
            return
        if await self._stop(user, turn):
            log.info("turn in %s stopped by %s from the agent session", turn.session_key, user)
