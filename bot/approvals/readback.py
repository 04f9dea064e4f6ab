"""Reading a write's target back, to learn after a crash whether an approved change landed."""

from __future__ import annotations

from typing import Protocol

from bot.values import WritePlan


class Readback(Protocol):
    async def applied(self, plan: WritePlan) -> bool:
        """True only when the target visibly shows the planned change; False when it does
        not or cannot be read (the change is then reported as not executed)."""
        ...
