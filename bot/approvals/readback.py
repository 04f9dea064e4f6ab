"""Reading a write's target back, to learn after a crash whether an approved change landed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bot.values import Landed, WritePlan


class Readback(Protocol):
    async def applied(self, plan: WritePlan, approval_id: str) -> Landed:
        """APPLIED only when the target visibly shows the planned change (made for approval
        `approval_id`), NOT_APPLIED when it visibly does not, UNKNOWN when nothing read
        tells (the person is then asked to check, never told it did not run)."""
        ...


class ReadbackByTool:
    """The readback of a write's own backend: Kubernetes by default (UNKNOWN for a target
    it does not read: another MCP server's call), others by tool (a silence is read back
    from its Alertmanager)."""

    def __init__(self, default: Readback, by_tool: Mapping[str, Readback]) -> None:
        self._default = default
        self._by_tool = dict(by_tool)

    async def applied(self, plan: WritePlan, approval_id: str) -> Landed:
        readback = self._by_tool.get(plan.tool, self._default)
        return await readback.applied(plan, approval_id)
