"""Stored before acknowledged: a global Bolt middleware that records every request from Slack
(event, click, command) in the inbox before Bolt acknowledges it.

Bolt acknowledges an event as soon as its listener starts, so the record has to happen
before: here. If the store cannot take it, the request is answered 503, which Bolt's HTTP
adapter sends as is and its Socket Mode handler does not acknowledge, so Slack delivers it
again and nobody is silently ignored. A key seen before (Slack's retry, or the same event
sent to another replica) is acknowledged and goes no further.

A message, a click or a command stays unhandled in the inbox until its listener is done
(`marking_handled`, or the adapter for messages); what a replica that died left unhandled
is dispatched again by another one (`bot.slack.recovery`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.at_rest import AtRest
from bot.store.inbox import Inbox

# Set in the context of a delivery dispatched again after a replica died (bot.slack.recovery).
REPLAYED = "kelpie_replayed_delivery"
# The delivery's inbox key, in the context of every request the middleware lets through.
DELIVERY_KEY = "kelpie_delivery_key"

# Tells the inbox a delivery (by key) was handled: no replica takes it over after a crash.
Handled = Callable[[str], Awaitable[None]]
# A click's or command's listener, as `marking_handled` wraps it.
Listener = Callable[[Any, dict[str, Any], AsyncBoltContext], Awaitable[None]]

log = logging.getLogger(__name__)


class InboxMiddleware:
    def __init__(self, inbox: Inbox, at_rest: AtRest) -> None:
        self._inbox = inbox
        self._at_rest = at_rest

    async def process(
        self,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse | None]],
    ) -> BoltResponse | None:
        if req.context.get(REPLAYED):
            # Taken over from a replica that died: recorded already (its key in the context).
            return await next()
        body = req.body if isinstance(req.body, dict) else {}
        key, kind = delivery_key(body)
        try:
            # What a replay needs, masked (bot.slack.at_rest); raw only in memory.
            content = await self._at_rest.content(kind, body)
            first = await self._inbox.record(key, kind, content)
        except Exception as error:
            log.error(
                "could not store %s %s; not acknowledged, Slack will retry: %s", kind, key, error
            )
            return BoltResponse(status=503, body="")
        if not first:
            log.info("ignoring duplicate delivery of %s %s", kind, key)
            return BoltResponse(status=200, body="")
        req.context[DELIVERY_KEY] = key
        return await next()


async def mark_handled(handled: Handled, context: dict[str, Any]) -> None:
    """The delivery in `context` is handled: no replica dispatches it again. A failure is
    logged: the delivery is then dispatched again if this replica dies, and its effects are
    claimed once in the store (a turn accepted, an approval decided) whoever runs it."""
    key = context.get(DELIVERY_KEY)
    if not isinstance(key, str):
        return
    try:
        await handled(key)
    except Exception as error:
        log.error("could not mark delivery %s handled: %s", key, error)


def marking_handled(handled: Handled, listener: Listener) -> Listener:
    """`listener` (a click's or a command's) marking its delivery handled once it has run,
    failed or not: until then, the death of this replica has another one run it again."""

    async def run(ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        try:
            await listener(ack, body, context)
        except Exception:
            log.exception(
                "the listener for %s %s failed", body.get("type"), context.get(DELIVERY_KEY)
            )
        await mark_handled(handled, context)

    return run


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
