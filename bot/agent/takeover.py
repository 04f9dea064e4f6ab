"""Turns and deliveries left behind by a process that died, taken over by a live one.

Every replica (a single one included, after a restart) renews its own leases (the
heartbeat, on a timer of its own: no takeover work ever delays it) and, in a loop of its
own, claims what a dead replica left, whose leases expired:
- a turn that was running: closed in its thread with a short note (it is not run again:
  it may have been half way through its tool calls);
- a turn accepted but not started yet: run here, from the stored conversation;
- a delivery acknowledged but never handled: handled here;
- an approved change left without an outcome: reconciled here (read back, never rerun);
- a finished turn's closing Slack calls left for later (its workspace's budget was spent)
  and never sent: sent here, within the budget, so its thread stops showing it at work;
  after a day they are given up (the thread has long moved on).
The heartbeat also hands back the turns here that another replica interrupts: a newer
message there (`slack.on_new_message: interrupt`) or a person's stop pressed there, and
stops the turns here that another replica took over (this one's lease lapsed: the process
stalled). A replica that could not renew for a whole lease stops every turn it runs.
Claims are compare-and-set in the store, so each is taken over by exactly one replica, and
never what this process itself still runs.

Knows no Slack: the notices and the redelivery are ports `app.py` fills in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from bot.agent.continuation import TurnSubmit
from bot.agent.session import AgentSessions
from bot.store.wakeups import Wakeups
from bot.values import (
    OrphanDelivery,
    OrphanTurn,
    PendingClosing,
    TurnInterrupt,
    TurnState,
    Wake,
)

log = logging.getLogger(__name__)

# A finished turn's closing calls still unsent after this are given up.
CLOSING_GIVE_UP = timedelta(days=1)


class Leases(Protocol):
    async def renew(self) -> list[TurnInterrupt]: ...

    async def interrupts(self) -> list[TurnInterrupt]: ...

    async def take_orphans(self) -> list[OrphanTurn]: ...

    async def finish(self, turn_id: str, state: TurnState) -> None: ...

    async def take_closings(self) -> list[PendingClosing]: ...

    def held_turns(self) -> list[TurnInterrupt]: ...

    def release(self, turn_id: str) -> None: ...

    def closing_sent(self, turn_id: str, closed: Sequence[str] = ()) -> None: ...


class Deliveries(Protocol):
    async def take_orphans(self) -> list[OrphanDelivery]: ...


class OrphanNotices(Protocol):
    async def close(self, turn: OrphanTurn) -> None: ...


class Closings(Protocol):
    def resend(self, closing: PendingClosing) -> None:
        """Send them once the budget allows (without holding the heartbeat), then mark
        them sent."""
        ...


class Redelivery(Protocol):
    async def redeliver(self, delivery: OrphanDelivery) -> None: ...


class Reconciler(Protocol):
    async def reconcile(self) -> None:
        """Approved changes left without an outcome by a replica whose lease expired."""
        ...


class Takeover:
    def __init__(
        self,
        leases: Leases,
        deliveries: Deliveries,
        notices: OrphanNotices,
        redelivery: Redelivery,
        agent: AgentSessions,
        submit: TurnSubmit,
        interrupt: Callable[[TurnInterrupt], bool],
        approvals: Reconciler,
        closings: Closings,
    ) -> None:
        self._approvals = approvals
        self._closings = closings
        self._leases = leases
        self._deliveries = deliveries
        self._notices = notices
        self._redelivery = redelivery
        self._agent = agent
        self._submit = submit
        self._interrupt = interrupt
        # The turns already interrupted for another replica: a turn stays flagged in the
        # table until it has ended, and is interrupted once.
        self._handed_over: set[str] = set()

    async def renew(self) -> None:
        self._hand_over(await self._leases.renew())

    def lapsed(self) -> None:
        """The leases could not be renewed for a whole lease: another replica may take
        these turns over now, so they stop here."""
        for turn in self._leases.held_turns():
            if self._interrupt(turn):
                log.warning("turn %s stopped: its lease could not be renewed", turn.turn_id)

    async def take_over(self) -> None:
        for turn in await self._leases.take_orphans():
            try:
                await self._take(turn)
            except Exception:
                log.exception("could not take over turn %s", turn.turn_id)
                # Not held here any longer: its lease lapses and it is taken over again.
                self._leases.release(turn.turn_id)
        for delivery in await self._deliveries.take_orphans():
            try:
                await self._redelivery.redeliver(delivery)
            except Exception:
                log.exception("could not take over delivery %s", delivery.key)
        await self._approvals.reconcile()
        for closing in await self._leases.take_closings():
            self._close_finished(closing)

    def _close_finished(self, closing: PendingClosing) -> None:
        ended = closing.ended_at
        if ended is not None and datetime.now(UTC) - ended > CLOSING_GIVE_UP:
            log.warning(
                "giving up the closing Slack calls of turn %s (ended %s)", closing.turn_id, ended
            )
            self._leases.closing_sent(closing.turn_id)
            return
        log.info("sending the closing Slack calls of finished turn %s", closing.turn_id)
        self._closings.resend(closing)

    async def interrupts(self) -> None:
        """Only the interrupts other replicas asked for (a wake-up said there is one)."""
        self._hand_over(await self._leases.interrupts())

    def _hand_over(self, requests: list[TurnInterrupt]) -> None:
        handed_over = set()
        for request in requests:
            if request.turn_id in self._handed_over or self._interrupt(request):
                handed_over.add(request.turn_id)
                if request.turn_id not in self._handed_over:
                    log.info("turn in %s interrupted from another replica", request.session_key)
        self._handed_over = handed_over

    async def _take(self, turn: OrphanTurn) -> None:
        if turn.state is TurnState.QUEUED and await self._resume(turn):
            log.warning("running turn %s: the replica that accepted it stopped", turn.turn_id)
            return
        if turn.released:
            log.warning("closing turn %s: its end could not be stored here", turn.turn_id)
        else:
            log.warning("closing turn %s: the replica running it stopped", turn.turn_id)
        await self._notices.close(turn)
        await self._leases.finish(turn.turn_id, TurnState.INTERRUPTED)

    async def _resume(self, turn: OrphanTurn) -> bool:
        taken = await self._agent.take_over(turn.session_id, turn.turn_id, turn.asker)
        if taken is None:
            return False
        session_key, body = taken
        self._submit(session_key, body, may_interrupt=False)
        return True


class Heartbeat(Protocol):
    """What a `LeaseKeeper` beats: `Takeover` for `kelpie run`; for `kelpie chat`, only the
    leases of the approved changes it executes."""

    async def renew(self) -> None: ...

    def lapsed(self) -> None:
        """Renewals failed for a whole lease: stop acting on what was held."""
        ...

    async def take_over(self) -> None:
        """What dead replicas left (never run behind the renewals)."""
        ...

    async def interrupts(self) -> None:
        """Between beats, what a wake-up from another replica asked for."""
        ...


class LeaseKeeper:
    """Renews the leases at start and then every third of the lease's lifetime, so a lease
    is renewed twice before it could expire, in a task of its own: taking over what dead
    replicas left (Slack calls that wait for the rate budget, reads of the cluster) runs in
    another task and never delays a renewal. In between, a wake-up from another replica
    (PostgreSQL) hands its interrupts over at once rather than at the next beat. When no
    renewal succeeded for a whole lease, the heartbeat is told its leases lapsed."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        interval_s: float,
        wakeups: Wakeups | None = None,
        *,
        lease_s: float | None = None,
    ) -> None:
        self._heartbeat = heartbeat
        self._interval_s = interval_s
        self._lease_s = lease_s if lease_s is not None else 3 * interval_s
        self._wakeups = wakeups or Wakeups()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._renewing(), name="kelpie-lease-keeper"),
            asyncio.create_task(self._taking_over(), name="kelpie-takeover"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _renewing(self) -> None:
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        with self._wakeups.watch(Wake.INTERRUPT) as woken:
            while True:
                if await self._guarded(self._heartbeat.renew):
                    renewed = loop.time()
                elif loop.time() - renewed >= self._lease_s:
                    self._heartbeat.lapsed()
                due = loop.time() + self._interval_s
                while (left := due - loop.time()) > 0:
                    if await woken.wait(left):
                        await self._guarded(self._heartbeat.interrupts)

    async def _taking_over(self) -> None:
        while True:
            await self._guarded(self._heartbeat.take_over)
            await asyncio.sleep(self._interval_s)

    @staticmethod
    async def _guarded(step: Callable[[], Awaitable[None]]) -> bool:
        try:
            await step()
        except Exception as error:
            # The store is down: a missed beat is not yet a lost lease (three fit in one).
            log.warning("lease heartbeat failed (retrying): %s", error)
            return False
        return True
