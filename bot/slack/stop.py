"""The Stop button (`kelpie_stop`) on a running turn's progress message; Slack's own stop
button on the thread's agent session (`progress.sessions`) goes through `stop` too.

Who may stop: the person who asked, or anyone allowed to approve writes in the channel's
role. A permitted click records who stopped the turn (the reporter says so in the thread),
interrupts it through the scheduler and withdraws the thread's pending approval cards that
this person asked for or may approve. A requester of a waiting card who may not stop the
running turn still withdraws the card; anyone else gets an ephemeral reply naming who may.
The click is acked at once, before any lookup.

Does not own: the registry of running turns (`progress.ActiveTurns`) or what the thread
shows afterwards (the reporter).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ApprovalConfig, RoleConfig
from bot.slack import copy
from bot.slack.people import ApproverDirectory, approver_mentions
from bot.slack.progress import STOP_ACTION_ID, ActiveTurn, ActiveTurns
from bot.slack.replies import whisper
from bot.values import SessionInfo

log = logging.getLogger(__name__)

Interrupt = Callable[[str], bool]


class Withdraw(Protocol):
    async def __call__(self, session_id: int, user: str, *, stop: bool = ...) -> int: ...


class Sessions(Protocol):
    async def find(self, session_key: str) -> SessionInfo | None: ...


class StopHandler:
    def __init__(
        self,
        app: AsyncApp,
        turns: ActiveTurns,
        approvers: ApproverDirectory,
        roles: Mapping[str, RoleConfig],
        interrupt: Interrupt,
        withdraw: Withdraw,
        sessions: Sessions,
    ) -> None:
        self._app = app
        self._turns = turns
        self._approvers = approvers
        self._roles = roles
        self._interrupt = interrupt
        self._withdraw = withdraw
        self._sessions = sessions

    def register(self) -> None:
        self._app.action(STOP_ACTION_ID)(self._on_stop)

    async def _on_stop(
        self, ack: Callable[[], Awaitable[None]], body: dict[str, Any], client: AsyncWebClient
    ) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        actions = body.get("actions") or [{}]
        session_key = str(actions[0].get("value") or "")
        channel = str((body.get("channel") or {}).get("id") or "")
        thread_ts = (body.get("container") or {}).get("thread_ts")
        turn = self._turns.get(session_key)
        if turn is None:
            await whisper(client, channel, user, copy.TURN_ALREADY_FINISHED, thread_ts)
            return
        await self.stop(user, turn)

    async def stop(self, user: str, turn: ActiveTurn) -> bool:
        """Stop `turn` for `user` (the Stop button, or the agent session's stop button in
        `progress.sessions`): anyone but who may stop it is told who may. True when the
        turn was interrupted."""
        if not await self.may_stop(user, turn):
            # Who asked for a waiting change may withdraw it, even from a turn they may not
            # stop (someone else's question in the same thread): the card says who did.
            if await self._withdraw_cards(turn.session_key, user):
                return False
            approval = self._approval(turn)
            approvers = approver_mentions(approval) if approval is not None else []
            text = copy.who_may_stop(turn.asker, approvers)
            await whisper(self._app.client, turn.channel_id, user, text, turn.thread_ts)
            return False
        turn.stopped_by = user
        stopped = self._interrupt(turn.session_key)
        if stopped:
            log.info("turn in %s stopped by %s", turn.session_key, user)
        else:
            log.info("stop by %s: the turn in %s had already ended", user, turn.session_key)
        await self._withdraw_cards(turn.session_key, user)
        return stopped

    async def _withdraw_cards(self, session_key: str, user: str) -> int:
        """Withdraws the session's pending cards this person asked for or may approve."""
        session = await self._sessions.find(session_key)
        if session is None:
            return 0
        return await self._withdraw(session.id, user, stop=True)

    async def may_stop(self, user: str, turn: ActiveTurn) -> bool:
        if user == turn.asker:
            return True
        approval = self._approval(turn)
        return approval is not None and await self._approvers.is_approver(user, approval)

    def _approval(self, turn: ActiveTurn) -> ApprovalConfig | None:
        role = self._roles.get(turn.role)
        return role.approval if role is not None else None
