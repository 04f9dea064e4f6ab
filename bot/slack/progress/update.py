"""The update rendering: one progress message edited with chat.update at most once per
second per thread; the answer as its own message(s)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.agent.events import (
    TurnFinish,
    TurnFinished,
)
from bot.slack import copy
from bot.slack.markdown import (
    MAX_BLOCKS,
    section_blocks,
    to_mrkdwn_async,
)
from bot.slack.pacing import BudgetSpent, without_waiting
from bot.slack.progress.common import (
    SLACK_FAILURES,
    UPDATE_TEXT_LIMIT,
    Json,
    ThreadSlot,
    error_code,
    slack_call,
)
from bot.slack.progress.render import TaskLine, footer_blocks, stop_button_block, truncate
from bot.slack.progress.reporter import ThreadReporter, TurnContext

log = logging.getLogger(__name__)


class UpdateReporter(ThreadReporter):
    """The `chat.update` rendering: one progress message, edited at most once a second."""

    def __init__(self, ctx: TurnContext) -> None:
        super().__init__(ctx)
        self._progress_ts: str | None = None
        self._writing = False
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
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
        except SLACK_FAILURES as error:
            # Keep going: the answer is still posted at the end.
            log.error("could not post the progress message: %s", error_code(error))
            return
        await self._ctx.messages.opened(self._progress_ts)
        self._flusher = asyncio.create_task(self._flush_loop())

    def _on_round(self) -> None:
        if self._writing:
            self._writing = False
            self._wake.set()

    def _on_text(self, text: str) -> None:
        if not self._writing:
            self._writing = True
            self._wake.set()

    def _on_task(self, task: TaskLine) -> None:
        self._writing = False
        self._wake.set()

    async def _flush_loop(self) -> None:
        try:
            while not self._closing.is_set():
                await self._wake.wait()
                await self._paced_turn()
                if self._closing.is_set():
                    return
                async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                    # Cleared before the edit: events during it schedule the next one.
                    self._wake.clear()
                    # chat.update is Tier 3: under a burst an edit would wait, so it is
                    # left out; the next event or the turn's end shows everything since.
                    with contextlib.suppress(BudgetSpent), without_waiting("chat.update"):
                        await self._edit(slot, *self._render(None))
        except Exception:
            log.exception("progress updates failed")

    async def _paced_turn(self) -> None:
        """Wait until an edit may go (one a second per thread), unless the turn ends
        first: its answer does not wait for the pace."""
        wait = self._ctx.pacer.paced_wait_s(self._channel, self._thread_ts)
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), wait)

    async def _edit(self, slot: ThreadSlot, text: str, blocks: list[Json]) -> bool:
        ts = self._progress_ts
        if ts is None:
            return False
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_update(
                    channel=self._channel, ts=ts, text=text, blocks=blocks
                ),
                paced=True,
            )
        except SLACK_FAILURES as error:
            log.warning("progress update failed: %s", error_code(error))
            return False
        return True

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
            return truncate(body, UPDATE_TEXT_LIMIT), blocks
        line = self._footer(finished)
        blocks += footer_blocks(line)
        return truncate(body, UPDATE_TEXT_LIMIT - len(line) - 4) + f"\n_{line}_", blocks

    async def _finish(self, finished: TurnFinished) -> None:
        self._closing.set()
        self._wake.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        try:
            with without_waiting("chat.update"):
                await self._end_progress(finished)
        except BudgetSpent:
            # No room to edit now: the answer goes out first (a post, paced per channel
            # only); the progress message shows the end once the workspace's budget allows.
            await self._answer(finished)
            if self._progress_ts is not None:
                text, blocks = self._render(finished)
                self._later.append(
                    slack_call(
                        "chat.update",
                        channel=self._channel,
                        ts=self._progress_ts,
                        text=text,
                        blocks=blocks,
                    )
                )
            return
        await self._answer(finished)

    async def _end_progress(self, finished: TurnFinished) -> None:
        async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
            if await self._edit(slot, *self._render(finished)) and self._progress_ts:
                await self._ctx.messages.closed(self._progress_ts)

    async def _answer(self, finished: TurnFinished) -> None:
        if finished.finish is TurnFinish.INTERRUPTED:
            return
        if finished.finish is TurnFinish.ERROR:
            await self._post_answer(copy.error_answer(finished.error or copy.INTERNAL_ERROR))
            return
        markdown = finished.answer.strip()
        answer = await to_mrkdwn_async(markdown) or copy.EMPTY_ANSWER
        if finished.finish is TurnFinish.MAX_ITERATIONS:
            answer = f"{copy.MAX_ITERATIONS_NOTE}\n\n{answer}"
        if finished.stats.cut:
            answer = f"{answer}\n\n{copy.ANSWER_CUT_NOTE}"
        await self._post_answer(answer, markdown, self._answer_blocks(finished))
