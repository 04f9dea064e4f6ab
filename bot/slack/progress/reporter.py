"""The reporter base class both renderings (native, update) build on, and its context."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

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
from bot.agent.session import TurnMessages
from bot.slack import copy
from bot.slack.feedback_buttons import feedback_block
from bot.slack.progress.closing import ClosingCalls
from bot.slack.progress.common import (
    ATTACHMENT_TOOL_PREFIX,
    ENDING_METHODS,
    SLACK_FAILURES,
    TIMELINE_LINES,
    ActiveTurn,
    ActiveTurns,
    Interrupt,
    Json,
    SlackBudget,
    ThreadPacer,
    WorkspaceMemory,
    error_code,
    stored_calls,
)
from bot.slack.progress.indicator import StatusIndicator
from bot.slack.progress.render import TaskLine, attachment_filename
from bot.slack.progress.sessions import AgentSessions
from bot.slack.progress.writer import ThreadWriter

log = logging.getLogger(__name__)


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
    # The blocks a complete answer ends with (the Mark resolved button).
    answer_actions: list[Json] = field(default_factory=list)


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
            shown = event.attachment is not None or event.picture is not None
            if shown and event.name.startswith(ATTACHMENT_TOOL_PREFIX):
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

    def _answer_blocks(self, finished: TurnFinished) -> list[Json]:
        """What an answer ends with: its buttons (Record, Mark resolved) under a complete
        answer, then Slack's feedback buttons under any answer."""
        actions = self._ctx.answer_actions if finished.finish is TurnFinish.STOP else []
        return [*actions, *self._feedback(finished)]

    def _feedback(self, finished: TurnFinished) -> list[Json]:
        """Slack's feedback buttons, under an answer (not under an error or a stop)."""
        turn_id = self._ctx.turn.turn_id
        if not turn_id or finished.finish not in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS):
            return []
        return [feedback_block(turn_id, finished.evidence)]

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

    async def _post_answer(
        self, mrkdwn: str, markdown: str | None = None, extra_blocks: list[Json] | None = None
    ) -> None:
        writer = ThreadWriter(self._client, self._channel, self._thread_ts)
        await writer.post(mrkdwn, markdown, extra_blocks)

    async def _upload(self, event: ToolFinished) -> None:
        try:
            if event.picture is not None:
                # An image: its bytes as the file, its caption as the message it comes with.
                await self._client.files_upload_v2(
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    file=event.picture.png,
                    filename=event.picture.filename,
                    title=copy.attachment_title(event.name),
                    initial_comment=event.picture.caption,
                )
                return
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
