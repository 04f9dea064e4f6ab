"""The native rendering: one streamed message per turn (chat.startStream / appendStream /
stopStream) with a task card per tool call and the answer streamed in bursts."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.agent.events import (
    TurnFinish,
    TurnFinished,
)
from bot.slack import copy
from bot.slack.markdown import StreamLinks, cut, stream_cut, to_mrkdwn_async
from bot.slack.pacing import BudgetSpent, without_waiting
from bot.slack.progress.common import (
    SLACK_FAILURES,
    STREAM_GONE,
    STREAM_SEGMENT_LIMIT,
    STREAM_TEXT_LIMIT,
    USER_STOPPED,
    Json,
    ThreadSlot,
    error_code,
)
from bot.slack.progress.render import TaskLine, footer_blocks
from bot.slack.progress.reporter import ThreadReporter, TurnContext
from bot.slack.progress.writer import ThreadWriter
from bot.slack.safe_text import escape_markdown, escape_mrkdwn

log = logging.getLogger(__name__)

# `NativeReporter.start`'s answer when the stream's start would wait for budget.
BUDGET_SPENT = "budget_spent"


class NativeReporter(ThreadReporter):
    """One turn as a native Slack stream (plus a small Stop message below it)."""

    def __init__(self, ctx: TurnContext) -> None:
        super().__init__(ctx)
        self._ts: str | None = None
        self._pending: list[Json] = []
        self._wake = asyncio.Event()
        # Set when the turn ends: a paced append still waiting for its turn gives way to
        # the final write, which takes what is pending (and is not paced).
        self._closing = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._any_text = False
        self._round_text = False  # the current round streamed text
        self._gap = False
        # What the current stream message shows, to finish it by chat.update if needed.
        self._segment_text: list[str] = []
        self._segment_tasks: list[str] = []
        self._dead = False  # the stream takes no more appends (stopped by the user)
        self._lost = False  # some answer text may not have reached Slack
        self._links = StreamLinks()  # a link shows its real address here too

    async def start(self) -> str | None:
        """Start the stream; the Slack error code when the workspace refuses it, or
        BUDGET_SPENT when its start would wait for the workspace's Tier 2 budget (nothing
        was sent)."""
        try:
            async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                with without_waiting("chat.startStream"):
                    self._ts = await self._start_stream(slot, [_plan(copy.PLAN_WORKING)])
        except BudgetSpent:
            return BUDGET_SPENT
        except SLACK_FAILURES as error:
            return error_code(error)
        self._flusher = asyncio.create_task(self._flush_loop())
        return None

    async def _start_stream(self, slot: ThreadSlot, chunks: list[Json]) -> str:
        turn = self._ctx.turn
        response = await self._ctx.pacer.call(
            slot,
            lambda: self._client.chat_startStream(
                channel=self._channel,
                thread_ts=self._thread_ts,
                recipient_team_id=turn.team_id or None,
                recipient_user_id=turn.asker,
                task_display_mode="plan",
                chunks=chunks,
            ),
            paced=False,
        )
        self._segment_text, self._segment_tasks = [], []
        self._record(chunks)
        ts = str(response["ts"])
        await self._ctx.messages.opened(ts)
        return ts

    # events → pending chunks
    def _queue(self, chunk: Json) -> None:
        last = self._pending[-1] if self._pending else None
        if chunk["type"] == "markdown_text" and last and last["type"] == "markdown_text":
            last["text"] += chunk["text"]
        else:
            self._pending.append(chunk)
        self._wake.set()

    def _on_round(self) -> None:
        self._queue_text(self._links.flush())
        self._gap = self._any_text
        self._round_text = False

    def _on_text(self, text: str) -> None:
        if self._gap:
            text, self._gap = "\n\n" + text, False
        self._any_text = self._round_text = True
        self._queue_text(self._links.feed(text))

    def _queue_text(self, text: str) -> None:
        # Model text is untrusted: escaped per piece (a character-local rewrite, so a
        # mention split across deltas is caught too); links were rewritten as they completed.
        if text:
            self._queue({"type": "markdown_text", "text": escape_mrkdwn(text)})

    def _on_task(self, task: TaskLine) -> None:
        self._queue_text(self._links.flush())
        self._queue(task.chunk())

    # writing
    async def _flush_loop(self) -> None:
        try:
            while not self._closing.is_set() and not self._dead:
                await self._wake.wait()
                await self._paced_turn()
                if self._closing.is_set():
                    return
                async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
                    self._wake.clear()
                    chunks, self._pending = self._pending, []
                    for batch in _batches(chunks):
                        await self._append(slot, batch)
        except Exception:
            log.exception("streaming progress failed; the answer will be posted as a message")
            self._lost = True

    async def _paced_turn(self) -> None:
        """Wait until an append may go (one paced write a second per thread) before taking
        what is pending, unless the turn ends first: then the final write takes it at once,
        so the answer's last words do not wait for the pace."""
        wait = self._ctx.pacer.paced_wait_s(self._channel, self._thread_ts)
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), wait)

    async def _append(self, slot: ThreadSlot, batch: list[Json]) -> None:
        """Append `batch`, going on in a new stream message where this one is full."""
        while True:
            if self._dead or self._ts is None:
                self._record(batch)
                return
            if not self._segment_text:
                batch = _trim_leading_gap(batch)
            head, rest = self._fit(batch)
            if head:
                await self._send(slot, head)
            if not rest:
                return
            await self._rotate(slot, expired=False)
            batch = rest

    def _fit(self, batch: list[Json]) -> tuple[list[Json], list[Json]]:
        """What of `batch` the current stream message still holds, and the rest."""
        sent = "".join(self._segment_text)
        head: list[Json] = []
        for index, chunk in enumerate(batch):
            if chunk["type"] != "markdown_text":
                head.append(chunk)
                continue
            fits, more = stream_cut(sent, chunk["text"], STREAM_SEGMENT_LIMIT - len(sent))
            if fits:
                head.append({"type": "markdown_text", "text": fits})
                sent += fits
            if more:
                return head, [{"type": "markdown_text", "text": more}, *batch[index + 1 :]]
        return head, []

    async def _send(self, slot: ThreadSlot, batch: list[Json]) -> None:
        ts = self._ts
        if ts is None:
            return
        batch = self._without_repeated_details(batch)
        try:
            await self._ctx.pacer.call(
                slot,
                lambda: self._client.chat_appendStream(channel=self._channel, ts=ts, chunks=batch),
                paced=True,
            )
            self._record(batch)
        except SLACK_FAILURES as error:
            code = error_code(error)
            if code in STREAM_GONE:
                log.info("stream %s ended on Slack's side; continuing in a new one", ts)
                await self._rotate(slot, expired=True, carry=batch)
            elif code == USER_STOPPED:
                self._dead = True
                self._record(batch)
                if not self._closing.is_set():
                    self._user_stopped()
            else:
                log.warning("chat.appendStream failed: %s", code)
                self._record(batch)
                self._lost = True

    def _without_repeated_details(self, batch: list[Json]) -> list[Json]:
        return _strip_repeated_details(batch, set(self._segment_tasks))

    def _record(self, chunks: list[Json]) -> None:
        for chunk in chunks:
            if chunk["type"] == "markdown_text":
                self._segment_text.append(chunk["text"])
            elif chunk["type"] == "task_update" and chunk["id"] not in self._segment_tasks:
                self._segment_tasks.append(chunk["id"])

    async def _rotate(
        self, slot: ThreadSlot, *, expired: bool, carry: list[Json] | None = None
    ) -> None:
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
                except SLACK_FAILURES as error:
                    if error_code(error) not in STREAM_GONE | {USER_STOPPED}:
                        raise
                    await self._finish_by_update(slot, old, copy.CONTINUED_BELOW, [], final=False)
            await self._ctx.messages.closed(old)
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
            self._ts = await self._start_stream(slot, _strip_repeated_details(chunks, set()))
        except SLACK_FAILURES as error:
            log.warning("could not start a new stream: %s", error_code(error))
            self._ts = None
            self._lost = True

    async def _finish_by_update(
        self, slot: ThreadSlot, ts: str, tail: str, extra_blocks: list[Json], *, final: bool = True
    ) -> None:
        """Finish a stream message Slack no longer streams with what it showed (what does not
        fit in one message goes on in messages below it)."""
        tasks = [
            self._tasks[i].line(unfinished=final) for i in self._segment_tasks if i in self._tasks
        ]
        # The model's text was escaped as it arrived (`_on_text`): raw tokens are kelpie's.
        text = await to_mrkdwn_async("".join(self._segment_text), keep_slack_tokens=True)
        parts = ["\n".join(tasks), text, tail]
        body = "\n\n".join(part for part in parts if part.strip())
        writer = ThreadWriter(self._client, self._channel, self._thread_ts)
        replaced = await self._ctx.pacer.call(
            slot, lambda: writer.replace(ts, body, extra_blocks), paced=True
        )
        if not replaced:
            self._lost = True

    async def _finish(self, finished: TurnFinished) -> None:
        self._queue_text(self._links.flush())
        self._closing.set()
        self._wake.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        chunks = [*self._pending]
        self._pending = []
        chunks += [
            task.chunk(unfinished=True) for task in self._tasks.values() if task.status is None
        ]
        tail: list[str] = []
        if finished.finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS):
            # An answer the engine gave without streaming it (e.g. after a presentation).
            if not self._round_text and finished.answer.strip():
                tail.append(escape_markdown(finished.answer.strip()))
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
        blocks = [*footer_blocks(self._footer(finished)), *self._answer_blocks(finished)]
        async with self._ctx.pacer.hold(self._channel, self._thread_ts) as slot:
            await self._stop(slot, _plan(_plan_title(finished.finish)), chunks, blocks)
        if not self._lost:
            return
        # Some of the stream may not have reached Slack: post the outcome as a message too.
        if finished.finish in (TurnFinish.STOP, TurnFinish.MAX_ITERATIONS):
            answer = finished.answer.strip()
            mrkdwn = await to_mrkdwn_async(answer) or copy.EMPTY_ANSWER
            await self._post_answer(mrkdwn, answer, self._feedback(finished))
        elif finished.finish is TurnFinish.ERROR:
            await self._post_answer(copy.error_answer(finished.error or copy.INTERNAL_ERROR))

    async def _stop(
        self, slot: ThreadSlot, plan: Json, chunks: list[Json], blocks: list[Json]
    ) -> None:
        batches = _batches(chunks)
        last = batches.pop() if batches else []
        for batch in batches:
            await self._append(slot, batch)
        if not self._segment_text:
            last = _trim_leading_gap(last)
        if self._fit(last)[1]:
            # Not room enough in this message: the text goes on in new ones first.
            await self._append(slot, last)
            last = []
        ts = self._ts
        if ts is None:
            return
        last = [plan, *self._without_repeated_details(last)]
        if await self._end_message(slot, ts, last, blocks):
            await self._ctx.messages.closed(ts)

    async def _end_message(
        self, slot: ThreadSlot, ts: str, last: list[Json], blocks: list[Json]
    ) -> bool:
        """Stop the stream at `ts` with `last` (finished by an edit where Slack ended it);
        False when it stays open (whoever takes over after a shutdown closes it)."""
        if not self._dead:
            try:
                await self._ctx.pacer.call(
                    slot,
                    lambda: self._client.chat_stopStream(
                        channel=self._channel, ts=ts, chunks=last, blocks=blocks
                    ),
                    paced=False,
                )
                return True
            except SLACK_FAILURES as error:
                code = error_code(error)
                if code not in STREAM_GONE and code != USER_STOPPED:
                    log.warning("chat.stopStream failed: %s", code)
                    self._record(last)
                    self._lost = True
                    return False
        self._record(last)
        await self._finish_by_update(slot, ts, "", blocks)
        return True


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


def _strip_repeated_details(batch: list[Json], shown: set[str]) -> list[Json]:
    """A task's details (its arguments) show once per message: Slack adds the details of
    every update to the task, so repeating them would print them twice."""
    out: list[Json] = []
    for chunk in batch:
        if chunk["type"] == "task_update" and "details" in chunk:
            if chunk["id"] in shown:
                chunk = {k: v for k, v in chunk.items() if k != "details"}
            shown.add(chunk["id"])
        out.append(chunk)
    return out
