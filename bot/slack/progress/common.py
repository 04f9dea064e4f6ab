"""What every part of a turn's Slack rendering shares, and nothing else of the package:
the limits and Slack's refusal codes, Slack calls as data and their failures, pacing (one
write per thread per second), the registry of running turns and workspace memory."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.model.outbound import mask_value_async
from bot.slack.pacing import SlackPacer

log = logging.getLogger(__name__)

STOP_ACTION_ID = "kelpie_stop"
# The block of the Stop button on a queued turn's notice: a stop from it edits the notice.
QUEUED_STOP_BLOCK = "kelpie_stop_queued"
# One paced write (an edit or an append) per thread per second: chat.update is Tier 3
# (~50/min per workspace) and several turns may run at once.
MIN_WRITE_INTERVAL_S = 1.0
STREAM_TEXT_LIMIT = 12_000  # markdown_text per stream call
# One streamed message holds about 12,000 characters in all (the append past that answers
# msg_too_long): the turn goes on in a new stream message before that.
STREAM_SEGMENT_LIMIT = 11_500
UPDATE_TEXT_LIMIT = 3_900  # chat.update refuses text over 4,000 characters
POST_TEXT_LIMIT = 39_000  # chat.postMessage text (Slack refuses or truncates past 40,000)
# Per answer message, in section blocks of ≤ 3,000: blocks carrying more text in all fail
# the message with msg_blocks_too_long.
ANSWER_MESSAGE_CHARS = 11_500
# An answer longer than this goes up as a file, with its opening as a short summary.
ANSWER_FILE_CHARS = 48_000
SUMMARY_CHARS = 1_000
# A refused part is retried in halves down to this size, then as plain text.
MIN_PART_CHARS = 500
TASK_ARGS_CHARS = 120
TASK_OUTPUT_CHARS = 160
TIMELINE_LINES = 30
ATTACHMENT_TOOL_PREFIX = "show_"

# startStream errors meaning the workspace does not let this app stream at all.
WORKSPACE_REFUSALS = frozenset(
    {
        "unknown_method",
        "not_allowed_token_type",
        "method_deprecated",
        "feature_not_enabled",
        "not_enabled",
        "missing_scope",
        "no_permission",
        "not_allowed",
        "access_denied",
    }
)
# ... and errors meaning this channel (type) cannot take a stream.
CHANNEL_REFUSALS = frozenset(
    {"channel_type_not_supported", "method_not_supported_for_channel_type"}
)
STREAM_GONE = frozenset({"message_not_in_streaming_state"})
# What Slack answers when a message is over one of its size limits.
SIZE_REFUSALS = frozenset({"msg_too_long", "msg_blocks_too_long", "invalid_blocks"})
USER_STOPPED = "stopped_by_user"
# What a turn's end shows besides the answer: its reaction swapped, its session settled.
ENDING_METHODS = ("reactions.remove", "reactions.add", "agents.sessions.setStatus")

Interrupt = Callable[[str], bool]
T = TypeVar("T")
Json = dict[str, Any]


# What a Slack call can raise once slack_sdk's retry handlers gave up.
SLACK_FAILURES = (SlackClientError, aiohttp.ClientError, TimeoutError)


def error_code(error: BaseException) -> str:
    if isinstance(error, SlackApiError):
        return str(error.response.get("error") or "unknown_error")
    return type(error).__name__


def slack_call(method: str, **args: object) -> Json:
    """A Slack call as data (`bot/slack/progress/closing.py`): one a turn's end may leave
    for later, and keep in the store meanwhile."""
    return {"method": method, "args": args}


async def stored_calls(calls: Sequence[Json]) -> str:
    """`calls` as the store keeps them: JSON, with whatever the Slack client would mask
    masked already (no secret reaches the database)."""
    masked, _found = await mask_value_async(list(calls))
    return json.dumps(masked, separators=(",", ":"))


# --------------------------------------------------------------------------- shared state


@dataclass
class ThreadSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: float = float("-inf")


class ThreadPacer:
    """Serialises the bot's writes to one thread and keeps paced writes (edits, appends)
    at least `interval_s` apart. The gap is measured from the end of the previous write, so
    it also holds where Slack receives them, retries after a 429 included."""

    def __init__(self, interval_s: float = MIN_WRITE_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._slots: dict[tuple[str, str], ThreadSlot] = {}

    @asynccontextmanager
    async def hold(self, channel: str, thread_ts: str) -> AsyncIterator[ThreadSlot]:
        self._prune()
        slot = self._slots.setdefault((channel, thread_ts), ThreadSlot())
        async with slot.lock:
            yield slot

    def paced_wait_s(self, channel: str, thread_ts: str) -> float:
        """How long a paced write to this thread would wait now (0 when it may go)."""
        slot = self._slots.get((channel, thread_ts))
        if slot is None:
            return 0.0
        return max(0.0, slot.last + self._interval_s - time.monotonic())

    async def call(self, slot: ThreadSlot, call: Callable[[], Awaitable[T]], *, paced: bool) -> T:
        """Make one write while holding `slot`; paced writes wait for their turn first."""
        if paced:
            wait = slot.last + self._interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        try:
            return await call()
        finally:
            slot.last = time.monotonic()

    def _prune(self) -> None:
        if len(self._slots) < 512:
            return
        horizon = time.monotonic() - 60
        for key, slot in list(self._slots.items()):
            if not slot.lock.locked() and slot.last < horizon:
                del self._slots[key]


class SlackBudget:
    """Whether a call would go out now or wait for its workspace's budget (the pacer's
    answer, nothing sent): asked before a stream (is there room to stop it?) and before a
    turn's closing status. Calls a turn may leave out ask the pacer itself as they go
    (`without_waiting`). Without a pacer (a client of its own) every call has room."""

    def __init__(self, pacer: SlackPacer | None, token: str | None) -> None:
        self._pacer = pacer
        self._token = token or ""

    def room(self, method: str, channel: str | None = None) -> bool:
        return self._pacer is None or self._pacer.has_room(self._token, method, channel)


class Background:
    """Slack calls a turn need not wait for (its status once the answer is out) while the
    workspace's budget has no room: they go out when it has, and the turn ends now, so a
    burst's queued turns are not held behind them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def close(self) -> None:
        """At shutdown: what still waits for budget is given up here (the process ends
        before Slack's window frees); each turn's end stored it, and the next start (or
        another replica) sends it."""
        if self._tasks:
            log.warning(
                "leaving %d turns' deferred Slack calls to the next start", len(self._tasks)
            )
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a deferred Slack call failed", exc_info=task.exception())


