"""The Stop button (`kelpie_stop`) on a running turn's progress message; Slack's own stop
button on the thread's agent session (`progress.sessions`) goes through `stop` too.

Who may stop: the person who asked, or anyone allowed to approve writes in the channel's
role. A permitted click records who stopped the turn (the reporter says so in the thread),
interrupts it through the scheduler and withdraws the thread's pending approval cards that
this person asked for or may approve. A requester of a waiting card who may not stop the
running turn still withdraws the card; anyone else gets an ephemeral reply naming who may.
The click is acked at once, before any lookup. A click whose replica died before handling
it is dispatched again by another (`REPLAYED`): the turn it meant may be gone, and any turn
running now may have started after it, so the replay interrupts nothing: it withdraws the
cards that were waiting when it was pressed, as the stop would have (never one posted
since), and tells the person to press Stop again if need be, or the thread that it came
late when the thread has moved on since.

With several replicas, the stop may reach one that does not run the turn: the turn's row
(`store.turns`) then says who asked and where it runs, the same permission check applies,
and the running replica is asked through the table to interrupt it (its heartbeat, or a
notification, wakes it: `interrupt_elsewhere`), naming who stopped it; the cards are
withdrawn here. A thread whose turn is accepted but not running yet (queued for a free
slot, on any replica: its notice carries the Stop button too) has that turn stopped in the
table before it runs (`stop_queued`), with the same check and the same sentence.

Does not own: the registry of running turns (`progress.ActiveTurns`) or what the thread
shows afterwards (the reporter).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from bot.config import ApprovalConfig, RoleConfig
from bot.slack import copy
from bot.slack.inbox import REPLAYED, Handled, marking_handled
from bot.slack.people import ApproverDirectory, approver_mentions
from bot.slack.progress import STOP_ACTION_ID, ActiveTurn, ActiveTurns
from bot.slack.progress.common import QUEUED_STOP_BLOCK
from bot.slack.queued import QueuedNotices
from bot.slack.replies import say, whisper
from bot.values import RemoteTurn, SessionInfo, TurnInterrupt, ts_after

log = logging.getLogger(__name__)

Interrupt = Callable[[str], bool]


class Withdraw(Protocol):
    async def __call__(
        self, session_id: int, user: str, *, stop: bool = ..., before: str | None = ...
    ) -> int: ...


class Sessions(Protocol):
    async def find(self, session_key: str) -> SessionInfo | None: ...

    async def activity_ts(self, session_id: int) -> list[str]: ...


class RemoteTurns(Protocol):
    """Turns running on other replicas (`store.turns.TurnRepository`)."""

    async def running_elsewhere(self, session_key: str) -> RemoteTurn | None: ...

    async def request_stop(self, turn_id: str, user: str) -> bool: ...

    async def queued_in(self, session_key: str) -> list[RemoteTurn]: ...

    async def stop_queued(self, turn_id: str, user: str) -> bool: ...


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
        handled: Handled,
        elsewhere: RemoteTurns,
        notices: QueuedNotices,
    ) -> None:
        self._notices = notices
        self._app = app
        self._handled = handled
        self._turns = turns
        self._approvers = approvers
        self._roles = roles
        self._interrupt = interrupt
        self._withdraw = withdraw
        self._sessions = sessions
        self._elsewhere = elsewhere

    def register(self) -> None:
        self._app.action(STOP_ACTION_ID)(marking_handled(self._handled, self._on_stop))

    async def _on_stop(
        self, ack: Callable[[], Awaitable[None]], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        actions = body.get("actions") or [{}]
        session_key = str(actions[0].get("value") or "")
        channel = str((body.get("channel") or {}).get("id") or "")
        thread_ts = (body.get("container") or {}).get("thread_ts")
        client = self._app.client
        if context.get(REPLAYED):
            pressed = actions[0].get("action_ts") or (body.get("container") or {}).get("message_ts")
            await self._replayed_stop(user, session_key, channel, thread_ts, str(pressed or ""))
            return
        # Pressed on a queued turn's notice: a stop before it runs says so there.
        queued = actions[0].get("block_id") == QUEUED_STOP_BLOCK
        notice = (body.get("container") or {}).get("message_ts") if queued else None
        turn = self._turns.get(session_key)
        if turn is not None:
            await self.stop(user, turn)
        elif await self.stop_elsewhere(user, session_key) is not None:
            return
        elif await self.stop_queued(user, session_key, notice) is None:
            await whisper(client, channel, user, copy.TURN_ALREADY_FINISHED, thread_ts)

    async def _replayed_stop(
        self, user: str, session_key: str, channel: str, thread_ts: str | None, pressed: str
    ) -> None:
        """A stop whose replica died before handling it: the turn it meant may be gone and
        any turn running now may have started after it, so it interrupts nothing; it
        withdraws the cards that were waiting when it was pressed, as the stop would have,
        and nothing posted since. Late (the thread moved on since), the thread says so."""
        session = await self._sessions.find(session_key)
        if session is None:
            await whisper(self._app.client, channel, user, copy.STOP_AFTER_RESTART, thread_ts)
            return
        withdrawn = await self._withdraw(session.id, user, stop=True, before=pressed)
        log.info("replayed stop by %s in %s: %d cards withdrawn", user, session_key, withdrawn)
        seen = await self._sessions.activity_ts(session.id)
        if any(ts_after(ts, pressed) for ts in seen) and thread_ts:
            await say(self._app.client, channel, thread_ts, copy.stop_came_late(user))
        else:
            await whisper(self._app.client, channel, user, copy.STOP_AFTER_RESTART, thread_ts)

    async def stop(self, user: str, turn: ActiveTurn) -> bool:
        """Stop `turn`, running here, for `user` (the Stop button, or the agent session's
        stop button in `progress.sessions`): anyone but who may stop it is told who may.
        True when the turn was interrupted."""

        async def here() -> bool:
            turn.stopped_by = user
            return self._interrupt(turn.session_key)

        return await self._stop(user, turn, here)

    async def stop_elsewhere(self, user: str, session_key: str) -> bool | None:
        """Stop the thread's turn running on another replica, as `stop` does; None when no
        turn runs there on any replica."""
        elsewhere = self._elsewhere
        remote = await elsewhere.running_elsewhere(session_key)
        if remote is None:
            return None

        async def there() -> bool:
            return await elsewhere.request_stop(remote.turn_id, user)

        return await self._stop(user, _active(remote), there)

    async def stop_queued(
        self, user: str, session_key: str, notice_ts: str | None = None
    ) -> bool | None:
        """Stop the thread's turns accepted but not running yet (on any replica, this one
        included), with the same check as `stop`: each is marked stopped in the table, so
        its replica never runs it (its claim finds it gone, however long it waits for a
        slot), and the thread says who stopped it, as it would for a running turn: in the
        queued notice pressed (`notice_ts`, its Stop button withdrawn), else in a reply.
        True when one was stopped; None when none is queued."""
        queued = await self._elsewhere.queued_in(session_key)
        if not queued:
            return None
        stopped = False
        for remote in queued:
            stopped |= await self._stop(user, _active(remote), self._queued_stop(remote, user))
        if stopped:
            await self._say_stopped(queued[0], user, notice_ts)
        return stopped

    def _queued_stop(self, remote: RemoteTurn, user: str) -> Callable[[], Awaitable[bool]]:
        async def before_it_runs() -> bool:
            # False: it started meanwhile (a stop pressed now reaches it where it runs).
            return await self._elsewhere.stop_queued(remote.turn_id, user)

        return before_it_runs

    async def _say_stopped(self, turn: RemoteTurn, user: str, notice_ts: str | None) -> None:
        text = copy.stopped_by(user)
        if notice_ts is None:
            await say(self._app.client, turn.channel_id, turn.thread_ts, text)
            return
        await self._notices.stopped(turn.channel_id, notice_ts, text)

    def interrupt_elsewhere(self, request: TurnInterrupt) -> bool:
        """Another replica asked to interrupt a turn running here (a stop pressed there
        names who stopped it, as the thread will say); True when one was running."""
        turn = self._turns.get(request.session_key)
        if turn is not None and request.stopped_by is not None:
            turn.stopped_by = request.stopped_by
        return self._interrupt(request.session_key)

    async def _stop(
        self, user: str, turn: ActiveTurn, interrupt: Callable[[], Awaitable[bool]]
    ) -> bool:
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
        stopped = await interrupt()
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


def _active(remote: RemoteTurn) -> ActiveTurn:
    """A turn of another replica (or not running yet) as a stop sees it."""
    return ActiveTurn(
        remote.session_key,
        remote.asker,
        remote.role,
        remote.team_id,
        remote.channel_id,
        remote.thread_ts,
    )
