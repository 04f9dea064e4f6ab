"""Shows a turn in its thread: one progress message edited as tools run, then the answer.

Edits are coalesced: at most one `chat.update` per second per progress message, whatever
the number of events, so Slack API calls grow with tool calls, not with tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.conversation import SessionInfo
from bot.agent.events import (
    ToolFinished,
    ToolStarted,
    ToolStatus,
    TurnEvent,
    TurnFinish,
    TurnFinished,
    TurnStats,
)
from bot.agent.session import IncomingMessage
from bot.slack import copy

log = logging.getLogger(__name__)

MIN_EDIT_INTERVAL_S = 1.0
MAX_MESSAGE_CHARS = 3900
_STATUS_MARK = {ToolStatus.OK: "✓", ToolStatus.FAILED: "✗", ToolStatus.DENIED: "⛔"}


@dataclass
class _ToolLine:
    name: str
    args: str
    status: ToolStatus | None = None
    summary: str = ""

    def render(self) -> str:
        mark = "⏳" if self.status is None else _STATUS_MARK[self.status]
        args = f" {self.args}" if self.args else ""
        tail = f" {self.summary}" if self.summary else ""
        return f"• `{self.name}`{args} {mark}{tail}"


@dataclass
class _Timeline:
    lines: dict[str, _ToolLine] = field(default_factory=dict)

    def render(self, header: str) -> str:
        body = "\n".join(line.render() for line in self.lines.values())
        return f"{header}\n{body}" if body else header


def footer(stats: TurnStats) -> str:
    tokens = f"{stats.input_tokens:,} in / {stats.output_tokens:,} out"
    if stats.tokens_estimated:
        tokens += " (estimated)"
    return (
        f"{stats.model} · {stats.rounds} rounds · {stats.tool_calls} tool calls · "
        f"{tokens} · {stats.duration_s:.1f} s"
    )


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Split at paragraph boundaries (then lines, then hard) so each part fits `limit`."""
    parts: list[str] = []
    current = ""
    for paragraph in text.split("\n\n"):
        candidate = f"{current}\n\n{paragraph}" if current else paragraph
        if len(candidate) <= limit:
            current = candidate
            continue
        if current:
            parts.append(current)
        while len(paragraph) > limit:
            cut = paragraph.rfind("\n", 0, limit)
            cut = cut if cut > 0 else limit
            parts.append(paragraph[:cut])
            paragraph = paragraph[cut:].lstrip("\n")
        current = paragraph
    if current:
        parts.append(current)
    return parts or [""]


class UpdateReporter:
    """The `chat.update` flavour of progress: one message, edited at most once a second."""

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._timeline = _Timeline()
        self._progress_ts: str | None = None
        self._last_edit = 0.0
        self._dirty = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        response = await self._client.chat_postMessage(
            channel=self._channel, thread_ts=self._thread_ts, text=copy.WORKING
        )
        self._progress_ts = response["ts"]
        self._last_edit = time.monotonic()
        self._flusher = asyncio.create_task(self._flush_loop())

    async def emit(self, event: TurnEvent) -> None:
        if isinstance(event, ToolStarted):
            self._timeline.lines[event.tool_call_id] = _ToolLine(event.name, event.args_summary)
        elif isinstance(event, ToolFinished):
            line = self._timeline.lines.setdefault(event.tool_call_id, _ToolLine(event.name, ""))
            line.status = event.status
            line.summary = event.summary
        else:
            return
        self._dirty.set()

    async def close(self, finished: TurnFinished) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        header = {
            TurnFinish.STOP: "Done.",
            TurnFinish.MAX_ITERATIONS: "Done (tool round budget used up).",
            TurnFinish.INTERRUPTED: copy.INTERRUPTED,
            TurnFinish.ERROR: "Stopped by an error.",
        }[finished.finish]
        text = self._timeline.render(header)
        if finished.stats.model:
            text += f"\n_{footer(finished.stats)}_"
        await self._edit(text)
        if finished.finish is TurnFinish.INTERRUPTED:
            return
        if finished.finish is TurnFinish.ERROR:
            answer = copy.error_answer(finished.error or copy.INTERNAL_ERROR)
        else:
            answer = finished.answer.strip() or copy.EMPTY_ANSWER
            if finished.finish is TurnFinish.MAX_ITERATIONS:
                answer = f"{copy.MAX_ITERATIONS_NOTE}\n\n{answer}"
        for part in split_message(answer):
            await self._post(part)

    async def _flush_loop(self) -> None:
        while True:
            await self._dirty.wait()
            await self._edit(self._timeline.render(copy.WORKING))

    async def _edit(self, text: str) -> None:
        if self._progress_ts is None:
            return
        wait = self._last_edit + MIN_EDIT_INTERVAL_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        # Clear before the call: events arriving during it schedule the next edit.
        self._dirty.clear()
        try:
            await self._client.chat_update(channel=self._channel, ts=self._progress_ts, text=text)
        except SlackApiError as error:
            log.warning("progress update failed: %s", error.response.get("error"))
        finally:
            self._last_edit = time.monotonic()

    async def _post(self, text: str) -> None:
        try:
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=text
            )
        except SlackApiError as error:
            log.error("could not post the answer: %s", error.response.get("error"))


class SlackReporters:
    """ReporterFactory for Slack threads."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def open(self, session: SessionInfo, message: IncomingMessage) -> UpdateReporter:
        reporter = UpdateReporter(self._client, session.channel_id, session.thread_ts)
        await reporter.start()
        return reporter
