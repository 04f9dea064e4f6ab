"""What both renderings of a turn share: pacing (one write per thread per second), the
registry of running turns, workspace memory, the status indicator, rendering helpers and
the reporter base class."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import (
    RoundStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnFinish,
    TurnFinished,
    TurnStarted,
    TurnStats,
    footer_line,
    plural,
    seen_stats,
)
from bot.agent.session import TurnMessages, TurnOrigin
from bot.model.outbound import mask_value_async
from bot.slack import copy
from bot.slack.markdown import (
    MAX_BLOCKS,
    SECTION_LIMIT,
    escape,
    split_text,
)
from bot.slack.pacing import BudgetSpent, SlackPacer, without_waiting
from bot.slack.safe_text import escape_markdown
from bot.values import SessionInfo, ToolStatus

if TYPE_CHECKING:
    from bot.slack.progress.closing import ClosingCalls
    from bot.slack.progress.sessions import AgentSessions

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
# The answer to a reaction call that finds the reaction as it was asked to be.
_REACTION_ALREADY = {"reactions_add": "already_reacted", "reactions_remove": "no_reaction"}


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


# --------------------------------------------------------------------------- rendering


@dataclass
class TaskLine:
    tool_call_id: str
    name: str
    args: str
    status: ToolStatus | None = None
    summary: str = ""

    def output(self) -> str:
        summary = self.summary
        if self.status is ToolStatus.DENIED and "denied" not in summary.lower():
            return f"denied: {summary}" if summary else "denied"
        if self.status is ToolStatus.FAILED and not summary:
            return "failed"
        return summary

    def chunk(self, *, unfinished: bool = False) -> Json:
        """A `task_update`: the name, arguments and result come from the model and the
        cluster, so each is escaped (Slack renders these fields as Markdown)."""
        chunk: Json = {
            "type": "task_update",
            "id": self.tool_call_id,
            "title": escape_markdown(self.name),
        }
        if self.status is None:
            chunk["status"] = "error" if unfinished else "in_progress"
        else:
            ok = self.status in (ToolStatus.OK, ToolStatus.PENDING)
            chunk["status"] = "complete" if ok else "error"
        if self.args:
            chunk["details"] = escape_markdown(self.args)
        output = copy.TOOL_NOT_FINISHED if unfinished and self.status is None else self.output()
        if output:
            chunk["output"] = escape_markdown(output)
        return chunk

    def line(self, *, unfinished: bool = False) -> str:
        marks = {
            ToolStatus.OK: "✓",
            ToolStatus.FAILED: "✗",
            ToolStatus.DENIED: "⛔",
            ToolStatus.PENDING: "⏸",
        }
        if self.status is None:
            mark, tail = ("✗", copy.TOOL_NOT_FINISHED) if unfinished else ("⏳", "")
        else:
            mark, tail = marks[self.status], self.output()
        args = f" {escape(truncate(self.args, TASK_ARGS_CHARS))}" if self.args else ""
        tail = f" {escape(truncate(tail, TASK_OUTPUT_CHARS))}" if tail else ""
        return f"• `{escape(self.name)}`{args} {mark}{tail}"


def footer_blocks(text: str) -> list[Json]:
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}]


def stop_button_block(session_key: str, block_id: str = STOP_ACTION_ID) -> Json:
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [
            {
                "type": "button",
                "action_id": STOP_ACTION_ID,
                "text": {"type": "plain_text", "text": copy.STOP_BUTTON},
                "style": "danger",
                "value": session_key,
            }
        ],
    }


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_messages(mrkdwn: str) -> list[tuple[str, list[Json]]]:
    """(fallback text, section blocks) per message: sections ≤ 3,000 characters, split at
    paragraph boundaries, ≤ 50 blocks and ≤ 12,000 characters per message."""
    messages: list[tuple[str, list[Json]]] = []
    parts: list[str] = []
    size = 0
    for part in split_text(mrkdwn, SECTION_LIMIT):
        if parts and (len(parts) >= MAX_BLOCKS or size + len(part) > ANSWER_MESSAGE_CHARS):
            messages.append(_answer_message(parts))
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 2
    if parts:
        messages.append(_answer_message(parts))
    return messages


def _answer_message(parts: list[str]) -> tuple[str, list[Json]]:
    blocks: list[Json] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}} for part in parts if part
    ]
    return "\n\n".join(parts), blocks


# --------------------------------------------------------------------------- status


class StatusIndicator:
    """Shows that kelpie works on a message: the assistant thread status in DMs (Slack's
    AI-app threads live there; a workspace that refuses it is remembered), otherwise an
    `eyes` reaction replaced by `white_check_mark` or `x` at the end."""

    def __init__(
        self,
        client: AsyncWebClient,
        memory: WorkspaceMemory,
        session: SessionInfo,
        origin: TurnOrigin,
        *,
        reactions: bool,
    ) -> None:
        self._client = client
        self._memory = memory
        self._session = session
        self._origin = origin
        self._reactions = reactions
        self._kind: str | None = None

    async def start(self) -> None:
        session = self._session
        if session.is_dm and session.team_id not in self._memory.no_assistant_status_teams:
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=session.channel_id,
                    thread_ts=session.thread_ts,
                    status=copy.ASSISTANT_STATUS,
                )
                self._kind = "assistant"
                return
            except SLACK_FAILURES as error:
                log.info("assistant status refused (%s); using reactions", error_code(error))
                if isinstance(error, SlackApiError):
                    self._memory.no_assistant_status_teams.add(session.team_id)
        # A turn no person's message prompted (after a decision) has nothing to react to.
        if not self._reactions or self._origin.message_ts is None:
            return
        # The first reply must not wait for a reaction: under a burst the thread's own
        # messages show that kelpie works on it.
        try:
            with without_waiting("reactions.add"):
                await self._react("reactions_add", "eyes")
        except BudgetSpent:
            log.info("no reaction on %s: the workspace's budget is spent", self._origin.message_ts)
            return
        self._kind = "reaction"

    def ending_calls(self, finish: TurnFinish) -> list[Json]:
        """The calls that show the turn over: the assistant status cleared, or the `eyes`
        reaction replaced by `white_check_mark` or `x` (as data: they may go out later)."""
        session = self._session
        if self._kind == "assistant":
            return [
                slack_call(
                    "assistant.threads.setStatus",
                    channel_id=session.channel_id,
                    thread_ts=session.thread_ts,
                    status="",
                )
            ]
        if self._kind != "reaction":
            return []
        ok = finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS)
        on = {"channel": session.channel_id, "timestamp": self._origin.message_ts}
        return [
            slack_call("reactions.remove", **on, name="eyes"),
            slack_call("reactions.add", **on, name="white_check_mark" if ok else "x"),
        ]

    async def _react(self, method: str, name: str) -> None:
        try:
            await getattr(self._client, method)(
                channel=self._session.channel_id, timestamp=self._origin.message_ts, name=name
            )
        except BudgetSpent:
            raise
        except SLACK_FAILURES as error:
            code = error_code(error)
            # A turn resumed on the same message (after a decision, or taken over) finds
            # its reaction there already, or gone: what Slack shows is what was asked for.
            if code != _REACTION_ALREADY.get(method):
                log.info("%s %s failed: %s", method, name, code)


# --------------------------------------------------------------------------- reporters


@dataclass
class TurnContext:
    client: AsyncWebClient
    memory: WorkspaceMemory
    pacer: ThreadPacer
    turns: ActiveTurns
    turn: ActiveTurn
    messages: TurnMessages  # records each message the turn shows in while it is open
    status: StatusIndicator
    sessions: AgentSessions
    interrupt: Interrupt | None
    model_name: str
    closing: ClosingCalls
    budget: SlackBudget = field(default_factory=lambda: SlackBudget(None, None))


class ThreadReporter:
    """What both renderings share: the timeline state, uploads, the end of the turn."""

    def __init__(self, ctx: TurnContext) -> None:
        self._ctx = ctx
        self._client = ctx.client
        self._channel = ctx.turn.channel_id
        self._thread_ts = ctx.turn.thread_ts
        self._tasks: dict[str, TaskLine] = {}
        self._rounds = 0
        self._tool_calls = 0
        self._started = time.monotonic()
        self._turn_started: TurnStarted | None = None
        self._uploads: set[asyncio.Task[None]] = set()
        self._closing_task: asyncio.Future[None] | None = None
        # Closing calls left for later: no room in the workspace's budget at the end.
        self._later: list[Json] = []

    async def emit(self, event: TurnEvent) -> None:
        # Never awaits Slack: the turn must not wait on (or be cancelled inside) a Slack call.
        if isinstance(event, TurnStarted):
            self._turn_started = event
        elif isinstance(event, RoundStarted):
            self._rounds = max(self._rounds, event.round_index + 1)
            self._on_round()
        elif isinstance(event, TextDelta):
            if event.text:
                self._on_text(event.text)
        elif isinstance(event, ToolStarted):
            task = TaskLine(event.tool_call_id, event.name, event.args_summary)
            self._tasks[event.tool_call_id] = task
            self._on_task(task)
        elif isinstance(event, ToolFinished):
            task = self._tasks.setdefault(
                event.tool_call_id, TaskLine(event.tool_call_id, event.name, "")
            )
            task.status = event.status
            task.summary = event.summary
            self._tool_calls += 1
            self._on_task(task)
            if event.attachment is not None and event.name.startswith(ATTACHMENT_TOOL_PREFIX):
                upload = asyncio.create_task(self._upload(event))
                self._uploads.add(upload)

    async def close(self, finished: TurnFinished) -> None:
        if self._closing_task is None:
            self._closing_task = asyncio.ensure_future(self._close(finished))
        # Shielded: a cancellation arriving now (a newer message) must not leave the
        # stream or the progress message half finished.
        await asyncio.shield(self._closing_task)

    async def _close(self, finished: TurnFinished) -> None:
        self._ctx.turns.discard(self._ctx.turn)
        try:
            if self._uploads:
                await asyncio.gather(*self._uploads, return_exceptions=True)
            await self._finish(finished)
        finally:
            await self._settle(finished)

    async def _settle(self, finished: TurnFinished) -> None:
        """The thread's status once the turn is over (its reaction, its agent session): now
        if its calls have room, else with the other calls left for later. Those go out
        once the budget has room, without the turn (which holds one of the bot's few places
        for running turns until it ends), and are kept with the turn's end meanwhile."""
        ctx = self._ctx
        if all(ctx.budget.room(method) for method in ENDING_METHODS):
            await ctx.closing.send(ctx.status.ending_calls(finished.finish))
            await ctx.sessions.end_turn(ctx.turn, awaiting_approval=finished.awaiting_approval)
        else:
            self._later += ctx.status.ending_calls(finished.finish)
            self._later += ctx.sessions.end_calls(ctx.turn, finished.awaiting_approval)
        if self._later:
            ctx.messages.deferred(await stored_calls(self._later))
            ctx.closing.later(self._later, ctx.messages.sent)

    # hooks for the renderings
    def _on_round(self) -> None: ...

    def _on_text(self, text: str) -> None: ...

    def _on_task(self, task: TaskLine) -> None: ...

    async def _finish(self, finished: TurnFinished) -> None: ...

    # shared helpers
    def _stats(self, finished: TurnFinished) -> TurnStats:
        if finished.stats.model:
            return finished.stats
        # An interrupted turn reports no stats; show what this reporter saw.
        return seen_stats(
            self._turn_started,
            self._ctx.model_name,
            self._rounds,
            self._tool_calls,
            time.monotonic() - self._started,
        )

    def _footer(self, finished: TurnFinished) -> str:
        return footer_line(self._stats(finished), finished.evidence)

    def _ending(self, finished: TurnFinished) -> str | None:
        """The sentence that ends the turn's text, if any."""
        if finished.stats.cut and finished.finish is not TurnFinish.ERROR:
            return copy.ANSWER_CUT_NOTE
        if finished.finish is TurnFinish.MAX_ITERATIONS:
            return copy.MAX_ITERATIONS_NOTE
        if finished.finish is TurnFinish.ERROR:
            return copy.error_answer(finished.error or copy.INTERNAL_ERROR)
        if finished.finish is TurnFinish.INTERRUPTED:
            stopper = self._ctx.turn.stopped_by
            return f"_{copy.stopped_by(stopper)}_" if stopper else f"_{copy.INTERRUPTED}_"
        return None

    def _header(self, finished: TurnFinished) -> str:
        if finished.finish is TurnFinish.INTERRUPTED:
            stopper = self._ctx.turn.stopped_by
            return copy.stopped_by(stopper) if stopper else copy.INTERRUPTED
        return {
            TurnFinish.STOP: copy.DONE,
            TurnFinish.MAX_ITERATIONS: copy.DONE_MAX_ITERATIONS,
            TurnFinish.ERROR: copy.FAILED,
        }[finished.finish]

    def _timeline(self, *, unfinished: bool = False) -> list[str]:
        lines = [task.line(unfinished=unfinished) for task in self._tasks.values()]
        if len(lines) > TIMELINE_LINES:
            hidden = len(lines) - TIMELINE_LINES + 1
            lines = [f"… {plural(hidden, 'earlier call')}", *lines[-(TIMELINE_LINES - 1) :]]
        return lines

    def _user_stopped(self) -> None:
        """Slack's own stop control ended the stream: stop the turn as the asker's Stop."""
        turn = self._ctx.turn
        if turn.stopped_by is None:
            turn.stopped_by = turn.asker
        if self._ctx.interrupt is not None:
            self._ctx.interrupt(turn.session_key)

    async def _post_answer(self, mrkdwn: str, markdown: str | None = None) -> None:
        await ThreadWriter(self._client, self._channel, self._thread_ts).post(mrkdwn, markdown)

    async def _upload(self, event: ToolFinished) -> None:
        try:
            await self._client.files_upload_v2(
                channel=self._channel,
                thread_ts=self._thread_ts,
                content=event.attachment or "",
                filename=attachment_filename(event.name, self._tasks.get(event.tool_call_id)),
                title=copy.attachment_title(event.name),
            )
        except SLACK_FAILURES as error:
            log.error("could not upload the output of %s: %s", event.name, error_code(error))
        except Exception:
            log.exception("could not upload the output of %s", event.name)


