"""Retrying what must land: a write on a briefly locked store, a card Slack refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from bot.errors import Undeliverable

log = logging.getLogger(__name__)

T = TypeVar("T")

# Pauses between attempts (with SQLite's busy timeout in each attempt, ~8 s in all).
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 4.0)


async def retrying(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    delays: Sequence[float] = RETRY_DELAYS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """`attempt()` until it succeeds, pausing `delays` between tries; the last error raises,
    and so does a refusal for good (`Undeliverable`) at once: no later try gets through."""
    for delay in (*delays, None):
        try:
            return await attempt()
        except Undeliverable:
            raise
        except Exception:
            if delay is None:
                raise
            log.warning("%s failed; retrying in %.1f s", what, delay, exc_info=True)
            await sleep(delay)
    raise AssertionError("unreachable")
