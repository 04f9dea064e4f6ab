"""Memory a person confirms, in Slack: the Mark resolved button an answer ends with, the
card kelpie offers when a thread ends with a resolution (an alert resolved, a verified
write, Mark resolved) with the proposed memory and Remember / Discard, and the clicks on
them. An offer is stored before the model is asked, and taken over by another replica if
this one dies before its card is up. Only a click by a member of the channel
(conversations.members, asked at the click) counts: anyone else gets an ephemeral sentence
and nothing is stored. A decision is stored once (compare-and-set), with who decided and
when, on the audit chain, and logged.

The proposal itself is `bot/agent/memory.py`'s; the rows are `bot/store/memory.py`'s."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.memory import MemoryProposer
from bot.slack import copy
from bot.slack.inbox import Handled, marking_handled
from bot.slack.replies import whisper
from bot.slack.safe_text import one_line
from bot.store.memory import (
    IncidentMemories,
    MemoryStatus,
    ProposedMemory,
    Resolution,
    ResolutionTrigger,
    memory_of,
)
from bot.store.repositories import SessionRepository
from bot.store.tables import IncidentMemoryRow
from bot.values import SessionInfo

log = logging.getLogger(__name__)

MARK_RESOLVED_ACTION = "kelpie_mark_resolved"
REMEMBER_ACTION = "kelpie_memory_remember"
DISCARD_ACTION = "kelpie_memory_discard"
Json = dict[str, Any]
# How often a replica looks for offers a dead one left unfinished (one indexed query).
SWEEP_S = 60.0


def mark_resolved_button(session_key: str) -> Json:
    """The Mark resolved button of an answer (bot/slack/answer_buttons.py)."""
    return {
        "type": "button",
        "action_id": MARK_RESOLVED_ACTION,
        "text": {"type": "plain_text", "text": copy.MARK_RESOLVED_BUTTON},
        "value": session_key,
    }


def _card_text(memory: ProposedMemory) -> str:
    keys = [memory.namespace, *memory.workloads, *memory.alerts]
    lines = [
        copy.MEMORY_CARD_TITLE,
        f"*Symptom:* {one_line(memory.symptom)}",
        f"*Cause:* {one_line(memory.cause)}",
        f"*Fix:* {one_line(memory.fix)}",
        f"*Evidence:* {one_line(', '.join(memory.evidence) or '-')}"
        f"  *Keys:* {one_line(' '.join(k for k in keys if k) or '-')}",
    ]
    return "\n".join(lines)


def card_blocks(memory_id: int, text: str, footer: str, buttons: bool) -> list[Json]:
    blocks: list[Json] = [
        {
            "type": "section",
            "block_id": f"memory:{memory_id}",
            "text": {"type": "mrkdwn", "text": text},
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]},
    ]
    if buttons:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    _button(REMEMBER_ACTION, copy.REMEMBER_BUTTON, memory_id, "primary"),
                    _button(DISCARD_ACTION, copy.DISCARD_BUTTON, memory_id, None),
                ],
            }
        )
    return blocks


def _button(action: str, text: str, memory_id: int, style: str | None) -> Json:
    button: Json = {
        "type": "button",
        "action_id": action,
        "text": {"type": "plain_text", "text": text},
        "value": str(memory_id),
    }
    if style:
        button["style"] = style
    return button


class ChannelMembers:
    """Whether a person is in a channel, as Slack says at the click (every page read)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def member(self, channel: str, user: str) -> bool:
        cursor: str | None = None
        try:
            while True:
                answer = await self._client.conversations_members(
                    channel=channel, limit=200, cursor=cursor
                )
                if user in (answer.get("members") or []):
                    return True
                cursor = (answer.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    return False
        except SlackApiError as error:
            log.warning("conversations.members %s failed: %s", channel, error.response.get("error"))
            return False


class MemoryOffers:
    """Offers a memory when a thread resolves. The offer is stored first (`offer` returns
    once it is: a click's delivery is handled only then), then the low tier proposes and
    the card is posted in the background, a trigger never waiting on the model. `sweep`
    (at start and every `SWEEP_S`) takes over offers a dead replica left unfinished; `drain`
    at shutdown lets those under way finish."""

    def __init__(
        self,
        client: AsyncWebClient,
        memories: IncidentMemories,
        proposer: MemoryProposer,
        sessions: SessionRepository,
        clock: Callable[[], datetime],
        hold: timedelta,
    ) -> None:
        self._client = client
        self._memories = memories
        self._proposer = proposer
        self._sessions = sessions
        self._clock = clock
        self._hold = hold  # how long a replica holds an offer it is completing
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweeping(), name="memory-sweep")

    async def drain(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def offer(self, resolution: Resolution) -> None:
        """Store the offer (nothing more when this resolution was offered before: a double
        click costs no second model call), then complete it in the background."""
        session = await self._session(resolution)
        if session is None:
            log.info("no kelpie thread at %s: no memory offered", resolution.key)
            return
        until = self._clock() + self._hold
        memory_id = await self._memories.reserve(resolution, session.id, until)
        if memory_id is None:
            log.info("a memory of %s was offered before", resolution.key)
            return
        self._spawn(self._complete(memory_id))

    async def sweep(self) -> int:
        """Take over the offers whose holder's time ran out; how many."""
        now = self._clock()
        taken = 0
        for memory_id in await self._memories.unfinished(now):
            if await self._memories.claim(memory_id, now, now + self._hold):
                log.info("taking over incident memory offer %d", memory_id)
                self._spawn(self._complete(memory_id))
                taken += 1
        return taken

    async def _sweeping(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("could not look for unfinished memory offers")
            await asyncio.sleep(SWEEP_S)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name="memory-offer")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, memory_id: int) -> None:
        try:
            row = await self._memories.get(memory_id)
            if row is not None and row.status == MemoryStatus.OFFERING:
                await self._propose(row)
                row = await self._memories.get(memory_id)
            if row is None or row.status != MemoryStatus.PROPOSED or row.card_ts is not None:
                return
            # A replica killed between the post and this line leaves a card whose ts was
            # never stored: the takeover posts a second one. Both decide the same row once
            # (compare-and-set), and finding the first would cost Slack's history (1 call a
            # minute for most apps).
            await self._memories.carded(memory_id, await self._post(row))
            log.info("memory %d proposed in %s (%s)", memory_id, row.key, row.proposed_by)
        except Exception:
            log.exception("could not offer incident memory %d", memory_id)

    async def _propose(self, row: IncidentMemoryRow) -> None:
        session = await self._sessions.get(row.session_id) if row.session_id else None
        if session is None or row.id is None:
            raise LookupError(f"incident memory {row.id} has no session")
        memory = await self._proposer.propose(session.id, session.namespace, row.resolution)
        await self._memories.proposed(row.id, memory)

    async def _post(self, row: IncidentMemoryRow) -> str:
        assert row.id is not None
        text = _card_text(memory_of(row))
        answer = await self._client.chat_postMessage(
            channel=row.channel_id,
            thread_ts=row.thread_ts,
            text=text,
            blocks=card_blocks(row.id, text, copy.MEMORY_CARD_NOTE, buttons=True),
        )
        return str(answer.get("ts"))

    async def _session(self, resolution: Resolution) -> SessionInfo | None:
        if resolution.session_id is not None:
            return await self._sessions.get(resolution.session_id)
        if resolution.session_key is not None:
            return await self._sessions.find(resolution.session_key)
        return None


