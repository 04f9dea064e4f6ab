"""Shows a turn in its Slack thread while it runs, and ends it cleanly.

Two renderings of one timeline (a line or task card per tool call, then the answer):

* **native** streaming: one streamed message per turn (`chat.startStream` /
  `chat.appendStream` / `chat.stopStream`) with a `task_update` chunk per tool call and the
  answer as `markdown_text`, sent in bursts: at most one append per second per thread,
  whatever the number of tokens. The final `stopStream` carries the footer. A stream that
  Slack ended on its side (`message_not_in_streaming_state`) is finished with `chat.update`
  and the turn goes on in a new stream, so no text is lost; `stopped_by_user` (Slack's own
  stop control) stops the turn as if the asker had pressed Stop. The Stop button sits on a
  small message right below the stream, deleted when the turn ends: `chat.stopStream` can
  add blocks to a streamed message but not take a button away.
* **update**: one progress message (with the Stop button) edited with `chat.update` at
  most once per second per thread, the answer posted as its own message(s) in mrkdwn.

`auto` tries native and falls back to update for a workspace whose API refuses the
streaming methods, and remembers that for later turns in the workspace.

Also owns: the status indicator (`eyes` → `white_check_mark`/`x` reactions, or the
assistant thread status in DMs: an event does not reliably say whether a DM is a Slack
assistant thread, so every DM tries it and a workspace that refuses it gets reactions
from then on), the registry of running turns the Stop button acts on
(the listener and who may stop live in `stop.py`), uploading the attachment of a `show_*`
tool as a file, and the footer. Slack API calls per turn grow with rounds and tool calls,
never with tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.agent.conversation import SessionInfo
from bot.agent.events import (
    RoundStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    ToolStatus,
    TurnEvent,
    TurnFinish,
    TurnFinished,
    TurnStats,
    footer_line,
    plural,
)
from bot.agent.session import IncomingMessage, Reporter
from bot.config import SlackConfig, StreamingMode
from bot.slack import copy
from bot.slack.markdown import (
    MAX_BLOCKS,
    SECTION_LIMIT,
    cut,
    escape,
    section_blocks,
    split_text,
    to_mrkdwn,
)

log = logging.getLogger(__name__)

STOP_ACTION_ID = "kelpie_stop"
# One paced write (an edit or an append) per thread per second: chat.update is Tier 3
# (~50/min per workspace) and several turns may run at once.
MIN_WRITE_INTERVAL_S = 1.0
STREAM_TEXT_LIMIT = 12_000  # markdown_text per stream call
# Slack truncates a message's text beyond 40,000 characters: start a new stream before.
STREAM_SEGMENT_LIMIT = 30_000
UPDATE_TEXT_LIMIT = 3_900  # chat.update refuses text over 4,000 characters
ANSWER_MESSAGE_CHARS = 12_000  # per answer message (in section blocks of ≤ 3,000)
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
USER_STOPPED = "stopped_by_user"
STOP_NOT_SUBSCRIBED = "not_subscribed_to_message_stream_stopped"

Interrupt = Callable[[str], bool]
Json = dict[str, Any]


# What a Slack call can raise once slack_sdk's retry handlers gave up.
_FAILURES = (SlackClientError, aiohttp.ClientError, TimeoutError)


def _code(error: BaseException) -> str:
    if isinstance(error, SlackApiError):
        return str(error.response.get("error") or "unknown_error")
    return type(error).__name__


# --------------------------------------------------------------------------- shared state


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: float = float("-inf")


class ThreadPacer:
    """Serialises the bot's writes to one thread and keeps paced writes (edits, appends)
    at least `interval_s` apart. The gap is measured from the end of the previous write, so
    it also holds where Slack receives them, retries after a 429 included."""

    def __init__(self, interval_s: float = MIN_WRITE_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._slots: dict[tuple[str, str], _Slot] = {}

    @asynccontextmanager
    async def hold(self, channel: str, thread_ts: str) -> AsyncIterator[_Slot]:
        self._prune()
        slot = self._slots.setdefault((channel, thread_ts), _Slot())
        async with slot.lock:
            yield slot

    async def call(
        self, slot: _Slot, call: Callable[[], Awaitable[AsyncSlackResponse]], *, paced: bool
    ) -> AsyncSlackResponse:
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
    # The turn's stream messages, so Slack's own stop control (an event naming the stopped
    # message) finds its turn.
    stream_ts: set[str] = field(default_factory=set)


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

    def by_stream(self, channel_id: str, ts: str) -> ActiveTurn | None:
        for turn in self._turns.values():
            if turn.channel_id == channel_id and ts in turn.stream_ts:
                return turn
        return None


@dataclass
class _WorkspaceMemory:
    """What kelpie learnt about workspaces while running (not persisted: a restart retries)."""

    update_only_teams: set[str] = field(default_factory=set)
    update_only_channels: set[tuple[str, str]] = field(default_factory=set)
    no_assistant_status_teams: set[str] = field(default_factory=set)
    # Workspaces where the app is not subscribed to message_stream_stopped, so streams
    # cannot offer Slack's own stop control (is_stoppable).
    no_stop_control_teams: set[str] = field(default_factory=set)


# --------------------------------------------------------------------------- rendering


@dataclass
class _Task:
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
        chunk: Json = {"type": "task_update", "id": self.tool_call_id, "title": self.name}
        if self.status is None:
            chunk["status"] = "error" if unfinished else "in_progress"
        else:
            chunk["status"] = "complete" if self.status is ToolStatus.OK else "error"
        if self.args:
            chunk["details"] = self.args
        output = copy.TOOL_NOT_FINISHED if unfinished and self.status is None else self.output()
        if output:
            chunk["output"] = output
        return chunk

    def line(self, *, unfinished: bool = False) -> str:
        marks = {ToolStatus.OK: "✓", ToolStatus.FAILED: "✗", ToolStatus.DENIED: "⛔"}
        if self.status is None:
            mark, tail = ("✗", copy.TOOL_NOT_FINISHED) if unfinished else ("⏳", "")
        else:
            mark, tail = marks[self.status], self.output()
        args = f" {escape(self.args)}" if self.args else ""
        tail = f" {escape(tail)}" if tail else ""
        return f"• `{self.name}`{args} {mark}{tail}"


def footer_blocks(text: str) -> list[Json]:
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}]


def stop_button_block(session_key: str) -> Json:
    return {
        "type": "actions",
        "block_id": STOP_ACTION_ID,
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


def _truncate(text: str, limit: int) -> str:
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
        memory: _WorkspaceMemory,
        message: IncomingMessage,
        *,
        reactions: bool,
    ) -> None:
        self._client = client
        self._memory = memory
        self._message = message
        self._reactions = reactions
        self._kind: str | None = None

    async def start(self) -> None:
        message = self._message
        if message.is_dm and message.team_id not in self._memory.no_assistant_status_teams:
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=message.channel_id,
                    thread_ts=message.thread_ts,
                    status=copy.ASSISTANT_STATUS,
                )
                self._kind = "assistant"
                return
            except _FAILURES as error:
                log.info("assistant status refused (%s); using reactions", _code(error))
                if isinstance(error, SlackApiError):
                    self._memory.no_assistant_status_teams.add(message.team_id)
        if self._reactions:
            await self._react("reactions_add", "eyes")
            self._kind = "reaction"

    async def finish(self, finish: TurnFinish) -> None:
        if self._kind == "assistant":
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=self._message.channel_id,
                    thread_ts=self._message.thread_ts,
                    status="",
                )
            except _FAILURES as error:
                log.info("could not clear the assistant status: %s", _code(error))
        elif self._kind == "reaction":
            await self._react("reactions_remove", "eyes")
            ok = finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS)
            await self._react("reactions_add", "white_check_mark" if ok else "x")

    async def _react(self, method: str, name: str) -> None:
        try:
            await getattr(self._client, method)(
                channel=self._message.channel_id, timestamp=self._message.ts, name=name
            )
        except _FAILURES as error:
            log.info("%s %s failed: %s", method, name, _code(error))


# --------------------------------------------------------------------------- reporters


@dataclass
class _TurnContext:
    client: AsyncWebClient
    memory: _WorkspaceMemory
    pacer: ThreadPacer
    turns: ActiveTurns
    turn: ActiveTurn
    message: IncomingMessage
    status: StatusIndicator
    interrupt: Interrupt | None
    model_name: str
    tier: str | None


class _ThreadReporter:
    """What both renderings share: the timeline state, uploads, the end of the turn."""

    def __init__(self, ctx: _TurnContext) -> None:
        self._ctx = ctx
        self._client = ctx.client
        self._channel = ctx.turn.channel_id
        self._thread_ts = ctx.turn.thread_ts
        self._tasks: dict[str, _Task] = {}
        self._rounds = 0
        self._tool_calls = 0
        self._started = time.monotonic()
        self._uploads: set[asyncio.Task[None]] = set()
        self._closing_task: asyncio.Future[None] | None = None

    async def emit(self, event: TurnEvent) -> None:
        # Never awaits Slack: the turn must not wait on (or be cancelled inside) a Slack call.
        if isinstance(event, RoundStarted):
            self._rounds = max(self._rounds, event.round_index + 1)
            self._on_round()
        elif isinstance(event, TextDelta):
            if event.text:
                self._on_text(event.text)
        elif isinstance(event, ToolStarted):
            task = _Task(event.tool_call_id, event.name, event.args_summary)
            self._tasks[event.tool_call_id] = task
            self._on_task(task)
        elif isinstance(event, ToolFinished):
            task = self._tasks.setdefault(
                event.tool_call_id, _Task(event.tool_call_id, event.name, "")
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
            await self._ctx.status.finish(finished.finish)

    # hooks for the renderings
    def _on_round(self) -> None: ...

    def _on_text(self, text: str) -> None: ...

    def _on_task(self, task: _Task) -> None: ...

    async def _finish(self, finished: TurnFinished) -> None: ...

    # shared helpers
    def _stats(self, finished: TurnFinished) -> TurnStats:
        if finished.stats.model:
            return finished.stats
        # An interrupted turn reports no stats; show what this reporter saw.
        return TurnStats(
            model=self._ctx.model_name,
            rounds=self._rounds,
            tool_calls=self._tool_calls,
            duration_s=time.monotonic() - self._started,
        )

    def _footer(self, finished: TurnFinished) -> str:
        stats = self._stats(finished)
        tier = getattr(stats, "tier", None) or self._ctx.tier
        return footer_line(stats, str(tier) if tier else None, finished.evidence)

    def _ending(self, finished: TurnFinished) -> str | None:
        """The sentence that ends the turn's text, if any."""
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

    async def _post_answer(self, mrkdwn: str) -> None:
        for text, blocks in answer_messages(mrkdwn):
            try:
                await self._client.chat_postMessage(
                    channel=self._channel, thread_ts=self._thread_ts, text=text, blocks=blocks
                )
            except _FAILURES as error:
                log.error("could not post the answer: %s", _code(error))

    async def _upload(self, event: ToolFinished) -> None:
        try:
            await self._client.files_upload_v2(
                channel=self._channel,
                thread_ts=self._thread_ts,
                content=event.attachment or "",
                filename=f"{event.name}-{event.tool_call_id}.log",
                title=copy.attachment_title(event.name),
            )
        except _FAILURES as error:
            log.error("could not upload the output of %s: %s", event.name, _code(error))
        except Exception:
            log.exception("could not upload the output of %s", event.name)


