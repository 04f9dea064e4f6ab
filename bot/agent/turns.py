"""One turn per session at a time: a new message interrupts the running turn or queues.
At most `max_running` turns run at once; the others wait their turn fairly by lane (a
channel): lanes take turns, so one busy channel cannot starve the others. A turn that has
to wait is told how many run and wait (`on_queued`), so its thread can show it, and told
again when it stops waiting (it got its slot, or it was dropped), so its thread stops
offering to stop it there.

Caps per person and per lane (`TurnCaps`) bound how many sessions one person, or one
channel, keeps busy at once (running or waiting): `admit` reserves a place before the
message is even stored, so a burst cannot slip past the count, and says which cap a new
one would pass. A message in a session that is already busy for that person is never
refused (it interrupts or queues behind in its own thread).

Knows no Slack: a session key, a lane and a coroutine to run are all it needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

log = logging.getLogger(__name__)

TurnBody = Callable[[asyncio.Event], Awaitable[None]]


class QueuedNotice(Protocol):
    """What a turn's thread shows while it waits for a free slot."""

    async def queued(self, running: int, ahead: int) -> None:
        """The turn has to wait: `running` run, `ahead` wait before it."""

    async def left(self, started: bool) -> None:
        """It waits no more: it got its slot (`started`), or it was dropped (interrupted,
        shut down)."""


MAX_RUNNING = 8


class _Gate:
    """At most `limit` holders; waiters are served lane by lane, round robin."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.running = 0
        self._lanes: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._lanes.values())

    def try_enter(self) -> bool:
        if self.running < self._limit and not self._lanes:
            self.running += 1
            return True
        return False

    def queue(self, lane: str) -> asyncio.Future[None]:
        """A ticket in `lane`'s line (call after `try_enter` said no); done when it is in."""
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lanes.setdefault(lane, deque()).append(ticket)
        return ticket

    def withdraw(self, lane: str, ticket: asyncio.Future[None]) -> None:
        """The ticket's turn is gone (interrupted while waiting)."""
        if ticket.done() and not ticket.cancelled():
            self.leave()  # granted just as it was withdrawn: pass the slot on
            return
        ticket.cancel()
        queue = self._lanes.get(lane)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            if not queue:
                del self._lanes[lane]

    def leave(self) -> None:
        """Free a slot, handing it to the next lane's oldest waiter."""
        while self._lanes:
            lane, queue = self._lanes.popitem(last=False)
            ticket = queue.popleft()
            if queue:
                self._lanes[lane] = queue  # back of the line: the other lanes go first
            if not ticket.done():
                ticket.set_result(None)
                return
        self.running -= 1


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    running: asyncio.Task[None] | None = None
    abort: asyncio.Event | None = None
    # Turns submitted to this slot and not yet done. Counted at submit, not when the task
    # first runs: a turn ending in between must not forget the slot its successor will use
    # (the successor would run unseen by interrupts, beside the thread's next turn).
    submitted: int = 0


class CapReached(StrEnum):
    PERSON = "person"
    LANE = "lane"


@dataclass(frozen=True)
class Busy:
    """Why a turn was not admitted: the cap it would pass, and that cap's size."""

    cap: CapReached
    limit: int


@dataclass(frozen=True)
class TurnCaps:
    """Sessions one person / one lane may keep busy at once; None: no cap."""

    per_person: int | None = None
    per_lane: int | None = None


class _Busy:
    """Which people keep which sessions busy (turns admitted and not finished), by lane."""

    def __init__(self, caps: TurnCaps) -> None:
        self._caps = caps
        self._people: dict[str, Counter[str]] = {}  # session key -> person -> turns
        self._lanes: dict[str, str] = {}  # session key -> lane

    def over(self, session_key: str, person: str, lane: str) -> Busy | None:
        people = self._people.get(session_key)
        if people is not None and people[person]:
            return None  # already busy there: the new message stays in its thread
        per_person, per_lane = self._caps.per_person, self._caps.per_lane
        if per_person is not None:
            mine = sum(1 for counts in self._people.values() if counts[person])
            if mine >= per_person:
                return Busy(CapReached.PERSON, per_person)
        if per_lane is not None and people is None:
            if sum(1 for key in self._people if self._lanes[key] == lane) >= per_lane:
                return Busy(CapReached.LANE, per_lane)
        return None

    def add(self, session_key: str, person: str, lane: str) -> None:
        self._people.setdefault(session_key, Counter())[person] += 1
        self._lanes[session_key] = lane

    def remove(self, session_key: str, person: str) -> None:
        people = self._people.get(session_key)
        if people is None or not people[person]:
            return
        people[person] -= 1
        if not +people:
            del self._people[session_key]
            del self._lanes[session_key]


