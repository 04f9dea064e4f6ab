"""Reading a write's target back, to learn after a crash whether an approved change landed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bot.values import WritePlan


class Readback(Protocol):
    async def applied(self, plan: WritePlan, approval_id: str) -> bool:
        """True only when the target visibly shows the planned change (made for approval
        `approval_id`); False when it does not or cannot be read (the change is then
        reported as not executed)."""
        ...


class ReadbackByTool:
    """The readback of a write's own backend: Kubernetes by default, others by tool (a
    silence is read back from its Alertmanager)."""

    def __init__(self, default: Readback, by_tool: Mapping[str, Readback]) -> None:
        self._default = default
        self._by_tool = dict(by_tool)

    async def applied(self, plan: WritePlan, approval_id: str) -> bool:
        readback = self._by_tool.get(plan.tool, self._default)
        return await readback.applied(plan, approval_id)