class NativeReporter(_ThreadReporter):
    """One turn as a native Slack stream (plus a small Stop message below it)."""

    def __init__(self, ctx: _TurnContext) -> None:
        super().__init__(ctx)
        self._ts: str | None = None
        self._control_ts: str | None = None
        self._pending: list[Json] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._any_text = False
        self._round_text = False  # the current round streamed text
        self._gap = False
        # What the current stream message shows, to finish it by chat.update if needed.
        self._segment_text: list[str] = []
        self._segment_tasks: list[str] = []
        self._dead = False  # the stream takes no more appends (stopped by the user)
        self._lost = False  # some answer text may not have reached Slack

    async def start(self) -> str | None:
        """Start the stream; the Slack error code when the workspace refuses it."""
        try:
            async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                self._ts = await self._start_stream(slot, [_plan(copy.PLAN_WORKING)])
        except _FAILURES as error:
            return _code(error)
        await self._post_control()
        self._flusher = asyncio.create_task(self._flush_loop())
        return None

    async def _start_stream(self, slot: _Slot, chunks: list[Json]) -> str:
        turn, memory = self._ctx.turn, self._ctx.memory
        # Offer Slack's own stop control where the app is subscribed to its event.
        stoppable = turn.team_id not in memory.no_stop_control_teams
        extra: dict[str, Any] = {"is_stoppable": True} if stoppable else {}
        try:
            response = await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_startStream(
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    recipient_team_id=turn.team_id or None,
                    recipient_user_id=turn.asker,
                    task_display_mode="plan",
                    chunks=chunks,
                    **extra,
                ),
                paced=False,
            )
        except SlackApiError as error:
            if not stoppable or _code(error) != STOP_NOT_SUBSCRIBED:
                raise
            log.info("no message_stream_stopped subscription: streams without stop control")
            memory.no_stop_control_teams.add(turn.team_id)
            return await self._start_stream(slot, chunks)
        self._segment_text, self._segment_tasks = [], []
        self._record(chunks)
        ts = str(response["ts"])
        turn.stream_ts.add(ts)
        return ts

    async def _post_control(self) -> None:
        try:
            response = await self._client.chat_postMessage(
                channel=self._channel,
                thread_ts=self._thread_ts,
                text=copy.STOP_HINT,
                blocks=[
                    {"type": "context", "elements": [{"type": "mrkdwn", "text": copy.STOP_HINT}]},
                    stop_button_block(self._ctx.turn.session_key),
                ],
            )
            self._control_ts = str(response["ts"])
        except _FAILURES as error:
            log.warning("could not post the Stop button: %s", _code(error))

    # events → pending chunks
    def _queue(self, chunk: Json) -> None:
        last = self._pending[-1] if self._pending else None
        if chunk["type"] == "markdown_text" and last and last["type"] == "markdown_text":
            last["text"] += chunk["text"]
        else:
            self._pending.append(chunk)
        self._wake.set()

    def _on_round(self) -> None:
        self._gap = self._any_text
        self._round_text = False

    def _on_text(self, text: str) -> None:
        if self._gap:
            text, self._gap = "\n\n" + text, False
        self._any_text = self._round_text = True
        self._queue({"type": "markdown_text", "text": text})

    def _on_task(self, task: _Task) -> None:
        self._queue(task.chunk())

    # writing
    async def _flush_loop(self) -> None:
        try:
            while not self._closing and not self._dead:
                await self._wake.wait()
                if self._closing:
                    return
                async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                    self._wake.clear()
                    chunks, self._pending = self._pending, []
                    for batch in _batches(chunks):
                        await self._append(slot, batch)
        except Exception:
            log.exception("streaming progress failed; the answer will be posted as a message")
            self._lost = True

    async def _append(self, slot: _Slot, batch: list[Json]) -> None:
        if self._dead or self._ts is None:
            self._record(batch)
            return
        if _text_size(self._segment_text) + _text_size(_texts(batch)) > STREAM_SEGMENT_LIMIT:
            await self._rotate(slot, expired=False)
            if self._ts is None:
                self._record(batch)
                return
        if not self._segment_text:
            batch = _trim_leading_gap(batch)
        ts = self._ts
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_appendStream(channel=self._channel, ts=ts, chunks=batch),
                paced=True,
            )
            self._record(batch)
        except _FAILURES as error:
            code = _code(error)
            if code in STREAM_GONE:
                log.info("stream %s ended on Slack's side; continuing in a new one", ts)
                await self._rotate(slot, expired=True, carry=batch)
            elif code == USER_STOPPED:
                self._dead = True
                self._record(batch)
                if not self._closing:
                    self._user_stopped()
            else:
                log.warning("chat.appendStream failed: %s", code)
                self._record(batch)
                self._lost = True

    def _record(self, chunks: list[Json]) -> None:
        for chunk in chunks:
            if chunk["type"] == "markdown_text":
                self._segment_text.append(chunk["text"])
            elif chunk["type"] == "task_update" and chunk["id"] not in self._segment_tasks:
                self._segment_tasks.append(chunk["id"])

    async def _rotate(self, slot: _Slot, *, expired: bool, carry: list[Json] | None = None) -> None:
        """End the current stream message and continue the turn in a new one."""
        old = self._ts
        if old is not None:
            if expired:
                await self._finish_by_update(slot, old, copy.CONTINUED_BELOW, [], final=False)
            else:
                try:
                    await self._ctx.pacer.call(
                        slot,
                        lambda: self._client.chat_stopStream(channel=self._channel, ts=old),
                        paced=False,
                    )
                except _FAILURES as error:
                    if _code(error) not in STREAM_GONE | {USER_STOPPED}:
                        raise
                    await self._finish_by_update(slot, old, copy.CONTINUED_BELOW, [], final=False)
        carry = carry or []
        carried_ids = {c["id"] for c in carry if c["type"] == "task_update"}
        # Calls still running show up again in the new message, then the carried content.
        running = [
            task.chunk()
            for task in self._tasks.values()
            if task.status is None and task.tool_call_id not in carried_ids
        ]
        chunks = [_plan(copy.PLAN_WORKING), *running, *_trim_leading_gap(carry)]
        try:
            self._ts = await self._start_stream(slot, chunks)
        except _FAILURES as error:
            log.warning("could not start a new stream: %s", _code(error))
            self._ts = None
            self._lost = True

    async def _finish_by_update(
        self, slot: _Slot, ts: str, tail: str, extra_blocks: list[Json], *, final: bool = True
    ) -> None:
        """Finish a stream message Slack no longer streams with what it showed."""
        tasks = [
            self._tasks[i].line(unfinished=final) for i in self._segment_tasks if i in self._tasks
        ]
        parts = ["\n".join(tasks), to_mrkdwn("".join(self._segment_text)), tail]
        body = "\n\n".join(part for part in parts if part.strip())
        blocks = section_blocks(body)[: MAX_BLOCKS - len(extra_blocks)] + extra_blocks
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_update(
                    channel=self._channel,
                    ts=ts,
                    text=_truncate(body, UPDATE_TEXT_LIMIT),
                    blocks=blocks,
                ),
                paced=True,
            )
        except _FAILURES as error:
            log.warning("could not finish the stream message %s: %s", ts, _code(error))
            self._lost = True

    async def _finish(self, finished: TurnFinished) -> None:
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        chunks = [_plan(_plan_title(finished.finish)), *self._pending]
        self._pending = []
        chunks += [
            task.chunk(unfinished=True) for task in self._tasks.values() if task.status is None
        ]
        tail: list[str] = []
        if finished.finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS):
            # An answer the engine gave without streaming it (e.g. after a presentation).
            if not self._round_text and finished.answer.strip():
                tail.append(finished.answer.strip())
            elif not self._any_text:
                tail.append(copy.EMPTY_ANSWER)
        ending = self._ending(finished)
        if ending:
            tail.append(ending)
        if tail:
            text = "\n\n".join(tail)
            chunks.append(
                {"type": "markdown_text", "text": f"\n\n{text}" if self._any_text else text}
            )
        blocks = footer_blocks(self._footer(finished))
        async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
            await self._stop(slot, chunks, blocks)
            await self._delete_control(slot)
        if not self._lost:
            return
        # Some of the stream may not have reached Slack: post the outcome as a message too.
        if finished.finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS):
            await self._post_answer(to_mrkdwn(finished.answer.strip()) or copy.EMPTY_ANSWER)
        elif finished.finish is TurnFinish.ERROR:
            await self._post_answer(copy.error_answer(finished.error or copy.INTERNAL_ERROR))

    async def _stop(self, slot: _Slot, chunks: list[Json], blocks: list[Json]) -> None:
        batches = _batches(chunks)
        for batch in batches[:-1]:
            await self._append(slot, batch)
        last = batches[-1] if batches else []
        ts = self._ts
        if ts is None:
            return
        if not self._segment_text:
            last = _trim_leading_gap(last)
        if self._dead:
            self._record(last)
            await self._finish_by_update(slot, ts, "", blocks)
            return
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_stopStream(
                    channel=self._channel, ts=ts, chunks=last, blocks=blocks
                ),
                paced=False,
            )
        except _FAILURES as error:
            code = _code(error)
            self._record(last)
            if code in STREAM_GONE or code == USER_STOPPED:
                await self._finish_by_update(slot, ts, "", blocks)
            else:
                log.warning("chat.stopStream failed: %s", code)
                self._lost = True

    async def _delete_control(self, slot: _Slot) -> None:
        control = self._control_ts
        if control is None:
            return
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_delete(channel=self._channel, ts=control),
                paced=False,
            )
        except _FAILURES as error:
            log.info("could not remove the Stop button: %s", _code(error))


