"""Incident records: `/kelpie record [thread link]` and the Record button on an answer post
a Markdown file in the thread: its timeline (questions, tools run and the evidence they
gave, approval cards with who decided and when, writes with before → after, verification
outcomes), the root cause as the thread concluded it, and follow-ups.

Made from what the store holds (`bot.store.record`), never by the model. The evidence is
named (its reference, tool and arguments), not quoted: the record shows no more of what
the cluster answered than the thread did. Masked again on the way out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.model.outbound import mask_text
from bot.slack import copy
from bot.slack.inbox import Handled, marking_handled
from bot.slack.progress.common import SLACK_FAILURES, error_code
from bot.slack.replies import whisper
from bot.store.audit import thread_of_link
from bot.store.memory import MEMORY_AUDIT_TOOL
from bot.store.record import ThreadRows, when
from bot.store.tables import MessageRow, aware, utcnow
from bot.values import ApprovalState, plan_from_json

log = logging.getLogger(__name__)

RECORD_ACTION = "kelpie_record"
_EVIDENCE = re.compile(r"^\[(E\d+)\]")
_FOLLOW_UPS = re.compile(r"follow[- ]?ups?|next steps?", re.IGNORECASE)
_EXCERPT = 240
# What could turn a person's or the model's words into a link, an image, HTML, a heading,
# code or emphasis in the record.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|~])")


@dataclass(frozen=True)
class Entry:
    at: datetime
    order: int  # ties: the order things were written in
    text: str


def record_markdown(rows: ThreadRows, made_by: str, now: datetime | None = None) -> str:
    """The whole record, masked."""
    thread = rows.thread
    questions = [m for m in rows.messages if _is_question(m)]
    title = _said(_asked(questions[0])) if questions else f"thread {thread.thread_ts}"
    head = [
        f"# Incident record: {title}",
        "",
        f"- Channel: {thread.channel_id} · thread {thread.thread_ts}",
        f"- Role: {thread.role} · cluster: {thread.cluster} · namespace: {thread.namespace or '-'}",
        f"- Started by @{thread.started_by} at {when(thread.created_at)}",
        f"- Record made by @{made_by} at {when(now or utcnow())}",
        "",
        "## Timeline",
        "",
    ]
    timeline = [f"- {when(e.at)} {e.text}" for e in sorted(_entries(rows), key=_key)]
    body = [
        *head,
        *(timeline or ["- (nothing stored)"]),
        "",
        "## Root cause (as the thread concluded it)",
        "",
        _root_cause(rows),
        "",
        "## Follow-ups",
        "",
        *(_follow_ups(rows) or ["- None recorded."]),
    ]
    return mask_text("\n".join(body) + "\n")[0]


def _key(entry: Entry) -> tuple[datetime, int]:
    return aware(entry.at), entry.order


def _line(text: str, limit: int = _EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _escaped(text: str) -> str:
    return _MARKDOWN.sub(r"\\\1", text)


def _said(text: str, limit: int = _EXCERPT) -> str:
    """Untrusted words on one line, shown as written: masked before they are escaped (a
    backslash could split a secret the mask would have found)."""
    return _escaped(_line(mask_text(text)[0], limit))


def _code(text: str) -> str:
    """`text` as one code span, whatever backticks it holds."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _is_question(message: MessageRow) -> bool:
    return message.role == "user" and bool(message.slack_user) and bool(message.content)


def _asked(message: MessageRow) -> str:
    """A person's words without the context line kelpie adds for the model."""
    return (message.content or "").split("\n\n[context] ")[0]


def _entries(rows: ThreadRows) -> list[Entry]:
    return [
        *_conversation(rows.messages),
        *_refusals(rows),
        *_approvals(rows),
        *_writes(rows),
        *_verifications(rows),
        *_memory_decisions(rows),
    ]


def _conversation(messages: tuple[MessageRow, ...]) -> list[Entry]:
    results = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
    entries: list[Entry] = []
    for n, message in enumerate(messages):
        if _is_question(message):
            text = f"**Question** (@{message.slack_user}): {_said(_asked(message))}"
        elif message.role == "assistant" and message.tool_calls_json:
            for call in json.loads(message.tool_calls_json):
                entries.append(Entry(message.created_at, n * 100, _tool_line(call, results)))
            continue
        elif message.role == "assistant" and message.content and message.complete:
            text = f"**Answer**: {_said(message.content)}"
        else:
            continue
        entries.append(Entry(message.created_at, n * 100, text))
    return entries


