"""A limit on each person's clicks (`block_actions`), ahead of everything else a click
costs: someone who clicks more than `clicks` times within `window_s` is told so once, in an
ephemeral message, and their further clicks in that window are acknowledged and dropped:
never stored, never checked against the approvers. A crowd of clicks from one person cannot
queue work ahead of another person's click."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import copy
from bot.slack.inbox import REPLAYED
from bot.slack.replies import whisper

log = logging.getLogger(__name__)

CLICKS = 10
WINDOW_S = 60.0


class ClickLimit:
    """A Bolt middleware, registered before the inbox's (a dropped click is not stored)."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        clicks: int = CLICKS,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._clicks = clicks
        self._window_s = window_s
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}
        self._told: set[str] = set()
        self._telling: set[asyncio.Task[None]] = set()

    async def process(
        self,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse | None]],
    ) -> BoltResponse | None:
        body = req.body if isinstance(req.body, dict) else {}
        user = _clicker(body)
        if user is None or req.context.get(REPLAYED) or self._allow(user):
            return await next()
        if user not in self._told:
            self._told.add(user)
            log.warning(
                "%s clicked more than %d times in %.0f s; told once, further clicks dropped",
                user,
                self._clicks,
                self._window_s,
            )
            self._tell(body, user)
        return BoltResponse(status=200, body="")

    def _allow(self, user: str) -> bool:
        now = self._clock()
        recent = self._recent.setdefault(user, deque())
        while recent and now - recent[0] >= self._window_s:
            recent.popleft()
        if len(recent) >= self._clicks:
            return False
        recent.append(now)
        self._told.discard(user)  # back under the limit: a new burst is told again
        self._forget_idle(now)
        return True

    def _forget_idle(self, now: float) -> None:
        """People whose clicks all left the window (bounded memory over a long run)."""
        if len(self._recent) < 1024:
            return
        for user in [u for u, times in self._recent.items() if now - times[-1] >= self._window_s]:
            del self._recent[user]
            self._told.discard(user)

    def _tell(self, body: dict[str, Any], user: str) -> None:
        # Told after the acknowledgement, which must not wait for Slack's answer.
        channel = body.get("channel")
        container = body.get("container")
        channel_id = channel.get("id") if isinstance(channel, dict) else None
        thread_ts = container.get("thread_ts") if isinstance(container, dict) else None
        if not isinstance(channel_id, str):
            return
        task = asyncio.create_task(
            whisper(
                self._client,
                channel_id,
                user,
                copy.CLICKING_TOO_FAST,
                thread_ts if isinstance(thread_ts, str) else None,
            )
        )
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)


def _clicker(body: dict[str, Any]) -> str | None:
    if body.get("type") != "block_actions":
        return None
    user = body.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    return user_id if isinstance(user_id, str) and user_id else None
