"""One pacer per workspace in front of every Slack Web API call, on one HTTP session.

Slack limits each Web API method per app and per **workspace** (Tier 2 about 20 calls a
minute, Tier 3 50, Tier 4 100), plus about one post a second per channel. Pacing each
thread alone still draws 429s once many threads run at once, so every call waits here for
its method's budget in its workspace (and a post for its channel's) before it is sent.
A 429 blocks that method in that workspace for its Retry-After and the call is sent again
when that has passed; no call of that method goes out before then.

Where it sits: in the one `aiohttp.ClientSession` every `AsyncWebClient` of the process
shares (a client middleware). That session keeps connections to Slack alive, instead of
slack_sdk's default of a new session (a new TCP and TLS connection) per call, and it is the
one place every call passes: kelpie's own client, the per-request clients Bolt builds for
listeners (Bolt hands them the app client's session), and the steps of `files_upload_v2`.
A workspace is known by its token: one bot token is one installation in one workspace.

Why not slack_sdk's `AsyncRateLimitErrorRetryHandler`: it sleeps inside the one call that
drew the 429 while every other call of that method goes on and draws more 429s, and it
cannot pace calls before they are sent. Its connection-error handler is still used.
Bolt's `say_stream` / `set_status` helpers are not used for the same reason the progress
package gives: kelpie streams from the turn's reporter, not from inside a listener.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from urllib.parse import parse_qs

from aiohttp import ClientHandlerType, ClientRequest, ClientResponse

from bot.errors import KelpieError

log = logging.getLogger(__name__)


class Tier(StrEnum):
    TIER1 = "tier1"
    TIER2 = "tier2"
    TIER3 = "tier3"
    TIER4 = "tier4"
    SPECIAL = "special"  # its own rules (posting: per channel, below)


# Every method kelpie calls, with Slack's tier [docs.slack.dev <method>]; a method missing
# here is paced as Tier 3.
METHOD_TIERS: Mapping[str, Tier] = MappingProxyType(
    {
        "auth.test": Tier.SPECIAL,
        "apps.connections.open": Tier.TIER3,
        "chat.postMessage": Tier.SPECIAL,
        "chat.postEphemeral": Tier.TIER4,
        "chat.update": Tier.TIER3,
        "chat.delete": Tier.TIER3,
        "chat.startStream": Tier.TIER2,
        "chat.appendStream": Tier.TIER4,
        "chat.stopStream": Tier.TIER2,
        "reactions.add": Tier.TIER3,
        "reactions.remove": Tier.TIER2,
        "users.info": Tier.TIER4,
        "usergroups.users.list": Tier.TIER2,
        "conversations.info": Tier.TIER3,
        # One call a minute for apps outside the Marketplace (Slack changelog 2025-05).
        "conversations.history": Tier.TIER1,
        "files.getUploadURLExternal": Tier.TIER4,
        "files.completeUploadExternal": Tier.TIER4,
        "assistant.threads.setStatus": Tier.SPECIAL,
        "agents.sessions.setStatus": Tier.TIER3,
        "agents.sessions.rename": Tier.TIER3,
        "views.open": Tier.TIER4,
    }
)
# How often a caller waiting only on calls still in flight looks again.
IN_FLIGHT_POLL_S = 0.05
# Methods that put a new message into a channel: about one a second per channel.
POSTING = frozenset({"chat.postMessage", "chat.startStream"})


# Methods whose calls, made in this context, fail at once rather than wait for budget.
_NO_WAIT: ContextVar[frozenset[str]] = ContextVar("slack_no_wait", default=frozenset())


class BudgetSpent(KelpieError):
    """A call asked not to wait found its method's budget in the workspace spent; nothing
    was sent. Not a transport failure (no `aiohttp.ClientError`): a handler of failed Slack
    calls must not take it for one, so only a caller that asked `without_waiting` sees it,
    and takes another way."""

    def __init__(self, method: str) -> None:
        super().__init__(
            f"Slack's budget for {method} in this workspace is spent; nothing was sent."
        )
        self.method = method


@contextmanager
def without_waiting(*methods: str) -> Iterator[None]:
    """Calls of `methods` made inside this block (in this task) raise `BudgetSpent` where
    they would wait for their workspace's budget: the caller takes another way (a posted
    message instead of a stream, no progress edit). The check and the taking of the slot
    are one step, so two turns cannot both see the last slot free. A post still waits for
    its channel's turn."""
    token = _NO_WAIT.set(_NO_WAIT.get() | frozenset(methods))
    try:
        yield
    finally:
        _NO_WAIT.reset(token)


