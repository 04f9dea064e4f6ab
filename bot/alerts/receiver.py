"""The webhook receivers: `POST /alerts/<type>`. Authentication is required and compared in
constant time; a body over the limit is 413, malformed JSON or another payload version
400. The notification is stored in the inbox (masked) before the 200, so a crash between
the two loses nothing (another replica or the next start takes it over) and a redelivery,
on any replica, is answered 200 and handled once."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.alerts.payload import Notification, PayloadError, parse
from bot.config import ReceiverAuthMethod
from bot.model.outbound import mask_value_async

log = logging.getLogger(__name__)

PATH = "/alerts/{receiver}"
INBOX_KIND = "alert"

# Durably records a delivery: True the first time its key is seen (the inbox's `record`).
Record = Callable[[str, str, str], Coroutine[Any, Any, bool]]
# Handles a stored notification (after the 200), by its inbox key.
Handle = Callable[[str, Notification], Coroutine[Any, Any, None]]
# Counts an event of a receiver (the metrics' closed label set).
Count = Callable[[str, str], None]


@dataclass(frozen=True)
class Credentials:
    """A receiver's expected Authorization header value, built once at startup."""

    receiver: str
    method: ReceiverAuthMethod
    expected: bytes
    max_body_bytes: int

    @classmethod
    def build(
        cls, receiver: str, method: ReceiverAuthMethod, values: tuple[str, ...], limit: int
    ) -> Credentials:
        if method is ReceiverAuthMethod.BEARER:
            header = f"Bearer {values[0]}"
        else:
            header = "Basic " + base64.b64encode(f"{values[0]}:{values[1]}".encode()).decode()
        return cls(receiver, method, header.encode(), limit)

    def admits(self, header: str) -> bool:
        return hmac.compare_digest(header.encode(), self.expected)


class AlertReceivers:
    def __init__(
        self, credentials: list[Credentials], record: Record, handle: Handle, count: Count
    ) -> None:
        self._credentials = {c.receiver: c for c in credentials}
        self._record = record
        self._handle = handle
        self._count = count
        self._tasks: set[asyncio.Task[None]] = set()

    def add_to(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.receive)

    async def receive(self, request: web.Request) -> web.Response:
        credentials = self._credentials.get(request.match_info["receiver"])
        if credentials is None:
            return web.Response(status=404, text="no such receiver\n")
        if not credentials.admits(request.headers.get("Authorization", "")):
            log.warning(
                "alert receiver %s: refused a request from %s (wrong or missing credentials)",
                credentials.receiver,
                request.remote,
            )
            return web.Response(status=401, text="unauthorized\n")
        if (request.content_length or 0) > credentials.max_body_bytes:
            return web.Response(status=413, text="too large\n")
        body = await _body_within(request, credentials.max_body_bytes)
        if body is None:
            return web.Response(status=413, text="too large\n")
        try:
            notification = parse(credentials.receiver, json.loads(body))
        except (PayloadError, ValueError) as error:  # JSON's errors are ValueErrors
            log.info("alert receiver %s: refused a payload: %s", credentials.receiver, error)
            return web.Response(status=400, text="not a notification this receiver reads\n")
        return await self._store_then_handle(credentials.receiver, body, notification)

    async def _store_then_handle(
        self, receiver: str, body: bytes, notification: Notification
    ) -> web.Response:
        self._count(receiver, "received")
        key = notification.dedupe_key
        try:
            masked, _ = await mask_value_async({"receiver": receiver, "body": json.loads(body)})
            first = await self._record(key, INBOX_KIND, json.dumps(masked, sort_keys=True))
        except Exception as error:
            log.error("could not store alert notification %s; answered 503: %s", key, error)
            return web.Response(status=503, text="not stored, send it again\n")
        if not first:
            log.info("alert notification %s was received before; handled once", key)
            self._count(receiver, "deduplicated")
            return web.Response(text="ok\n")
        task = asyncio.create_task(self._handle(key, notification))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.Response(text="ok\n")

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _body_within(request: web.Request, limit: int) -> bytes | None:
    """The whole body (a chunked one has no Content-Length), None past `limit`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def stored_notification(body_json: str) -> Notification:
    """A notification as the inbox kept it (for a takeover after a crash)."""
    stored = json.loads(body_json)
    return parse(stored["receiver"], stored["body"])
