"""Other turns' deferred work holding the store's one writer: a long batch of small ops.

Injected through the store's own interface (`Database.defer` / `write`), nothing patched:
`start` queues `count` deferred ops, each taking `step_s` until `finish` lets the rest run at
once, and a durable write behind them whose task is done when the whole batch committed.
With the defaults the batch would hold the writer for a minute.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Database, executing


class LongBatch:
    def __init__(self, count: int = 1200, step_s: float = 0.05) -> None:
        self.count = count
        self.step_s = step_s
        self.ran = 0  # ops applied so far
        self.started = asyncio.Event()
        self._finish = asyncio.Event()

    def start(self, db: Database) -> asyncio.Task[None]:
        """Queue the batch; the task returned is done once it is committed."""
        for _ in range(self.count):
            db.defer(self._op)
        return asyncio.create_task(db.write(executing(text("SELECT 1"))))

    def finish(self) -> None:
        self._finish.set()

    async def _op(self, session: AsyncSession) -> None:
        self.started.set()
        if not self._finish.is_set():
            await asyncio.sleep(self.step_s)
        self.ran += 1