def _default_per_window() -> Mapping[Tier, int]:
    return MappingProxyType({Tier.TIER1: 1, Tier.TIER2: 20, Tier.TIER3: 50, Tier.TIER4: 100})


@dataclass(frozen=True)
class PacingLimits:
    """Calls per method per workspace in any `window_s`, and posts per channel in any
    `channel_window_s` (one a second, with bursts of five)."""

    per_window: Mapping[Tier, int] = field(default_factory=_default_per_window)
    window_s: float = 60.0
    channel_posts: int = 5
    channel_window_s: float = 5.0
    max_retries: int = 5

    def shared(self, share: float) -> PacingLimits:
        """This process's part of the workspace's budget (`slack.rate_share`): `share` of
        each tier's calls, at least one."""
        if share >= 1:
            return self
        counts = {tier: max(1, int(count * share)) for tier, count in self.per_window.items()}
        return replace(self, per_window=MappingProxyType(counts))

    def scaled(self, factor: float) -> PacingLimits:
        """The same counts over windows `factor` times as long (tests shrink time)."""
        return replace(
            self, window_s=self.window_s * factor, channel_window_s=self.channel_window_s * factor
        )


class SlidingWindow:
    """At most `count` calls in any `span_s`; callers queue in arrival order.

    A call counts from when its answer came back: Slack counts it from when it arrived,
    somewhere between the two, so this never lets more through than Slack allows."""

    def __init__(self, count: int, span_s: float) -> None:
        self._count = count
        self._span_s = span_s
        self._ends: deque[float] = deque()
        self._in_flight = 0
        self._blocked_until = 0.0
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            # Time itself frees the window (or ends a Retry-After): nothing to signal.
            while (wait := self._wait(time.monotonic())) > 0:  # noqa: ASYNC110
                await asyncio.sleep(wait)
            self._in_flight += 1

    def has_room(self) -> bool:
        """Whether a call could start now: nobody queued ahead and budget left."""
        return not self._lock.locked() and self._wait(time.monotonic()) <= 0

    def try_acquire(self) -> bool:
        """Take a slot if one is free now (never waits)."""
        if not self.has_room():
            return False
        self._in_flight += 1
        return True

    def release(self) -> None:
        self._in_flight -= 1
        self._ends.append(time.monotonic())

    def block(self, seconds: float) -> None:
        """Nothing starts for `seconds` (Slack said Retry-After)."""
        self._blocked_until = max(self._blocked_until, time.monotonic() + seconds)

    def _wait(self, now: float) -> float:
        while self._ends and self._ends[0] <= now - self._span_s:
            self._ends.popleft()
        wait = self._blocked_until - now
        if len(self._ends) + self._in_flight >= self._count:
            free_at = self._ends[0] + self._span_s if self._ends else now + IN_FLIGHT_POLL_S
            wait = max(wait, free_at - now)
        return wait