class UpdateReporter(_ThreadReporter):
    """The `chat.update` rendering: one progress message, edited at most once a second."""

    def __init__(self, ctx: _TurnContext) -> None:
        super().__init__(ctx)
        self._progress_ts: str | None = None
        self._writing = False
        self._wake = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        text, blocks = self._render(None)
        try:
            async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                response = await self._ctx.pacer.call(
                    slot,
                    lambda: self._client.chat_postMessage(
                        channel=self._channel, thread_ts=self._thread_ts, text=text, blocks=blocks
                    ),
                    paced=False,
                )
            self._progress_ts = str(response["ts"])
        except _FAILURES as error:
            # Keep going: the answer is still posted at the end.
            log.error("could not post the progress message: %s", _code(error))
            return
        self._flusher = asyncio.create_task(self._flush_loop())

    def _on_round(self) -> None:
        if self._writing:
            self._writing = False
            self._wake.set()

    def _on_text(self, text: str) -> None:
        if not self._writing:
            self._writing = True
            self._wake.set()

    def _on_task(self, task: _Task) -> None:
        self._writing = False
        self._wake.set()

    async def _flush_loop(self) -> None:
        try:
            while not self._closing:
                await self._wake.wait()
                if self._closing:
                    return
                async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                    # Cleared before the edit: events during it schedule the next one.
                    self._wake.clear()
                    await self._edit(slot, *self._render(None))
        except Exception:
            log.exception("progress updates failed")

    async def _edit(self, slot: _Slot, text: str, blocks: list[Json]) -> None:
        ts = self._progress_ts
        if ts is None:
            return
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_update(
                    channel=self._channel, ts=ts, text=text, blocks=blocks
                ),
                paced=True,
            )
        except _FAILURES as error:
            log.warning("progress update failed: %s", _code(error))

    def _render(self, finished: TurnFinished | None) -> tuple[str, list[Json]]:
        if finished is None:
            header = copy.WRITING if self._writing else copy.WORKING
        else:
            header = f"*{self._header(finished)}*"
        lines = self._timeline(unfinished=finished is not None)
        body = "\n".join([header, *lines])
        blocks = section_blocks(body)[: MAX_BLOCKS - 1]
        if finished is None:
            blocks.append(stop_button_block(self._ctx.turn.session_key))
            return _truncate(body, UPDATE_TEXT_LIMIT), blocks
        line = self._footer(finished)
        blocks += footer_blocks(line)
        return _truncate(body, UPDATE_TEXT_LIMIT - len(line) - 4) + f"\n_{line}_", blocks

    async def _finish(self, finished: TurnFinished) -> None:
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
            await self._edit(slot, *self._render(finished))
        if finished.finish is TurnFinish.INTERRUPTED:
            return
        if finished.finish is TurnFinish.ERROR:
            await self._post_answer(copy.error_answer(finished.error or copy.INTERNAL_ERROR))
            return
        answer = to_mrkdwn(finished.answer.strip()) or copy.EMPTY_ANSWER
        if finished.finish is TurnFinish.MAX_ITERATIONS:
            answer = f"{copy.MAX_ITERATIONS_NOTE}\n\n{answer}"
        await self._post_answer(answer)


