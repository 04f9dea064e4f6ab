"""What the agent does with a conversation (its messages are values in `bot/values.py`).

`ConversationStore` is the port the agent persists through; `bot/store` implements it.
`ConversationState` is one turn's in-memory conversation (messages and usage) with a
checkpoint before each round and rollback on error or interruption. `repair_tool_pairs`
and `trim_history` prepare stored history so providers accept it and it fits the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.model.types import Usage
from bot.values import Message, Role


class ConversationStore(Protocol):
    async def append(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        """Persist messages in one commit; returns only when they are durable."""
        ...

    def stage(self, session_id: int, turn_id: str, messages: list[Message]) -> None:
        """Queue messages (in order with `append`) to be committed with the next durable
        write: a round's results ride along with the next round's commit."""
        ...

    async def history(
        self, session_id: int, limit: int, before_turn: str | None = None
    ) -> list[Message]:
        """The last `limit` complete messages of the session, oldest first, each turn's
        messages kept together (a turn interrupted by a newer message may store its repair
        after that message). With `before_turn`, only turns that began before that one."""
        ...

    async def record_usage(
        self, session_id: int, turn_id: str, round_index: int, model: str, usage: Usage
    ) -> None: ...


SYNTHETIC_RESULT = (
    "No result was recorded for this call (its turn ended before it finished); treat it as not run."
)


def _message_chars(message: Message) -> int:
    return (
        len(message.content or "")
        + sum(len(call.name) + len(call.arguments) for call in message.tool_calls)
        + sum(len(block.thinking) for block in message.thinking)
    )


def repair_tool_pairs(messages: list[Message]) -> tuple[list[Message], int]:
    """Pair every assistant tool call with exactly one result, placed right after it.

    A call without a stored result gets a synthetic one; when a call has several results
    (an interruption's placeholder, then the real outcome of an approval decided later),
    the last one wins; results whose call is not in the history are dropped. Returns the
    repaired list and how many changes were made.
    """
    changes = 0
    claimed: set[int] = set()
    out: list[Message] = []
    for index, message in enumerate(messages):
        if message.role is Role.TOOL:
            if index not in claimed:
                changes += 1  # an orphan result: its call is not in the history
            continue
        out.append(message)
        if message.role is not Role.ASSISTANT or not message.tool_calls:
            continue
        ids = {call.id for call in message.tool_calls}
        found: dict[str, int] = {}
        for later in range(index + 1, len(messages)):
            candidate = messages[later]
            if candidate.role is Role.ASSISTANT and ids & {c.id for c in candidate.tool_calls}:
                break  # a later round reusing the same ids: its results are its own
            if candidate.role is Role.TOOL and candidate.tool_call_id in ids:
                found[candidate.tool_call_id or ""] = later  # superseded ones count below
        claimed.update(found.values())
        for call in message.tool_calls:
            position = found.get(call.id)
            if position is None:
                changes += 1
                out.append(
                    Message(Role.TOOL, SYNTHETIC_RESULT, tool_call_id=call.id, tool_name=call.name)
                )
            else:
                out.append(messages[position])
    return out, changes


def _groups(messages: list[Message]) -> list[list[Message]]:
    """Units that are kept or dropped whole: an assistant tool call with its results."""
    groups: list[list[Message]] = []
    for message in messages:
        if message.role is Role.TOOL and groups and groups[-1][0].tool_calls:
            groups[-1].append(message)
        else:
            groups.append([message])
    return groups


def trim_history(
    history: list[Message],
    budget_chars: int,
    *,
    strict: bool,
    reserved_chars: int = 0,
    keep: Message | None = None,
) -> tuple[list[Message], int]:
    """Drop the oldest history until it fits `budget_chars`; returns (kept, dropped count).

    Never splits a tool call from its results, and never drops `keep` (the session's first
    user message). Strict budgets (low tier) also count `reserved_chars` (the system prompt
    and this turn's message) and may drop everything else; soft ones keep the newest unit
    even when it alone is over the budget.
    """
    groups = _groups(history)
    sizes = [sum(_message_chars(m) for m in group) for group in groups]
    pinned = {i for i, group in enumerate(groups) if keep is not None and keep in group}
    available = budget_chars - (reserved_chars if strict else 0)
    total = sum(sizes)
    dropped: set[int] = set()
    for index in range(len(groups)):
        if total <= available:
            break
        if index in pinned or (not strict and index == len(groups) - 1):
            continue
        dropped.add(index)
        total -= sizes[index]
    kept = [m for i, group in enumerate(groups) if i not in dropped for m in group]
    return kept, sum(len(groups[i]) for i in dropped)


@dataclass
class TurnUsage:
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False

    def add(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.estimated = self.estimated or usage.estimated


@dataclass
class ConversationState:
    """One turn's conversation as the model sees it, and what the turn has used.

    `checkpoint()` before each round; `rollback()` drops what the round added to the
    messages when it failed or was interrupted (usage stays: requests sent are counted).
    """

    messages: list[dict[str, Any]]
    usage: TurnUsage = field(default_factory=TurnUsage)
    _mark: int | None = None

    @classmethod
    def start(
        cls, system_prompt: str, history: list[Message], user_message: Message | None
    ) -> ConversationState:
        messages = [{"role": "system", "content": system_prompt}]
        messages += [m.to_openai() for m in history]
        if user_message is not None:
            messages.append(user_message.to_openai())
        return cls(messages)

    def add(self, *messages: Message) -> None:
        self.messages.extend(m.to_openai() for m in messages)

    def checkpoint(self) -> None:
        self._mark = len(self.messages)

    def rollback(self) -> int:
        """Back to the last checkpoint; returns how many messages were dropped."""
        if self._mark is None or self._mark >= len(self.messages):
            return 0
        dropped = len(self.messages) - self._mark
        del self.messages[self._mark :]
        return dropped

    def request_messages(self, system_note: str | None = None) -> list[dict[str, Any]]:
        """The messages for the next request; `system_note` is appended to the system prompt
        for this request only (e.g. the evidence ledger)."""
        messages = list(self.messages)
        if system_note and messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{system_note}"}
        return messages
