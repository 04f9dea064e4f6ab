"""Feedback on answers: a click on an answer's 👍/👎 (Slack's `feedback_buttons`) is stored
once per person per answer and audited (a log line naming who rated which turn how); a 👎
is answered with an ephemeral message asking what was wrong, whose button opens a modal
(views.open, with that click's trigger_id: Slack's way to take text from one person
without a message in the thread); what they type is masked and stored on their row. After
a first 👎 is answered, `on_negative` captures what the turn read (`feedback.capture`).

Does not own what the buttons look like (`feedback_buttons`) or the table (`store.feedback`);
`kelpie eval export` reads what is stored here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from bot.model.outbound import mask_text_async
from bot.slack import copy
from bot.slack.feedback_buttons import FEEDBACK_ACTION_ID, Rating, parse_rating
from bot.slack.inbox import REPLAYED, Handled, marking_handled
from bot.slack.progress.common import SLACK_FAILURES, error_code
from bot.slack.replies import whisper
from bot.values import Feedback, FeedbackValue

log = logging.getLogger(__name__)

TELL_ACTION_ID = "kelpie_feedback_tell"
REASON_CALLBACK_ID = "kelpie_feedback_reason"
REASON_BLOCK_ID = "reason"
REASON_ACTION_ID = "reason_text"
REASON_MAX_CHARS = 2000


class FeedbackStore(Protocol):
    async def record(self, feedback: Feedback, at: datetime) -> bool: ...

    async def add_reason(self, turn_id: str, user: str, reason: str, at: datetime) -> bool: ...


# Told of each first 👎 (after it was stored and answered): captures what the turn read.
OnNegative = Callable[[Feedback], Awaitable[None]]


class FeedbackClicks:
    def __init__(
        self,
        app: AsyncApp,
        store: FeedbackStore,
        handled: Handled,
        now: Callable[[], datetime],
        on_negative: OnNegative | None = None,
    ) -> None:
        self._app = app
        self._store = store
        self._handled = handled
        self._now = now
        self._on_negative = on_negative

    def register(self) -> None:
        self._app.action(FEEDBACK_ACTION_ID)(marking_handled(self._handled, self._on_rating))
        self._app.action(TELL_ACTION_ID)(marking_handled(self._handled, self._on_tell))
        self._app.view(REASON_CALLBACK_ID)(marking_handled(self._handled, self._on_reason))

    async def _on_rating(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        where = _where(body)
        rating = parse_rating(((body.get("actions") or [{}])[0]).get("value"))
        if where is None or rating is None:
            log.warning("ignoring a malformed feedback click")
            return
        team, channel, thread_ts, message_ts, user = where
        feedback = Feedback(
            team,
            channel,
            thread_ts,
            rating.turn_id,
            message_ts,
            user,
            rating.value,
            rating.evidence,
        )
        try:
            first = await self._store.record(feedback, self._now())
        except Exception as error:
            log.error("could not store feedback on turn %s: %s", rating.turn_id, error)
            await whisper(self._app.client, channel, user, copy.FEEDBACK_NOT_STORED, thread_ts)
            return
        log.info(
            "audit: feedback %s on turn %s in %s/%s by %s%s",
            rating.value,
            rating.turn_id,
            channel,
            thread_ts,
            user,
            "" if first else " (already rated: not stored again)",
        )
        # A click replayed after a crash may have been stored before it: answer it as new.
        first = first or bool(context.get(REPLAYED))
        await self._answer(rating, first, channel, user, thread_ts)
        if first and rating.value is FeedbackValue.NEGATIVE and self._on_negative is not None:
            await self._on_negative(feedback)

    async def _answer(
        self, rating: Rating, first: bool, channel: str, user: str, thread_ts: str
    ) -> None:
        client = self._app.client
        if not first:
            await whisper(client, channel, user, copy.FEEDBACK_ALREADY, thread_ts)
        elif rating.value is FeedbackValue.POSITIVE:
            await whisper(client, channel, user, copy.FEEDBACK_THANKS, thread_ts)
        else:
            await _ask_why(client, channel, user, thread_ts, rating.turn_id)

    async def _on_tell(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        where = _where(body)
        turn_id = ((body.get("actions") or [{}])[0]).get("value")
        trigger = body.get("trigger_id")
        if where is None or not isinstance(turn_id, str) or not isinstance(trigger, str):
            log.warning("ignoring a malformed feedback reason click")
            return
        _, channel, thread_ts, _, user = where
        metadata = json.dumps({"turn_id": turn_id, "channel": channel, "thread_ts": thread_ts})
        try:
            await self._app.client.views_open(trigger_id=trigger, view=reason_modal(metadata))
        except SLACK_FAILURES as error:
            log.warning("could not open the feedback form for %s: %s", user, error_code(error))

    async def _on_reason(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        view = body.get("view") or {}
        user = str((body.get("user") or {}).get("id") or "")
        text = _typed(view).strip()
        if not text:
            await ack(
                response_action="errors", errors={REASON_BLOCK_ID: copy.FEEDBACK_REASON_EMPTY}
            )
            return
        await ack()
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
        except json.JSONDecodeError:
            meta = {}
        turn_id, channel = str(meta.get("turn_id") or ""), str(meta.get("channel") or "")
        thread_ts = meta.get("thread_ts") if isinstance(meta.get("thread_ts"), str) else None
        masked, _ = await mask_text_async(text[:REASON_MAX_CHARS], "feedback")
        try:
            stored = await self._store.add_reason(turn_id, user, masked, self._now())
        except Exception as error:
            log.error("could not store the reason of feedback on turn %s: %s", turn_id, error)
            await whisper(self._app.client, channel, user, copy.FEEDBACK_NOT_STORED, thread_ts)
            return
        log.info(
            "audit: feedback reason on turn %s by %s (%d characters)", turn_id, user, len(text)
        )
        said = copy.FEEDBACK_REASON_THANKS if stored else copy.FEEDBACK_REASON_MISSING
        await whisper(self._app.client, channel, user, said, thread_ts)


async def _ask_why(client: Any, channel: str, user: str, thread_ts: str, turn_id: str) -> None:
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": copy.FEEDBACK_ASK_WHY}},
        {
            "type": "actions",
            "block_id": "kelpie_feedback_tell",
            "elements": [
                {
                    "type": "button",
                    "action_id": TELL_ACTION_ID,
                    "text": {"type": "plain_text", "text": copy.FEEDBACK_TELL_BUTTON},
                    "value": turn_id,
                }
            ],
        },
    ]
    try:
        await client.chat_postEphemeral(
            channel=channel,
            user=user,
            text=copy.FEEDBACK_ASK_WHY,
            blocks=blocks,
            thread_ts=thread_ts,
        )
    except SLACK_FAILURES as error:
        log.warning("could not ask %s what was wrong: %s", user, error_code(error))


def reason_modal(private_metadata: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": REASON_CALLBACK_ID,
        "private_metadata": private_metadata,
        "title": {"type": "plain_text", "text": copy.FEEDBACK_MODAL_TITLE},
        "submit": {"type": "plain_text", "text": copy.FEEDBACK_MODAL_SUBMIT},
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK_ID,
                "label": {"type": "plain_text", "text": copy.FEEDBACK_MODAL_LABEL},
                "hint": {"type": "plain_text", "text": copy.FEEDBACK_MODAL_HINT},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_ACTION_ID,
                    "multiline": True,
                    "max_length": REASON_MAX_CHARS,
                },
            }
        ],
    }


def _typed(view: dict[str, Any]) -> str:
    values = (view.get("state") or {}).get("values") or {}
    entry = (values.get(REASON_BLOCK_ID) or {}).get(REASON_ACTION_ID) or {}
    value = entry.get("value")
    return value if isinstance(value, str) else ""


def _where(body: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
    """(team, channel, thread_ts, message_ts, user) of a click, or None when malformed."""
    user = (body.get("user") or {}).get("id")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
    channel = (body.get("channel") or {}).get("id")
    container = body.get("container") or {}
    message_ts = container.get("message_ts")
    thread_ts = container.get("thread_ts") or message_ts
    fields = [team, channel, thread_ts, message_ts, user]
    if not all(isinstance(field, str) and field for field in fields):
        return None
    return str(team), str(channel), str(thread_ts), str(message_ts), str(user)
