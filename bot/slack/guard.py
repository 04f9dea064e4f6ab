"""Hostile input at the door: what reaches Bolt is well-formed, signed, fresh, from the
installed workspace, and seen once.

`SlackHttpRoute` is the Events API endpoint (HTTP mode). Every request gets a 2xx or 4xx,
never a bare 500: an oversized, non-UTF-8 or unparseable body, or one whose fields have the
wrong JSON types (`bot.slack.shapes`, checked before Bolt reads it), is refused with one
sentence and one log line, as is a missing, stale or wrong signature or timestamp header;
a body is parsed only after its signature checks out; a signed request replayed with the
same signature is acknowledged and not processed again. When the store cannot record the
signature (an outage), the answer is a 503 and one log line: Slack retries a 5xx, and the
retry is handled once the store is back. `installed_workspace_only` is a
Bolt middleware (both modes) that drops events from another workspace or organisation;
`warm_authorization` asks Slack who the bot is before the first event does.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from typing import Any, Protocol

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.shapes import shape_problem
from bot.store.db import error_reason

log = logging.getLogger(__name__)

# Slack's own payloads are far below this; anything larger is not from Slack.
MAX_BODY_BYTES = 1 << 20
# Slack signs with a timestamp; older requests are refused (Slack's own advice: 5 minutes).
MAX_AGE_S = 300


class Ledger(Protocol):
    async def claim(self, event_id: str) -> bool: ...


def _refuse(status: int, sentence: str) -> web.Response:
    return web.Response(status=status, text=sentence)


class SlackHttpRoute:
    """The aiohttp handler in front of Bolt for HTTP mode."""

    def __init__(self, app: AsyncApp, signing_secret: str, ledger: Ledger) -> None:
        self._app = app
        self._secret = signing_secret.encode()
        self._ledger = ledger

    async def handle(self, request: web.Request) -> web.Response:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return _refuse(413, "The request body is too large.")
        raw = await request.content.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            return _refuse(413, "The request body is too large.")
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        unsigned = self._unsigned(raw, timestamp, signature)
        if unsigned is not None:
            log.warning("refused a Slack request: %s", unsigned)
            return _refuse(401, "The request signature is missing, stale or wrong.")
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("refused a signed Slack request whose body is not UTF-8")
            return _refuse(400, "The request body is not UTF-8.")
        try:
            first = await self._ledger.claim(f"sig:{signature}")
        except Exception as error:
            log.error(
                "could not store a Slack request (the store is unavailable: %s); "
                "answered 503 so Slack delivers it again",
                error_reason(error),
            )
            return _refuse(503, "The request could not be stored; deliver it again.")
        if not first:
            log.warning("ignored a replayed Slack request (same signature)")
            return web.Response(status=200, text="")
        return await self._dispatch(request, body)

    def _unsigned(self, raw: bytes, timestamp: str, signature: str) -> str | None:
        """Why the request is not signed by Slack now (None: it is)."""
        # Seconds since 1970, ten digits until 2286: a longer "number" is not a timestamp
        # (and 5,000 digits would not even convert to an int).
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return "its timestamp header is missing or not a plausible time"
        if abs(time.time() - int(timestamp)) > MAX_AGE_S:
            return "its timestamp is more than 5 minutes away (stale or replayed)"
        if not signature:
            return "it has no signature header"
        # Over the raw bytes (the SDK's helper decodes them first, which a hostile body breaks).
        digest = hmac.new(self._secret, b"v0:" + timestamp.encode() + b":" + raw, hashlib.sha256)
        given = signature.encode("utf-8", "replace")
        if not hmac.compare_digest(f"v0={digest.hexdigest()}".encode(), given):
            return "its signature is wrong"
        return None

    async def _dispatch(self, request: web.Request, body: str) -> web.Response:
        try:
            bolt_request = AsyncBoltRequest(
                body=body,
                query=request.query_string,
                headers=dict(request.headers),
            )
        except Exception as error:  # bad JSON, deep nesting, a form without payload…
            log.warning("refused an unparseable Slack request: %s", type(error).__name__)
            return _refuse(400, "The request body could not be parsed.")
        problem = shape_problem(bolt_request.body)
        if problem is not None:
            # Signed, so Slack sent it: told not to retry what would be refused again.
            log.warning("refused a Slack request whose fields have the wrong types: %s", problem)
            response = _refuse(400, "A field of the request has the wrong type.")
            response.headers["X-Slack-No-Retry"] = "1"
            return response
        try:
            bolt_response = await self._app.async_dispatch(bolt_request)
        except Exception:
            log.exception("Slack request failed in dispatch")
            return _refuse(400, "The request could not be processed.")
        return await to_aiohttp_response(bolt_response)


async def installed_workspace_only(
    context: Any, body: dict[str, Any], next: Any
) -> BoltResponse | None:
    """Drop requests from a workspace or organisation other than the installed one (an
    event from a Slack Connect partner's install, a forged team_id)."""
    installed = context.authorize_result
    if installed is not None:
        team, enterprise = context.team_id, context.enterprise_id
        foreign_team = bool(team and installed.team_id and team != installed.team_id)
        foreign_org = bool(
            enterprise and installed.enterprise_id and enterprise != installed.enterprise_id
        )
        if foreign_team or foreign_org:
            log.warning(
                "ignored %s from another workspace (team %s, enterprise %s)",
                body.get("event_id") or body.get("type") or "a request",
                team,
                enterprise,
            )
            return BoltResponse(status=200, body="")
    await next()
    return None


async def warm_authorization(app: AsyncApp) -> None:
    """Bolt asks Slack who the bot is (`auth.test`) when it authorizes its first event, and
    keeps the answer: asked at start instead, the first mention does not wait for that round
    trip, and the Web API session has its first connection open. If Slack does not answer,
    one log line, and Bolt asks at the first event as before."""
    # Bolt offers no public way to hand it the answer; its single-workspace authorization
    # keeps it in `auth_test_result` (another authorization: nothing to warm).
    waiting = [
        middleware
        for middleware in getattr(app, "_async_middleware_list", ())
        if isinstance(middleware, AsyncSingleTeamAuthorization)
        and middleware.auth_test_result is None
    ]
    if not waiting:
        return
    try:
        answer = await app.client.auth_test()
    except Exception as error:  # Slack down or slow: the start goes on
        reason = type(error).__name__
        log.warning("Slack's auth.test failed at start (%s); asked at the first event", reason)
        return
    for middleware in waiting:
        middleware.auth_test_result = answer
