"""Wake-ups: a replica waiting on the shared tables (a turn waiting for its thread, the
heartbeat waiting for interrupts) looks again as soon as another replica's write may
concern it, instead of at its next poll.

The truth stays in the tables: a wake-up only makes the waiter look now, so a lost
notification, or a listener whose connection dropped, costs latency and never correctness
(the poll goes on underneath). On PostgreSQL the writes that matter send NOTIFY inside their
transaction (`notify`: delivered once they are committed, never before) and each replica
LISTENs on one dedicated connection (`PgListener`), reconnecting when it drops. SQLite is
one process: it only polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from sqlalchemy import func, make_url
from sqlmodel import Session, select

from bot.config import sqlalchemy_async_url
from bot.values import Wake

log = logging.getLogger(__name__)

# What a replica's listening connection calls itself in pg_stat_activity.
LISTENER_NAME = "kelpie-wakeups"


def notify(session: Session, wake: Wake) -> None:
    """Inside a write's transaction: on PostgreSQL, wake every replica's `wake` watchers
    once it commits. Nothing on SQLite."""
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        session.exec(select(func.pg_notify(wake.value, "")))


class Watch:
    """One waiter's view of a kind of wake-up, registered before it first looks at the
    table, so a wake-up sent after that look is never missed."""

    def __init__(self) -> None:
        self._woken = asyncio.Event()

    def wake(self) -> None:
        self._woken.set()

    async def wait(self, timeout_s: float) -> bool:
        """Until a wake-up since the last wait, or `timeout_s` (the poll); True if woken."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._woken.wait()
        except TimeoutError:
            return False
        self._woken.clear()
        return True


class Wakeups:
    """Hands wake-ups to this process's watchers. Without a listener feeding it (SQLite),
    a watch's wait is just the poll."""

    def __init__(self) -> None:
        self._watches: dict[Wake, set[Watch]] = {wake: set() for wake in Wake}

    @contextlib.contextmanager
    def watch(self, wake: Wake) -> Iterator[Watch]:
        watch = Watch()
        self._watches[wake].add(watch)
        try:
            yield watch
        finally:
            self._watches[wake].discard(watch)

    def wake(self, *wakes: Wake) -> None:
        """Wake the watchers of `wakes` (none given: all of them)."""
        for wake in wakes or tuple(Wake):
            for watch in self._watches[wake]:
                watch.wake()


class PgListener:
    """LISTENs for every kind of wake-up on one dedicated asyncpg connection and hands them
    to `wakeups`. A dropped connection (seen at once when the server closes it, else by a
    probe every `probe_s`) is opened again after `retry_s`; every watcher is woken then,
    since what was sent meanwhile is lost."""

    def __init__(
        self, url: str, wakeups: Wakeups, *, retry_s: float = 1.0, probe_s: float = 10.0
    ) -> None:
        self._dsn = asyncpg_dsn(url)
        self._wakeups = wakeups
        self._retry_s = retry_s
        self._probe_s = probe_s
        self._task: asyncio.Task[None] | None = None
        self.connections = 0  # how many times it has connected (logs and tests)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kelpie-wakeups")

    async def drain(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        said = 0  # said for this many connections: once per drop, not once per retry
        while True:
            try:
                await self._listen()
            except Exception as error:
                if said <= self.connections:
                    said = self.connections + 1
                    log.warning(
                        "not listening for wake-ups from other replicas (%s): polling until "
                        "the connection is back",
                        type(error).__name__,
                    )
            await asyncio.sleep(self._retry_s)

    async def _listen(self) -> None:
        import asyncpg  # the postgres extra: only a PostgreSQL store gets here

        connection = await asyncpg.connect(
            self._dsn, server_settings={"application_name": LISTENER_NAME}
        )
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _connection: lost.set())
        try:
            for wake in Wake:
                await connection.add_listener(wake.value, self._notified)
            self.connections += 1
            log.info("listening for wake-ups from other replicas")
            self._wakeups.wake()  # what was sent while nobody listened is lost: look again
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._probe_s):
                        await lost.wait()
                if not lost.is_set():  # a silent drop shows when the server is asked
                    async with asyncio.timeout(self._probe_s):
                        await connection.fetchval("SELECT 1")
            raise ConnectionError("the server closed the connection")
        finally:
            connection.terminate()

    def _notified(self, _connection: Any, _pid: int, channel: str, _payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._wakeups.wake(Wake(channel))


def asyncpg_dsn(url: str) -> str:
    """The database URL as asyncpg's own `connect` takes it."""
    parsed = make_url(sqlalchemy_async_url(url)).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)
