"""Long threads keep working: a thread's history is reloaded by the tier's character budget
(not a fixed number of messages), and when it holds more than fits, its older rounds are
replaced in the request by one note kelpie writes:

- the thread's decisions as kelpie recorded them, verbatim (every approval: what, who
  asked, who decided what and when, the write's outcome, its verification);
- the evidence references the older rounds read (by turn: references restart each turn);
- a compact summary of the older rounds, made by the low tier (`agent.summary_profile`),
  kept in the store and extended with what came since at the next turn.

The stored messages are never changed; `/kelpie payload` shows the request as sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from bot.config import Tier
from bot.model.router import TIER_BUDGETS
from bot.model.types import ModelError, ModelGateway, ModelRequest
from bot.values import Message, Role

log = logging.getLogger(__name__)

# Of the history budget: the newest rounds as they are (the rest: the note).
RECENT_SHARE = 0.6
# The low tier's own budget bounds each summary request (the summary so far + a chunk).
SUMMARY_CHUNK_CHARS = TIER_BUDGETS[Tier.LOW].history_chars // 2
SUMMARY_PROMPT = (
    "You compact a Kubernetes incident thread between people and kelpie, an assistant. "
    "Write a compact summary (at most 15 short lines) of the conversation you are given, "
    "extending the summary so far: what was asked, what was found, what is still open. "
    "Keep names of namespaces, workloads and alerts exact. Do not invent anything."
)
NOTE_HEAD = (
    "[kelpie, not a person: this thread is long; its older rounds are not shown. What "
    "kelpie recorded of them follows, verbatim, then a summary of them.]"
)


class Window(Protocol):
    @property
    def messages(self) -> list[Message]: ...

    @property
    def chars(self) -> int: ...

    @property
    def first_id(self) -> int | None: ...


class ThreadMemoryPort(Protocol):
    """The store's side (`bot.store.compaction.ThreadMemory`)."""

    async def recent(
        self, session_id: int, budget_chars: int, before_turn: str | None
    ) -> Window: ...

    async def older(
        self, session_id: int, after_id: int, before_id: int
    ) -> list[tuple[int, Message]]: ...

    async def summary(self, session_id: int) -> tuple[int, str] | None: ...

    async def keep_summary(
        self, session_id: int, through_id: int, text: str, model: str
    ) -> None: ...

    async def decisions(self, session_id: int) -> list[str]: ...

    async def evidence(self, session_id: int, before_id: int) -> list[str]: ...


@dataclass(frozen=True)
class Compactor:
    memory: ThreadMemoryPort
    summarizer: ModelGateway  # the low tier's, masked like every request

    async def history(
        self, session_id: int, before_turn: str | None, available_chars: int
    ) -> list[Message]:
        """The thread's history within `available_chars`: the newest whole turns, and in
        front of them, when older ones were left out, kelpie's note on those."""
        recent_budget = int(max(available_chars, 0) * RECENT_SHARE)
        window = await self.memory.recent(session_id, recent_budget, before_turn)
        if window.first_id is None:
            return window.messages
        room = available_chars - window.chars
        note = await self._note(session_id, window.first_id, room)
        log.info(
            "session %s: older rounds (before message %s) compacted into a %d-char note",
            session_id,
            window.first_id,
            len(note),
        )
        return [Message(Role.USER, note), *window.messages]

    async def _note(self, session_id: int, first_id: int, room: int) -> str:
        decisions = await self.memory.decisions(session_id)
        evidence = await self.memory.evidence(session_id, first_id)
        parts = [NOTE_HEAD, "Decisions (kelpie's records):"]
        parts += [f"- {line}" for line in decisions] or ["- none"]
        fixed = "\n".join(parts)
        # Decisions always go whole; evidence and the summary share what room is left.
        left = room - len(fixed) - 200
        evidence_lines = _newest_within(evidence, max(left // 3, 0))
        if evidence_lines:
            fixed += "\nEvidence read in older rounds:\n" + "\n".join(
                f"- {line}" for line in evidence_lines
            )
        summary = await self._summary(session_id, first_id)
        left = room - len(fixed) - 100
        if summary and left > 0:
            cut = summary if len(summary) <= left else summary[: left - 1] + "…"
            fixed += "\nSummary of the older rounds (by a model; kelpie's records above win):\n"
            fixed += cut
        return fixed

    async def _summary(self, session_id: int, first_id: int) -> str:
        """The kept summary, extended to every message before `first_id`."""
        kept = await self.memory.summary(session_id)
        through, text = kept if kept is not None else (0, "")
        if through >= first_id - 1:
            return text
        older = await self.memory.older(session_id, through, first_id)
        for chunk in _chunks(older, SUMMARY_CHUNK_CHARS):
            try:
                text = await self._summarize(text, [m for _, m in chunk])
            except ModelError as error:
                log.warning("session %s: could not summarize older rounds: %s", session_id, error)
                return text
            await self.memory.keep_summary(
                session_id, chunk[-1][0], text, self.summarizer.model_name
            )
        return text

    async def _summarize(self, so_far: str, messages: list[Message]) -> str:
        lines = [f"{m.role}: {_said(m)}" for m in messages if _said(m)]
        prompt = f"Summary so far:\n{so_far or '(none)'}\n\nConversation:\n" + "\n".join(lines)
        request = ModelRequest(
            messages=[
                {"role": "system", "content": SUMMARY_PROMPT},
                {"role": "user", "content": prompt},
            ]
        )

        async def ignore(_: str) -> None:
            return None

        reply = await self.summarizer.complete(request, ignore)
        return reply.text.strip() or so_far


def _said(message: Message) -> str:
    if message.tool_calls:
        return "calls " + ", ".join(f"{c.name}({c.arguments[:120]})" for c in message.tool_calls)
    return (message.content or "")[:1500]


def _chunks(messages: list[tuple[int, Message]], limit: int) -> list[list[tuple[int, Message]]]:
    chunks: list[list[tuple[int, Message]]] = [[]]
    size = 0
    for item in messages:
        length = len(_said(item[1])) + 16
        if chunks[-1] and size + length > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += length
    return [chunk for chunk in chunks if chunk]


def _newest_within(lines: list[str], limit: int) -> list[str]:
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) + 3 > limit:
            break
        kept.insert(0, line)
        size += len(line) + 3
    return kept