def attachment_filename(tool: str, task: TaskLine | None) -> str:
    """What the person asked for (`show_logs-pod-api-1.log`), never the model's call id."""
    words = (task.args if task is not None else "").split()
    values = [word.partition("=")[2] or word for word in words]
    named = " ".join(value for value in values if value not in ("True", "False"))
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", named).strip("-.")[:60]
    return f"{tool}-{slug}.log" if slug else f"{tool}.log"


# --------------------------------------------------------------------------- writing text


class ThreadWriter:
    """Puts mrkdwn into a thread in messages Slack accepts: sections of ≤ 3,000 characters,
    ≤ 50 blocks and ≤ 11,500 characters a message, cut at paragraph and code-block
    boundaries. A part Slack still refuses for its size is retried in halves, then as plain
    text; an answer too long for messages goes up as a file with a short summary."""

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        *,
        filename: str = copy.ANSWER_FILE_NAME,
        title: str = copy.ANSWER_FILE_TITLE,
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._filename = filename
        self._title = title

    async def post(
        self, mrkdwn: str, markdown: str | None = None, extra_blocks: list[Json] | None = None
    ) -> None:
        if len(mrkdwn) > ANSWER_FILE_CHARS and await self._upload(mrkdwn, markdown or mrkdwn):
            mrkdwn = summary(mrkdwn, self._title)
        messages = answer_messages(mrkdwn)
        for index, (text, blocks) in enumerate(messages):
            last = index == len(messages) - 1
            await self._post_part(text, blocks + (extra_blocks or []) if last else blocks)

    async def replace(self, ts: str, mrkdwn: str, extra_blocks: list[Json]) -> bool:
        """Make the message at `ts` show `mrkdwn` (and the rest in messages below it)."""
        (text, blocks), *rest = answer_messages(mrkdwn)
        blocks = blocks if rest else blocks + extra_blocks
        try:
            await self._client.chat_update(
                channel=self._channel,
                ts=ts,
                text=truncate(text, UPDATE_TEXT_LIMIT),
                blocks=blocks or footer_blocks(copy.CONTINUED_BELOW),
            )
        except SLACK_FAILURES as error:
            log.warning("could not finish the message %s: %s", ts, error_code(error))
            return False
        for index, (more_text, more_blocks) in enumerate(rest):
            last = index == len(rest) - 1
            await self._post_part(more_text, more_blocks + extra_blocks if last else more_blocks)
        return True

    async def _post_part(self, text: str, blocks: list[Json]) -> None:
        try:
            await self._client.chat_postMessage(
                channel=self._channel,
                thread_ts=self._thread_ts,
                text=truncate(text, POST_TEXT_LIMIT),
                blocks=blocks,
            )
            return
        except SLACK_FAILURES as error:
            code = error_code(error)
            if code not in SIZE_REFUSALS:
                log.error("could not post part of the answer: %s", code)
                return
            log.warning("Slack refused a %d-character part (%s); retrying smaller", len(text), code)
        if len(text) > MIN_PART_CHARS:
            for half in split_text(text, len(text) // 2 + 1):
                for part_text, part_blocks in answer_messages(half):
                    await self._post_part(part_text, part_blocks)
            return
        try:
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=text
            )
        except SLACK_FAILURES as error:
            log.error("could not post part of the answer, even as text: %s", error_code(error))

    async def _upload(self, mrkdwn: str, markdown: str) -> bool:
        try:
            await self._client.files_upload_v2(
                channel=self._channel,
                thread_ts=self._thread_ts,
                content=markdown,
                filename=self._filename,
                title=self._title,
            )
        except SLACK_FAILURES as error:
            log.warning("could not upload the long answer (%s); posting it", error_code(error))
            return False
        return True


def summary(mrkdwn: str, title: str = copy.ANSWER_FILE_TITLE) -> str:
    """The opening of a long text (whole paragraphs where they fit) and where the rest is."""
    opening = split_text(mrkdwn, SUMMARY_CHARS)[0]
    return f"{opening}\n\n{copy.in_file(title, len(mrkdwn))}"
