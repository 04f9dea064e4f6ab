"""Sharing the event loop during a long run of work that never has to wait.

A coroutine only gives the loop back where it awaits something that is not ready yet. A
model stream read from a fast server (or after a stall) has all its chunks buffered
already, so `async for chunk in stream` never suspends: one answer of a few hundred deltas
held the loop for 40-85 ms (LiteLLM's per-chunk work and ours), while other people's
acknowledgements and the store's commits waited behind it (bench/README.md).
"""

from __future__ import annotations

import asyncio
import time

# Long enough that yielding costs nothing measurable (one loop iteration, about 20 µs), short
# enough that an acknowledgement due meanwhile is not held up.
SLICE_S = 0.005


class LoopShare:
    """`share()` after each unit of work: it yields to the loop once this task has held
    it for `slice_s` since it last did, so others wait at most about one slice."""

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self._slice_s = slice_s
        self._since = time.perf_counter()

    async def share(self) -> None:
        if time.perf_counter() - self._since >= self._slice_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