def _plan(title: str) -> Json:
    return {"type": "plan_update", "title": title}


def _plan_title(finish: TurnFinish) -> str:
    return {
        TurnFinish.STOP: copy.PLAN_DONE,
        TurnFinish.MAX_ITERATIONS: copy.PLAN_DONE,
        TurnFinish.ERROR: copy.PLAN_FAILED,
        TurnFinish.INTERRUPTED: copy.PLAN_INTERRUPTED,
    }[finish]


def _trim_leading_gap(chunks: list[Json]) -> list[Json]:
    """A new stream message does not start with the blank lines that separated rounds."""
    for index, chunk in enumerate(chunks):
        if chunk["type"] == "markdown_text":
            text = chunk["text"].lstrip("\n")
            trimmed = [*chunks[:index], {**chunk, "text": text}, *chunks[index + 1 :]]
            return [c for c in trimmed if c["type"] != "markdown_text" or c["text"]]
    return chunks


def _texts(chunks: list[Json]) -> list[str]:
    return [c["text"] for c in chunks if c["type"] == "markdown_text"]


def _text_size(texts: list[str]) -> int:
    return sum(len(text) for text in texts)


def _batches(chunks: list[Json], limit: int = STREAM_TEXT_LIMIT) -> list[list[Json]]:
    """Group chunks into stream calls carrying at most `limit` characters of text each."""
    batches: list[list[Json]] = [[]]
    size = 0
    for chunk in chunks:
        if chunk["type"] != "markdown_text":
            batches[-1].append(chunk)
            continue
        for piece in cut(chunk["text"], limit):
            if size + len(piece) > limit and batches[-1]:
                batches.append([])
                size = 0
            batches[-1].append({"type": "markdown_text", "text": piece})
            size += len(piece)
    return [batch for batch in batches if batch]


