"""The buttons under a complete answer: Record (the incident record, #32) and, when
memory is on, Mark resolved (a proposed memory, #32), in one actions block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.slack.memory import mark_resolved_button
from bot.slack.record import record_button

Json = dict[str, Any]


def answer_buttons(*, mark_resolved: bool) -> Callable[[str], list[Json]]:
    """The blocks for a thread's session key; Slack matches each click by its action_id."""

    def blocks(session_key: str) -> list[Json]:
        elements = [record_button(session_key)]
        if mark_resolved:
            elements.append(mark_resolved_button(session_key))
        return [{"type": "actions", "block_id": f"answer:{session_key}", "elements": elements}]

    return blocks
