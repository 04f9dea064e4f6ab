"""The one writer: every change to the database goes through a single connection, in order.

SQLite allows one writer at a time; several connections writing at once end in "database is
locked" once the busy timeout runs out. So writes are queued here and a single task applies
them. Whatever is queued when it wakes is committed in one transaction (group commit), so a
burst of turns costs few commits, and a transaction never waits on anything but the database.

Two ways in:
- `write(op)` returns once the op is committed (durable) and hands back its result;
- `defer(op)` queues an op whose durability can wait (usage, tool audits, a round's results):
  it rides along with the next durable write, or is committed after `linger_s` at the latest.
  A round of the agent loop therefore costs one commit.

An op is a coroutine function taking the writer's session; it must only talk to the database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

log = logging.getLogger(__name__)

T = TypeVar("T")
Op = Callable[[AsyncSession], Awaitable[T]]


@dataclass
class _Job:
    op: Op[Any]
    future: asyncio.Future[Any] | None  # None: deferred, nobody waits for it


class Writer:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, linger_s: float = 0.5
    ) -> None:
        self._sessions = sessions
        self._linger_s = linger_s
        self._queue: list[_Job] = []
        self._pending = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0  # for the store benchmark

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kelpie-store-writer")

    async def write(self, op: Op[T]) -> T:
        """Apply `op` and commit; returns its result once it is durable. Cancelling the
        caller does not withdraw the op: what was asked to be stored is stored."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._enqueue(_Job(op, future))
        self._urgent.set()
        return await asyncio.shield(future)

    def defer(self, op: Op[Any]) -> None:
        """Queue `op` to be committed with the next durable write (or after the linger)."""
        self._enqueue(_Job(op, None))

    def _enqueue(self, job: _Job) -> None:
        if self._closing:
            raise RuntimeError("the store is closed")
        self.start()
        self._queue.append(job)
        self._pending.set()

    async def close(self) -> None:
        """Commit whatever is queued, then stop."""
        self._closing = True
        self._urgent.set()
        self._pending.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._pending.wait()
            if not self._urgent.is_set():
                try:
                    await asyncio.wait_for(self._urgent.wait(), self._linger_s)
                except TimeoutError:
                    pass
            self._pending.clear()
            self._urgent.clear()
            batch, self._queue = self._queue, []
            if batch:
                await self._commit(batch)
            if self._closing and not self._queue:
                return

    async def _commit(self, batch: list[_Job]) -> None:
        try:
            results = await self._apply(batch)
        except Exception as error:
            if len(batch) > 1:
                # One bad op must not take the others down: apply them one by one.
                for job in batch:
                    await self._commit([job])
                return
            _fail(batch[0], error)
            return
        for job, result in zip(batch, results, strict=True):
            if job.future is not None and not job.future.done():
                job.future.set_result(result)

    async def _apply(self, batch: list[_Job]) -> list[Any]:
        async with self._sessions() as session:
            results = [await job.op(session) for job in batch]
            await session.commit()
        self.commits += 1
        return results


def _fail(job: _Job, error: Exception) -> None:
    if job.future is None:
        log.error("a deferred store write failed: %s", error, exc_info=error)
    elif not job.future.done():
        job.future.set_exception(error)
