"""The value every pipeline stage returns, and what a call carries through the pipeline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.config import RoleConfig
from bot.toolsets.spec import Tool, ToolContext
from bot.values import Decision


@dataclass(frozen=True)
class CallScope:
    """Who is asking, from where, with which role: fixed for the whole turn."""

    session_id: int
    session_key: str
    channel_id: str
    slack_user: str
    role_name: str
    role: RoleConfig
    tool_context: ToolContext
    # The tools offered to the model this turn, by name; anything else is denied.
    offered: frozenset[str]
    abort: asyncio.Event = field(default_factory=asyncio.Event, compare=False)
    user_request: str = ""
    turn_id: str = ""


@dataclass(frozen=True)
class ToolInvocation:
    """One validated-enough call: the tool exists and its arguments are a JSON object."""

    tool_call_id: str
    tool: Tool
    args: dict[str, Any]
    scope: CallScope

    @property
    def namespace(self) -> str | None:
        return self.tool.target_namespace(self.args, self.scope.tool_context)


class Stage(Protocol):
    """One pipeline stage: a name for audits and progress, one check."""

    name: str

    async def check(self, call: ToolInvocation) -> Decision: ...
