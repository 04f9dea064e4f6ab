"""The one writer: every change to the database goes through a single connection, in order.

SQLite allows one writer at a time; several connections writing at once end in "database is
locked" once the busy timeout runs out. So writes are queued here and a single task applies
them. Whatever is queued when it wakes is committed in one transaction (group commit), so a
burst of turns costs few commits, and a transaction never waits on anything but the database.

Three ways in:
- `write(op)` returns once the op is committed (durable) and hands back its result;
- `defer(op)` queues an op whose durability can wait (usage, tool audits, a round's results):
  it rides along with the next durable write, or is committed after `linger_s` at the latest.
  A round of the agent loop therefore costs one commit;
- `write_ahead(op)` is `write` for what a person is waiting on (a delivery's inbox record,
  which Slack wants acknowledged at once): it goes in a small transaction of its own ahead of
  everything queued, and a batch being applied is cut short for it (what is applied is
  committed, the rest goes back to the front of the queue), so it waits for at most one op
  of other turns' work, never for their whole batch. Only for an op that depends on nothing
  queued before it and that nothing queued depends on (an insert of its own row).

An op is a plain function taking the writer's (synchronous) session; it must only talk to the
database. A transaction's ops run together in one call of `Transactions.run`: on SQLite that
is one hop to the writer's own thread for the whole transaction (through aiosqlite every
statement cost three or four hops to its thread and back, each waiting its turn on a busy
event loop); on PostgreSQL the same code runs on the event loop through SQLAlchemy's
`run_sync` (asyncpg has no thread to hop to).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection
from sqlmodel import Session

log = logging.getLogger(__name__)

T = TypeVar("T")
Op = Callable[[Session], T]


class Transactions(Protocol):
    """Runs `work` in one transaction of the writer's connection, committed when it returns
    (rolled back when it raises)."""

    async def run(self, work: Callable[[Connection], T]) -> T: ...


@dataclass
class _Job:
    op: Op[Any]
    future: asyncio.Future[Any] | None  # None: deferred, nobody waits for it


class Writer:
    def __init__(self, transactions: Transactions, *, linger_s: float = 0.5) -> None:
        self._transactions = transactions
        self._linger_s = linger_s
        self._queue: list[_Job] = []
        self._ahead: list[_Job] = []  # write_ahead's jobs: the next transaction, on their own
        # When the queue must be committed at the latest (loop time): its first job's linger.
        # A deadline, not a timer restarted on each wake-up, so a run of write_ahead jobs
        # cannot hold deferred work back.
        self._due: float | None = None
        self._pending = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._applying = False
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

    async def write_ahead(self, op: Op[T]) -> T:
        """`write`, ahead of everything queued, in a transaction of its own (see above)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._enqueue(_Job(op, future), self._ahead)
        self._urgent.set()
        return await asyncio.shield(future)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being committed (what a test waits for before it
        counts what a turn cost)."""
        return not self._queue and not self._ahead and not self._applying

    def defer(self, op: Op[Any]) -> None:
        """Queue `op` to be committed with the next durable write (or after the linger)."""
        self._enqueue(_Job(op, None))

    def _enqueue(self, job: _Job, lane: list[_Job] | None = None) -> None:
        if self._closing:
            raise RuntimeError("the store is closed")
        self.start()
        if lane is None:
            if not self._queue:
                self._due = asyncio.get_running_loop().time() + self._linger_s
            self._queue.append(job)
        else:
            lane.append(job)
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
            if not self._urgent.is_set() and self._due is not None:
                linger = self._due - asyncio.get_running_loop().time()
                try:
                    await asyncio.wait_for(self._urgent.wait(), max(linger, 0))
                except TimeoutError:
                    pass
            ahead = bool(self._ahead)
            batch = self._take()
            if batch:
                self._applying = True
                try:
                    await self._commit(batch, cut=not ahead)
                finally:
                    self._applying = False
            if self._closing and not self._queue and not self._ahead:
                return

    def _take(self) -> list[_Job]:
        """The next transaction's jobs: the ahead lane's if any, else the whole queue. The
        flags are left set for what stays queued: a durable write still waiting must not
        linger."""
        if self._ahead:
            batch, self._ahead = self._ahead, []
        else:
            batch, self._queue, self._due = self._queue, [], None
        if not self._queue:
            self._pending.clear()
        if not self._closing and not any(job.future is not None for job in self._queue):
            self._urgent.clear()
        return batch

    async def _commit(self, batch: list[_Job], *, cut: bool = False) -> None:
        try:
            results = await self._apply(batch, cut=cut)
        except Exception as error:
            if len(batch) > 1:
                # One bad op must not take the others down: apply them one by one.
                for job in batch:
                    await self._commit([job])
                return
            _fail(batch[0], error)
            return
        done, rest = batch[: len(results)], batch[len(results) :]
        if rest:  # cut short for the ahead lane: the rest is due right after it, in order
            self._queue[:0] = rest
            self._due = asyncio.get_running_loop().time()
            self._pending.set()
        for job, result in zip(done, results, strict=True):
            if job.future is not None and not job.future.done():
                job.future.set_result(result)

    async def _apply(self, batch: list[_Job], *, cut: bool) -> list[Any]:
        """Apply `batch` in order and commit; with `cut`, stops early (after at least one
        op) when a write_ahead job is waiting. Returns the results of the ops applied."""

        def work(connection: Connection) -> list[Any]:
            # On the writer's thread (SQLite): `_ahead` is only read here, a list's length
            # is safe to read across threads, and a job seen late merely waits one batch.
            with Session(bind=connection) as session:
                results: list[Any] = []
                for job in batch:
                    if cut and results and self._ahead:
                        break
                    results.append(job.op(session))
                session.flush()  # what an op added through the ORM (rare: not the hot path)
            return results

        results = await self._transactions.run(work)
        self.commits += 1
        return results


def _fail(job: _Job, error: Exception) -> None:
    if job.future is None:
        log.error("a deferred store write failed: %s", error, exc_info=error)
    elif not job.future.done():
        job.future.set_exception(error)
