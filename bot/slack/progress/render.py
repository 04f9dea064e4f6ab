"""How a turn's timeline and answer look in Slack: task lines, footer and Stop button
blocks, answer messages within Slack's limits, attachment names."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from bot.slack import copy
from bot.slack.markdown import (
    MAX_BLOCKS,
    SECTION_LIMIT,
    escape,
    split_text,
)
from bot.slack.progress.common import (
    ANSWER_MESSAGE_CHARS,
    STOP_ACTION_ID,
    TASK_ARGS_CHARS,
    TASK_OUTPUT_CHARS,
    Json,
)
from bot.slack.safe_text import escape_markdown
from bot.values import ToolStatus

log = logging.getLogger(__name__)


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


def attachment_filename(tool: str, task: TaskLine | None) -> str:
    """What the person asked for (`show_logs-pod-api-1.log`), never the model's call id."""
    words = (task.args if task is not None else "").split()
    values = [word.partition("=")[2] or word for word in words]
    named = " ".join(value for value in values if value not in ("True", "False"))
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", named).strip("-.")[:60]
    return f"{tool}-{slug}.log" if slug else f"{tool}.log"