def _tool_line(call: dict[str, Any], results: dict[str, MessageRow]) -> str:
    function = call.get("function") or {}
    name = function.get("name") or call.get("name") or "?"
    arguments = _line(str(function.get("arguments") or call.get("arguments") or ""), 160)
    result = results.get(str(call.get("id")))
    content = (result.content or "") if result is not None else ""
    evidence = _EVIDENCE.match(content)
    if evidence:
        outcome = f"evidence [{evidence[1]}]"
    elif content.startswith("Not run yet"):
        outcome = "proposed (an approval card)"
    elif content.startswith(("Error", "Not executed")):
        outcome = "failed"
    else:
        outcome = "done" if result is not None else "no result"
    return f"**Tool** {_code(name)} {_code(arguments)} → {outcome}"


def _refusals(rows: ThreadRows) -> list[Entry]:
    return [
        Entry(
            audit.created_at,
            1,
            f"**Refused** `{audit.tool}` at {audit.stage}: {_said(audit.reason or '-')}",
        )
        for audit in rows.audits
        if audit.decision == "deny"
    ]


def _memory_decisions(rows: ThreadRows) -> list[Entry]:
    return [
        Entry(
            audit.created_at,
            4,
            f"**Memory {audit.decision}** by @{audit.slack_user}: {_said(audit.reason or '-')}",
        )
        for audit in rows.audits
        if audit.tool == MEMORY_AUDIT_TOOL
    ]


def _approvals(rows: ThreadRows) -> list[Entry]:
    entries = []
    for approval in rows.approvals:
        plan = plan_from_json(approval.plan_json)
        card = (
            f"**Approval card** `{approval.tool}`: {_said(plan.description)}"
            f" (asked by @{approval.requested_by}; reason: {_said(approval.reason or '-')})"
        )
        entries.append(Entry(approval.created_at, 2, card))
        if approval.status != ApprovalState.PENDING and approval.decided_at is not None:
            who = f" by @{approval.decided_by}" if approval.decided_by else ""
            entries.append(
                Entry(approval.decided_at, 3, f"**{approval.status.capitalize()}**{who}")
            )
    return entries


def _writes(rows: ThreadRows) -> list[Entry]:
    entries = []
    for write in rows.writes:
        if write.phase == "intent":
            text = (
                f"**Write** {write.target}: {_said(write.preview)} "
                f"(asked by @{write.requested_by}, approved by @{write.approved_by})"
            )
        else:
            state = "done" if write.ok else "failed"
            text = f"**Write {state}** {write.target}: {_said(write.result or write.preview)}"
        entries.append(Entry(write.created_at, 4, text))
    return entries


def _verifications(rows: ThreadRows) -> list[Entry]:
    return [
        Entry(
            watch.deadline if watch.verdict is None else watch.created_at,
            5,
            f"**Verification**: {_said(watch.verdict or 'still watching')}",
        )
        for watch in rows.watches
    ]


def _last_answer(rows: ThreadRows) -> str:
    answers = [
        m.content
        for m in rows.messages
        if m.role == "assistant" and m.content and m.complete and not m.tool_calls_json
    ]
    return answers[-1].strip() if answers else ""


def _root_cause(rows: ThreadRows) -> str:
    answer = _last_answer(rows)
    if not answer:
        return "The thread has no answer yet."
    paragraphs = [p.strip() for p in answer.split("\n\n") if p.strip()]
    named = [p for p in paragraphs if "root cause" in p.lower()]
    lines = mask_text(named[0] if named else answer)[0].splitlines()
    return "\n".join(_escaped(line) for line in lines)


def _follow_ups(rows: ThreadRows) -> list[str]:
    items = [
        f"- Decide the pending change: {_said(plan_from_json(a.plan_json).description)}"
        for a in rows.approvals
        if a.status == ApprovalState.PENDING
    ]
    items += [
        f"- Not recovered: {_said(w.verdict or '')}"
        for w in rows.watches
        if (w.verdict or "").startswith("Not recovered")
    ]
    items += [f"- The write failed: {w.target}" for w in rows.writes if not w.ok]
    return items + _answer_follow_ups(_last_answer(rows))