class SlackPacer:
    """The aiohttp client middleware: waits for the budget, honours Retry-After."""

    def __init__(
        self,
        limits: PacingLimits | None = None,
        *,
        on_rate_limited: Callable[[str], None] | None = None,
    ) -> None:
        self._limits = limits or PacingLimits()
        self._on_rate_limited = on_rate_limited
        self._windows: dict[tuple[str, str], SlidingWindow] = {}

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        method = _api_method(request)
        if method is None:
            return await handler(request)  # an upload URL or a response_url: not the Web API
        workspace = _workspace(request)
        method_window = self._method_window(workspace, method)
        windows = [method_window]
        if method in POSTING and (channel := _channel(request)):
            limits = self._limits
            key = (workspace, f"post:{channel}")
            # The channel's turn first: waiting for it must not hold a slot of the method's.
            windows.insert(0, self._window(key, limits.channel_posts, limits.channel_window_s))
        for attempt in range(self._limits.max_retries + 1):
            await self._acquire(method, windows, first=attempt == 0)
            try:
                response = await handler(request)
            finally:
                for window in windows:
                    window.release()
            if response.status != 429 or attempt == self._limits.max_retries:
                return response
            delay = _retry_after(response)
            if self._on_rate_limited is not None:
                self._on_rate_limited(method)
            log.warning("Slack rate-limited %s; waiting %.0f s as Retry-After says", method, delay)
            method_window.block(delay)
            response.release()
        raise AssertionError("unreachable")  # the loop returns on its last attempt

    @staticmethod
    async def _acquire(method: str, windows: list[SlidingWindow], *, first: bool) -> None:
        """Wait for every window's turn; a first attempt asked not to wait takes its
        method's slot now or raises (a retry after a 429 always waits: it was sent)."""
        if not first or method not in _NO_WAIT.get():
            for window in windows:
                await window.acquire()
            return
        *channel, method_window = windows
        if not method_window.try_acquire():
            raise BudgetSpent(method)
        try:
            for window in channel:
                await window.acquire()
        except BaseException:
            method_window.release()
            raise

    def has_room(self, token: str, method: str, channel: str | None = None) -> bool:
        """Whether a call of `method` with `token` (a post to `channel`) would go out now,
        without waiting for its workspace's budget; sends nothing. A turn asks before a call
        it could make another way (a stream's start) or leave out (a progress edit)."""
        workspace = _token_workspace(f"Bearer {token}")
        windows = [self._method_window(workspace, method)]
        if method in POSTING and channel:
            limits = self._limits
            key = (workspace, f"post:{channel}")
            windows.append(self._window(key, limits.channel_posts, limits.channel_window_s))
        return all(window.has_room() for window in windows)

    def _method_window(self, workspace: str, method: str) -> SlidingWindow:
        tier = METHOD_TIERS.get(method, Tier.TIER3)
        # Special methods have no per-minute tier; they still honour Retry-After.
        count = self._limits.per_window.get(tier, 1_000_000)
        return self._window((workspace, method), count, self._limits.window_s)

    def _window(self, key: tuple[str, str], count: int, span_s: float) -> SlidingWindow:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = SlidingWindow(count, span_s)
        return window


def _api_method(request: ClientRequest) -> str | None:
    """`chat.postMessage` for `…/api/chat.postMessage`; None for other URLs."""
    name = request.url.path.rsplit("/", 1)[-1]
    return name if "." in name and name[0].isalpha() else None


def _workspace(request: ClientRequest) -> str:
    """The workspace a call acts in, known by its token (hashed: never kept in clear)."""
    return _token_workspace(request.headers.get("Authorization", ""))


def _token_workspace(authorization: str) -> str:
    return hashlib.sha256(authorization.encode()).hexdigest()[:16]


def _channel(request: ClientRequest) -> str | None:
    body = request.body
    try:
        text = body.decode() if body is not None else ""
    except (UnicodeDecodeError, TypeError, AttributeError):
        return None
    if not text:
        return None
    if text.lstrip().startswith("{"):
        try:
            channel = json.loads(text).get("channel")
        except (json.JSONDecodeError, AttributeError):
            return None
        return str(channel) if channel else None
    values = parse_qs(text).get("channel")
    return values[0] if values else None


def _retry_after(response: ClientResponse) -> float:
    try:
        return max(float(response.headers.get("Retry-After", "1")), 0.0)
    except ValueError:
        return 1.0