class TurnScheduler:
    def __init__(
        self, *, interrupt: bool, max_running: int = MAX_RUNNING, caps: TurnCaps | None = None
    ) -> None:
        self._interrupt = interrupt
        self._slots: dict[str, _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate = _Gate(max_running)
        self._busy = _Busy(caps or TurnCaps())

    def admit(self, session_key: str, person: str, lane: str) -> Busy | None:
        """Reserve a place for `person`'s next turn in the session, or say which cap it
        would pass. An admitted turn is `submit`ted with `person` (its end frees the place)
        or, if it never runs, `release`d."""
        over = self._busy.over(session_key, person, lane)
        if over is None:
            self._busy.add(session_key, person, lane)
        return over

    def release(self, session_key: str, person: str) -> None:
        self._busy.remove(session_key, person)

    async def reserve(self, session_key: str) -> bool:
        """Hold the session and a running place for a turn about to be submitted, when
        nothing is submitted in the session and a place is free now: that turn will start
        at once, so its store may record it running already. Then `submit(...,
        reserved=True)` uses the hold, or `unreserve` gives it back."""
        if session_key in self._slots or not self._gate.try_enter():
            return False
        slot = self._slots[session_key] = _Slot(submitted=1)
        # A new slot's lock is free: taken without a pause, before any other turn of the
        # session can line up for it (one that did would wait behind a claim it blocks).
        await slot.lock.acquire()
        return True

    def unreserve(self, session_key: str) -> None:
        """The reserved turn will not be submitted."""
        slot = self._slots[session_key]
        slot.lock.release()
        self._gate.leave()
        self._done(session_key, slot)

    def submit(
        self,
        session_key: str,
        body: TurnBody,
        *,
        may_interrupt: bool = True,
        lane: str | None = None,
        on_queued: QueuedNotice | None = None,
        person: str | None = None,
        reserved: bool = False,
    ) -> asyncio.Task[None]:
        """Run `body` as the session's next turn. A person's new message may interrupt the
        running turn (per config); a resumed turn (`may_interrupt=False`) always waits.
        `lane` (default: the session) is what waiting turns take turns by; `person` is who
        `admit` reserved the place for; `reserved`: the turn `reserve` held the session for."""
        slot = self._slots.setdefault(session_key, _Slot())
        if self._interrupt and may_interrupt:
            self.interrupt(session_key)
        run = self._run(session_key, slot, body, lane or session_key, on_queued, held=reserved)
        task = asyncio.create_task(run, name=f"turn:{session_key}")
        if not reserved:
            slot.submitted += 1
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _task: self._done(session_key, slot))
        if person is not None:
            task.add_done_callback(lambda _task: self.release(session_key, person))
        return task

    def interrupt(self, session_key: str) -> bool:
        """Abort the running turn of a session, if any; True when one was running."""
        slot = self._slots.get(session_key)
        if slot is None or slot.running is None or slot.running.done():
            return False
        if slot.abort is not None:
            slot.abort.set()
        slot.running.cancel()
        return True

    def _done(self, session_key: str, slot: _Slot) -> None:
        slot.submitted -= 1
        if slot.submitted == 0 and self._slots.get(session_key) is slot:
            del self._slots[session_key]

    def busy(self, session_key: str) -> bool:
        slot = self._slots.get(session_key)
        return bool(slot and slot.running and not slot.running.done())

    async def _run(
        self,
        session_key: str,
        slot: _Slot,
        body: TurnBody,
        lane: str,
        on_queued: QueuedNotice | None,
        *,
        held: bool = False,
    ) -> None:
        if not held:  # held: `reserve` took the lock and the running place already
            await slot.lock.acquire()
        abort = asyncio.Event()
        slot.abort = abort
        # Running from here on, as far as an interruption is concerned: a newer message
        # also supersedes a turn still waiting for a slot.
        slot.running = asyncio.current_task()
        entered = held
        try:
            if not held:
                entered = await self._enter(lane, on_queued)
            await body(abort)
        except asyncio.CancelledError:
            log.info("turn in %s interrupted", session_key)
        except Exception:
            log.exception("turn in %s failed", session_key)
        finally:
            if entered:
                self._gate.leave()
            slot.running = None
            slot.abort = None
            slot.lock.release()

    async def _enter(self, lane: str, on_queued: QueuedNotice | None) -> bool:
        if self._gate.try_enter():
            return True
        ticket = self._gate.queue(lane)
        granted = False
        try:
            if on_queued is not None:
                await self._notify(on_queued, self._gate.waiting - 1)
            await ticket
            granted = True
        except asyncio.CancelledError:
            self._gate.withdraw(lane, ticket)
            raise
        finally:
            if on_queued is not None:
                self._left(on_queued, granted)
        return True

    async def _notify(self, on_queued: QueuedNotice, ahead: int) -> None:
        try:
            await on_queued.queued(self._gate.running, ahead)
        except Exception:  # a notice that fails must not cost the turn its place
            log.exception("could not show that a turn is queued")

    def _left(self, on_queued: QueuedNotice, started: bool) -> None:
        """Told beside the turn, which does not wait for it (nor does a drop)."""

        async def tell() -> None:
            try:
                await on_queued.left(started)
            except Exception:
                log.exception("could not show that a turn no longer waits")

        task = asyncio.create_task(tell(), name="turn:left-queue")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait for running turns (used on shutdown and by tests)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