def _answer_follow_ups(answer: str) -> list[str]:
    """The bullets under the answer's "Follow-ups" / "Next steps" line, if it has one."""
    lines = answer.splitlines()
    for index, line in enumerate(lines):
        if _FOLLOW_UPS.search(line) and not line.lstrip().startswith(("-", "*", "•")):
            bullets: list[str] = []
            for item in lines[index + 1 :]:
                stripped = item.strip()
                if not stripped:
                    if bullets:
                        break
                    continue
                if not stripped.startswith(("-", "*", "•")) and not stripped[0].isdigit():
                    break
                bullets.append(
                    "- " + _escaped(mask_text(stripped.lstrip("-*•0123456789. ").strip())[0])
                )
            return bullets
    return []


# --- Posting ---


RowsOf = Callable[[int], Awaitable[ThreadRows | None]]


async def post_record(client: AsyncWebClient, rows: ThreadRows, made_by: str) -> bool:
    """The record uploaded as a Markdown file in its thread; False when Slack refused."""
    thread = rows.thread
    try:
        await client.files_upload_v2(
            channel=thread.channel_id,
            thread_ts=thread.thread_ts,
            content=record_markdown(rows, made_by),
            filename=f"kelpie-record-{thread.channel_id}-{thread.thread_ts}.md",
            title=copy.RECORD_TITLE,
            initial_comment=copy.record_posted(made_by),
        )
    except SLACK_FAILURES as error:
        log.error("could not upload the record of %s: %s", thread.session_key, error_code(error))
        return False
    log.info("%s had the record of %s posted", made_by, thread.session_key)
    return True


class RecordClicks:
    """The Record button on an answer (`kelpie_record`, its value the thread's session
    key): anyone in the channel may have the record posted in the thread."""

    def __init__(
        self,
        app: AsyncApp,
        find: Callable[[str], Awaitable[int | None]],
        rows: RowsOf,
        handled: Handled,
    ) -> None:
        self._app = app
        self._find = find
        self._rows = rows
        self._handled = handled

    def register(self) -> None:
        self._app.action(RECORD_ACTION)(marking_handled(self._handled, self._on_click))

    async def _on_click(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        action = (body.get("actions") or [{}])[0]
        channel = str((body.get("channel") or {}).get("id") or "")
        session_id = await self._find(str(action.get("value") or ""))
        rows = await self._rows(session_id) if session_id is not None else None
        if rows is None or rows.thread.channel_id != channel:
            await whisper(self._app.client, channel, user, copy.RECORD_NO_THREAD, None)
            return
        if not await post_record(self._app.client, rows, user):
            await whisper(self._app.client, channel, user, copy.RECORD_FAILED, None)


def record_button(session_key: str) -> dict[str, Any]:
    """The Record button of an answer (bot/slack/answer_buttons.py)."""
    return {
        "type": "button",
        "action_id": RECORD_ACTION,
        "text": {"type": "plain_text", "text": copy.RECORD_BUTTON},
        "value": session_key,
    }


class RecordCommand:
    """`/kelpie record [thread link]`: the linked thread (in this channel), or the
    person's latest thread with kelpie here; returns the ephemeral answer."""

    def __init__(
        self,
        client: AsyncWebClient,
        rows: RowsOf,
        latest: Callable[[str, str], Awaitable[int | None]],
        by_thread: Callable[[str, str], Awaitable[int | None]],
    ) -> None:
        self._client = client
        self._rows = rows
        self._latest = latest
        self._by_thread = by_thread

    async def __call__(self, channel_id: str, user: str, words: list[str]) -> str:
        if words:
            thread = thread_of_link(words[0])
            if thread is None:
                return copy.RECORD_BAD_LINK
            if thread[0] != channel_id:
                return copy.RECORD_OTHER_CHANNEL
            session_id = await self._by_thread(*thread)
        else:
            session_id = await self._latest(channel_id, user)
        rows = await self._rows(session_id) if session_id is not None else None
        if rows is None:
            return copy.RECORD_NO_THREAD
        if not await post_record(self._client, rows, user):
            return copy.RECORD_FAILED
        return copy.record_done(rows.thread.channel_id, rows.thread.thread_ts)
