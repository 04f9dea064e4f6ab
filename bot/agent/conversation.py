"""Conversation messages in the shape the model takes, plus what we record about them.

`ConversationStore` is the port the agent persists through; `bot/store` implements it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from bot.model.types import ToolCallRequest, Usage


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    slack_user: str | None = None
    slack_ts: str | None = None
    # False for a partial answer of a turn that did not finish: kept for the record only.
    complete: bool = True

    def to_openai(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": str(self.role), "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        if self.role is Role.TOOL:
            message["tool_call_id"] = self.tool_call_id
            message["name"] = self.tool_name
        return message


def tool_calls_to_json(calls: tuple[ToolCallRequest, ...]) -> str | None:
    if not calls:
        return None
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls])


def tool_calls_from_json(text: str | None) -> tuple[ToolCallRequest, ...]:
    if not text:
        return ()
    return tuple(ToolCallRequest(**item) for item in json.loads(text))


@dataclass(frozen=True)
class SessionInfo:
    """The session row as the agent sees it: where the thread lives and what it may do."""

    id: int
    session_key: str
    team_id: str
    channel_id: str
    thread_ts: str
    is_dm: bool
    role: str
    cluster: str
    namespace: str | None
    started_by: str
    created: bool = field(default=False, compare=False)


class ConversationStore(Protocol):
    async def append(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        """Persist messages in one commit; returns only when they are durable."""
        ...

    async def history(self, session_id: int, limit: int) -> list[Message]:
        """The last `limit` complete messages of the session, oldest first."""
        ...

    async def record_usage(
        self, session_id: int, turn_id: str, round_index: int, model: str, usage: Usage
    ) -> None: ...
