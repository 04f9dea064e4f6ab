"""One turn per session at a time: a new message interrupts the running turn or queues.

Knows no Slack: a session key and a coroutine to run are all it needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

TurnBody = Callable[[asyncio.Event], Awaitable[None]]


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    running: asyncio.Task[None] | None = None
    abort: asyncio.Event | None = None
    waiting: int = 0


class TurnScheduler:
    def __init__(self, *, interrupt: bool) -> None:
        self._interrupt = interrupt
        self._slots: dict[str, _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(
        self, session_key: str, body: TurnBody, *, may_interrupt: bool = True
    ) -> asyncio.Task[None]:
        """Run `body` as the session's next turn. A person's new message may interrupt the
        running turn (per config); a resumed turn (`may_interrupt=False`) always waits."""
        slot = self._slots.setdefault(session_key, _Slot())
        if self._interrupt and may_interrupt:
            self.interrupt(session_key)
        task = asyncio.create_task(self._run(session_key, slot, body), name=f"turn:{session_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
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

    def busy(self, session_key: str) -> bool:
        slot = self._slots.get(session_key)
        return bool(slot and slot.running and not slot.running.done())

    async def _run(self, session_key: str, slot: _Slot, body: TurnBody) -> None:
        slot.waiting += 1
        try:
            await slot.lock.acquire()
        finally:
            slot.waiting -= 1
        abort = asyncio.Event()
        slot.abort = abort
        slot.running = asyncio.current_task()
        try:
            await body(abort)
        except asyncio.CancelledError:
            log.info("turn in %s interrupted", session_key)
        except Exception:
            log.exception("turn in %s failed", session_key)
        finally:
            slot.running = None
            slot.abort = None
            slot.lock.release()
            if slot.waiting == 0 and self._slots.get(session_key) is slot:
                del self._slots[session_key]

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait for running turns (used on shutdown and by tests)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
