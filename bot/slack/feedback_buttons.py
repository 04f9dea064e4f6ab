"""Slack's feedback buttons on an answer: the `context_actions` block with one
`feedback_buttons` element, and what a click's value says (which answer, 👍 or 👎, the
evidence it cited). The value carries the turn so a click needs no lookup to know what it
rates; Slack signs the payload, so a person cannot forge it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.slack import copy
from bot.values import FeedbackValue

FEEDBACK_ACTION_ID = "kelpie_feedback"
FEEDBACK_BLOCK_PREFIX = "kelpie_feedback:"
# Slack's limit on a feedback button's value.
VALUE_LIMIT = 2000


@dataclass(frozen=True)
class Rating:
    """What a click on the feedback buttons rates."""

    value: FeedbackValue
    turn_id: str
    evidence: tuple[str, ...]


def feedback_block(turn_id: str, evidence: list[str]) -> dict[str, Any]:
    """The buttons under the answer of `turn_id` (block_id unique per answer, as Slack asks)."""
    return {
        "type": "context_actions",
        "block_id": f"{FEEDBACK_BLOCK_PREFIX}{turn_id}",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION_ID,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "👍"},
                    "accessibility_label": copy.FEEDBACK_POSITIVE_LABEL,
                    "value": _value(FeedbackValue.POSITIVE, turn_id, evidence),
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "👎"},
                    "accessibility_label": copy.FEEDBACK_NEGATIVE_LABEL,
                    "value": _value(FeedbackValue.NEGATIVE, turn_id, evidence),
                },
            }
        ],
    }


def _value(value: FeedbackValue, turn_id: str, evidence: list[str]) -> str:
    head = f"{value}:{turn_id}:"
    refs: list[str] = []
    for ref in evidence:
        if len(head) + len(",".join([*refs, ref])) > VALUE_LIMIT:
            break
        refs.append(ref)
    return head + ",".join(refs)


def parse_rating(raw: object) -> Rating | None:
    """The rating a button value says, or None for a value kelpie did not write."""
    if not isinstance(raw, str):
        return None
    parts = raw.split(":", 2)
    if len(parts) != 3 or not parts[1]:
        return None
    try:
        value = FeedbackValue(parts[0])
    except ValueError:
        return None
    evidence = tuple(ref for ref in parts[2].split(",") if ref)
    return Rating(value, parts[1], evidence)