@dataclass
class ActiveTurn:
    """A running turn the Stop button can act on."""

    session_key: str
    asker: str
    role: str
    team_id: str
    channel_id: str
    thread_ts: str
    stopped_by: str | None = None
    turn_id: str = ""  # what feedback on the turn's answer refers to


class ActiveTurns:
    """Running turns by session key (one per session: the scheduler runs one at a time)."""

    def __init__(self) -> None:
        self._turns: dict[str, ActiveTurn] = {}

    def get(self, session_key: str) -> ActiveTurn | None:
        return self._turns.get(session_key)

    def add(self, turn: ActiveTurn) -> None:
        self._turns[turn.session_key] = turn

    def discard(self, turn: ActiveTurn) -> None:
        if self._turns.get(turn.session_key) is turn:
            del self._turns[turn.session_key]

    def by_thread(self, channel_id: str, thread_ts: str) -> ActiveTurn | None:
        for turn in self._turns.values():
            if (turn.channel_id, turn.thread_ts) == (channel_id, thread_ts):
                return turn
        return None


@dataclass
class WorkspaceMemory:
    """What kelpie learnt about workspaces while running (not persisted: a restart retries)."""

    update_only_teams: set[str] = field(default_factory=set)
    update_only_channels: set[tuple[str, str]] = field(default_factory=set)
    no_assistant_status_teams: set[str] = field(default_factory=set)
    # Workspaces that refused agent sessions (the app is not declared as an agent), and
    # those where Slack shows no stop button (no agent_session_stopped subscription).
    no_agent_session_teams: set[str] = field(default_factory=set)
    no_session_stop_teams: set[str] = field(default_factory=set)
