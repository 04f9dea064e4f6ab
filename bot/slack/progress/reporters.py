"""The reporter factory: picks native streaming or chat.update per turn and remembers what
each workspace refused."""

from __future__ import annotations

import logging
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.session import Reporter, TurnMessages, TurnOrigin
from bot.config import SlackConfig, StreamingMode
from bot.slack.pacing import SlackPacer
from bot.slack.progress.closing import ClosingCalls
from bot.slack.progress.common import (
    CHANNEL_REFUSALS,
    WORKSPACE_REFUSALS,
    ActiveTurn,
    ActiveTurns,
    Background,
    Interrupt,
    Json,
    SlackBudget,
    ThreadPacer,
    WorkspaceMemory,
)
from bot.slack.progress.indicator import StatusIndicator
from bot.slack.progress.native import BUDGET_SPENT, NativeReporter
from bot.slack.progress.reporter import TurnContext
from bot.slack.progress.sessions import AgentSessions, idle
from bot.slack.progress.update import UpdateReporter
from bot.values import SessionInfo

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- factory


class SlackReporters:
    """ReporterFactory for Slack threads: picks the rendering per workspace and keeps the
    registry of running turns for the Stop button."""

    def __init__(
        self,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        interrupt: Interrupt | None = None,
        model_name: str = "",
        pacer: SlackPacer | None = None,
        started: Callable[[str], None] | None = None,
        answer_actions: Callable[[str], list[Json]] | None = None,
    ) -> None:
        """`pacer`: the workspace pacer of `client`'s session, asked whether a call would
        wait (None: every call has room); `started`: told the session key of each turn
        that starts answering (its queued notice, if any, loses its Stop button)."""
        self._started = started
        # The buttons a complete answer ends with, by session key (Mark resolved).
        self._answer_actions = answer_actions
        self._client = client
        self._config = config
        self._interrupt = interrupt
        self._model_name = model_name
        self._pacer = ThreadPacer()
        self._budget = SlackBudget(pacer, client.token)
        self._background = Background()
        self.closing = ClosingCalls(client, self._background)
        self._memory = WorkspaceMemory()
        self.turns = ActiveTurns()
        self.sessions = AgentSessions(client, self._memory)

    def mode_for(self, team_id: str, channel_id: str) -> StreamingMode:
        """The rendering the next turn in this channel gets."""
        configured = self._config.streaming
        if configured is StreamingMode.AUTO:
            if (
                team_id in self._memory.update_only_teams
                or (team_id, channel_id) in self._memory.update_only_channels
            ):
                return StreamingMode.UPDATE
            return StreamingMode.NATIVE
        return configured

    async def open(
        self, session: SessionInfo, origin: TurnOrigin, messages: TurnMessages
    ) -> Reporter:
        turn = ActiveTurn(
            session_key=session.session_key,
            asker=origin.asker,
            role=session.role,
            team_id=session.team_id,
            channel_id=session.channel_id,
            thread_ts=session.thread_ts,
            turn_id=origin.turn_id,
        )
        self.turns.add(turn)
        if self._started is not None:
            self._started(session.session_key)
        status = StatusIndicator(
            self._client, self._memory, session, origin, reactions=self._config.status_reactions
        )
        await status.start()
        await self.sessions.start_turn(session, origin)
        ctx = TurnContext(
            client=self._client,
            memory=self._memory,
            pacer=self._pacer,
            turns=self.turns,
            turn=turn,
            messages=messages,
            status=status,
            sessions=self.sessions,
            interrupt=self._interrupt,
            model_name=self._model_name,
            closing=self.closing,
            budget=self._budget,
            answer_actions=(
                self._answer_actions(session.session_key) if self._answer_actions else []
            ),
        )
        if self._streams(session):
            native = NativeReporter(ctx)
            refused = await native.start()
            if refused is None:
                return native
            if refused == BUDGET_SPENT:
                _log_degraded(session)
            else:
                self._remember_refusal(session, refused)
        update = UpdateReporter(ctx)
        await update.start()
        return update

    def _streams(self, session: SessionInfo) -> bool:
        """Whether this turn streams natively. A stream's start and stop are Tier 2 (about
        20 a minute per workspace): with no room for them now the turn takes the posted
        rendering (posting is paced per channel only) rather than wait for a stream."""
        if self.mode_for(session.team_id, session.channel_id) is not StreamingMode.NATIVE:
            return False
        if self._budget.room("chat.stopStream"):
            return True  # the start itself takes its slot or refuses at once (`start`)
        _log_degraded(session)
        return False

    async def close(self) -> None:
        """At shutdown, before the Slack session closes: deferred calls are given up here
        (stored with their turns' ends: the next start sends them)."""
        await self._background.close()

    async def settle(self, session: SessionInfo, *, awaiting_approval: bool) -> None:
        if self.turns.by_thread(session.channel_id, session.thread_ts) is not None:
            return  # the running turn shows the status when it ends
        await self.sessions.set(
            session.team_id, session.channel_id, session.thread_ts, idle(awaiting_approval)
        )

    def _remember_refusal(self, session: SessionInfo, code: str) -> None:
        log.warning("chat.startStream refused (%s); using chat.update for this turn", code)
        if self._config.streaming is not StreamingMode.AUTO:
            return
        if code in WORKSPACE_REFUSALS:
            self._memory.update_only_teams.add(session.team_id)
        elif code in CHANNEL_REFUSALS:
            self._memory.update_only_channels.add((session.team_id, session.channel_id))


def _log_degraded(session: SessionInfo) -> None:
    log.info(
        "no room for a stream in the workspace's budget; %s answers in posted messages",
        session.thread_ts,
    )
