"""Other turns' deferred work holding the store's one writer: a long batch of small ops.

Injected through the store's own interface (`Database.defer` / `write`), nothing patched:
`start` queues `count` deferred ops, each taking `step_s` until `finish` lets the rest run at
once, and a durable write behind them whose task is done when the whole batch committed.
With the defaults the batch would hold the writer for a minute.

The ops run where the writer applies its transactions: on SQLite its own thread (where an
op simply sleeps), on PostgreSQL the event loop (where the server sleeps, so the loop stays
free). Hence thread-safe events.
"""

from __future__ import annotations

import asyncio
import threading
import time

from sqlalchemy import text
from sqlmodel import Session

from bot.store.db import Database, executing


class LongBatch:
    def __init__(self, count: int = 1200, step_s: float = 0.05) -> None:
        self.count = count
        self.step_s = step_s
        self.ran = 0  # ops applied so far
        self._started = threading.Event()
        self._finish = threading.Event()

    def start(self, db: Database) -> asyncio.Task[None]:
        """Queue the batch; the task returned is done once it is committed."""
        for _ in range(self.count):
            db.defer(self._op)
        return asyncio.create_task(db.write(executing(text("SELECT 1"))))

    async def started(self) -> None:
        """Until the writer applies the batch's first op."""
        while not self._started.is_set():
            await asyncio.sleep(0.01)

    def finish(self) -> None:
        self._finish.set()

    def _op(self, session: Session) -> None:
        self._started.set()
        if not self._finish.is_set():
            assert session.bind is not None
            if session.bind.dialect.name == "postgresql":
                session.connection().execute(text("SELECT pg_sleep(:s)"), {"s": self.step_s})
            else:
                time.sleep(self.step_s)
        self.ran += 1
