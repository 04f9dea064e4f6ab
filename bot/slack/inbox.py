"""Stored before acknowledged: a global Bolt middleware that records every request from Slack
(event, click, command) in the inbox before Bolt acknowledges it.

Bolt acknowledges an event as soon as its listener starts, so the record has to happen
before: here. If the store cannot take it, the request is answered 503, which Bolt's HTTP
adapter sends as is and its Socket Mode handler does not acknowledge, so Slack delivers it
again and nobody is silently ignored. A key seen before (Slack's retry, or the same event
sent to another replica) is acknowledged and goes no further.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.store.inbox import Inbox

# Set in the context of a delivery dispatched again after a replica died (bot.slack.recovery).
REPLAYED = "kelpie_replayed_delivery"

log = logging.getLogger(__name__)

# Never stored: the legacy verification token is a credential.
_SECRET_FIELDS = ("token",)


class InboxMiddleware:
    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    async def process(
        self,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse | None]],
    ) -> BoltResponse | None:
        if req.context.get(REPLAYED):
            return await next()  # taken over from a replica that died: recorded already
        body = req.body if isinstance(req.body, dict) else {}
        key, kind = delivery_key(body)
        content = {k: v for k, v in body.items() if k not in _SECRET_FIELDS}
        try:
            first = await self._inbox.record(key, kind, json.dumps(content, sort_keys=True))
        except Exception as error:
            log.error(
                "could not store %s %s; not acknowledged, Slack will retry: %s", kind, key, error
            )
            return BoltResponse(status=503, body="")
        if not first:
            log.info("ignoring duplicate delivery of %s %s", kind, key)
            return BoltResponse(status=200, body="")
        return await next()


def delivery_key(body: dict[str, Any]) -> tuple[str, str]:
    """(dedupe key, kind) of a request body. Events carry Slack's `event_id`, which a retry
    repeats; clicks and commands are not retried by Slack, their `trigger_id` is unique."""
    if body.get("type") == "event_callback":
        event = body.get("event")
        kind = str(event.get("type")) if isinstance(event, dict) else "event"
        if body.get("event_id"):
            return str(body["event_id"]), kind
        return f"event:{uuid.uuid4().hex}", kind
    kind = str(body.get("type") or ("command" if "command" in body else "request"))
    trigger = body.get("trigger_id")
    return f"{kind}:{trigger or uuid.uuid4().hex}", kind