class MemoryClicks:
    """Mark resolved, Remember and Discard: each counts only from a member of the channel."""

    def __init__(
        self,
        app: AsyncApp,
        offers: MemoryOffers,
        memories: IncidentMemories,
        members: ChannelMembers,
        handled: Handled,
        clock: Callable[[], datetime],
    ) -> None:
        self._app = app
        self._offers = offers
        self._memories = memories
        self._members = members
        self._handled = handled
        self._clock = clock

    def register(self) -> None:
        self._app.action(MARK_RESOLVED_ACTION)(marking_handled(self._handled, self._on_resolved))
        self._app.action(REMEMBER_ACTION)(marking_handled(self._handled, self._on_remember))
        self._app.action(DISCARD_ACTION)(marking_handled(self._handled, self._on_discard))

    async def _member(self, body: dict[str, Any]) -> tuple[str, str, str] | None:
        """(user, channel, the button's value) of a click by a member of the channel."""
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id")
        value = ((body.get("actions") or [{}])[0]).get("value")
        if not (isinstance(user, str) and isinstance(channel, str) and isinstance(value, str)):
            log.warning("ignoring a malformed memory click")
            return None
        if not await self._members.member(channel, user):
            log.info("memory click by %s, who is not in %s: nothing stored", user, channel)
            thread = ((body.get("message") or {}).get("thread_ts")) or None
            await whisper(self._app.client, channel, user, copy.MEMORY_NOT_MEMBER, thread)
            return None
        return user, channel, value

    async def _on_resolved(self, ack: Any, body: dict[str, Any], context: Any) -> None:
        await ack()
        clicked = await self._member(body)
        if clicked is None:
            return
        user, channel, session_key = clicked
        parts = session_key.split(":")
        message = body.get("message") or {}
        if len(parts) != 3 or parts[1] != channel:
            log.warning("ignoring a Mark resolved click for another thread")
            return
        resolution = Resolution(
            channel_id=channel,
            thread_ts=parts[2],
            trigger=ResolutionTrigger.MARKED_RESOLVED,
            ref=str(message.get("ts") or parts[2]),
            by=user,
            session_key=session_key,
        )
        await self._offers.offer(resolution)  # stored before this click counts as handled

    async def _on_remember(self, ack: Any, body: dict[str, Any], context: Any) -> None:
        await ack()
        await self._decide(body, remember=True)

    async def _on_discard(self, ack: Any, body: dict[str, Any], context: Any) -> None:
        await ack()
        await self._decide(body, remember=False)

    async def _decide(self, body: dict[str, Any], *, remember: bool) -> None:
        clicked = await self._member(body)
        if clicked is None:
            return
        user, channel, value = clicked
        row = await self._memories.get(int(value)) if value.isdigit() else None
        if row is None or row.id is None or row.channel_id != channel:
            await whisper(self._app.client, channel, user, copy.MEMORY_UNKNOWN)
            return
        if not await self._memories.decide(row.id, remember, user, self._clock()):
            await whisper(self._app.client, channel, user, copy.MEMORY_ALREADY, row.thread_ts)
            return
        verdict = "remembered" if remember else "discarded"
        log.info("incident memory %d %s by %s in %s", row.id, verdict, user, channel)
        footer = (copy.MEMORY_REMEMBERED if remember else copy.MEMORY_DISCARDED).format(user=user)
        await self._show(row.id, channel, row.card_ts, body, footer)

    async def _show(
        self, memory_id: int, channel: str, card_ts: str | None, body: dict[str, Any], footer: str
    ) -> None:
        """The card without its buttons, saying who decided (best effort: it is stored)."""
        message = body.get("message") or {}
        ts = str(card_ts or message.get("ts") or "")
        blocks = message.get("blocks") or []
        text = str((blocks[0].get("text") or {}).get("text", "")) if blocks else ""
        try:
            await self._app.client.chat_update(
                channel=channel,
                ts=ts,
                text=f"{text}\n{footer}",
                blocks=card_blocks(memory_id, text, footer, buttons=False),
            )
        except SlackApiError as error:
            error_code = error.response.get("error")
            log.warning("could not update memory card %d: %s", memory_id, error_code)