# --------------------------------------------------------------------------- factory


class SlackReporters:
    """ReporterFactory for Slack threads: picks the rendering per workspace and keeps the
    registry of running turns for the Stop button."""

    def __init__(
        self,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        interrupt: Interrupt | None = None,
        model_name: str = "",
        tier: str | None = None,
    ) -> None:
        self._client = client
        self._config = config
        self._interrupt = interrupt
        self._model_name = model_name
        self._tier = tier
        self._pacer = ThreadPacer()
        self._memory = _WorkspaceMemory()
        self.turns = ActiveTurns()

    def mode_for(self, team_id: str, channel_id: str) -> StreamingMode:
        """The rendering the next turn in this channel gets."""
        configured = self._config.streaming
        if configured is StreamingMode.AUTO:
            if (
                team_id in self._memory.update_only_teams
                or (team_id, channel_id) in self._memory.update_only_channels
            ):
                return StreamingMode.UPDATE
            return StreamingMode.NATIVE
        return configured

    async def open(self, session: SessionInfo, message: IncomingMessage) -> Reporter:
        turn = ActiveTurn(
            session_key=session.session_key,
            asker=message.user,
            role=session.role,
            team_id=message.team_id,
            channel_id=session.channel_id,
            thread_ts=session.thread_ts,
        )
        self.turns.add(turn)
        status = StatusIndicator(
            self._client, self._memory, message, reactions=self._config.status_reactions
        )
        await status.start()
        ctx = _TurnContext(
            client=self._client,
            memory=self._memory,
            pacer=self._pacer,
            turns=self.turns,
            turn=turn,
            message=message,
            status=status,
            interrupt=self._interrupt,
            model_name=self._model_name,
            tier=self._tier,
        )
        if self.mode_for(message.team_id, session.channel_id) is StreamingMode.NATIVE:
            native = NativeReporter(ctx)
            refused = await native.start()
            if refused is None:
                return native
            self._remember_refusal(message, session.channel_id, refused)
        update = UpdateReporter(ctx)
        await update.start()
        return update

    def _remember_refusal(self, message: IncomingMessage, channel_id: str, code: str) -> None:
        log.warning("chat.startStream refused (%s); using chat.update for this turn", code)
        if self._config.streaming is not StreamingMode.AUTO:
            return
        if code in WORKSPACE_REFUSALS:
            self._memory.update_only_teams.add(message.team_id)
        elif code in CHANNEL_REFUSALS:
            self._memory.update_only_channels.add((message.team_id, channel_id))
