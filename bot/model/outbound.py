"""The outbound policy: the one masking step in front of everything that leaves kelpie or
is kept by it (model requests, Slack, logs, hooks, the database).

Masks secrets in text with the patterns of `secret_rules` (RE2: linear time, so no input
can stall it), scanning at most `MAX_SCAN_CHARS` per call and large texts in a worker
thread. Records what kind of secret was masked and where, never the value.

`MaskingGateway` is the request gateway in front of any `ModelGateway`: before each request
it masks every message, applies a size limit and keeps the exact payload it hands on (the
last one per session goes to a `PayloadSink`, for `/kelpie payload`). It does not choose
models and knows no SDK.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from bot.model.secret_rules import (
    ANY_RULE,
    RULES,
    SECRET_DATA_JSON,
    SECRET_DATA_JSON_VALUE,
    SECRET_DATA_YAML,
    YAML_ENTRY,
)
from bot.model.types import (
    ModelError,
    ModelGateway,
    ModelReply,
    ModelRequest,
    RequestTag,
    TextSink,
    ThinkingBlock,
)

log = logging.getLogger(__name__)

MASK = "[MASKED]"
# One call scans at most this much; the rest is cut, never passed on unscanned.
MAX_SCAN_CHARS = 2_000_000
# Texts longer than this are masked in a worker thread, off the event loop.
THREAD_THRESHOLD = 20_000


@dataclass(frozen=True)
class Masking:
    kind: str
    where: str


def mask_text(text: str, where: str = "") -> tuple[str, list[Masking]]:
    """Mask every secret in `text`; linear in its length (RE2), whatever it contains."""
    findings: list[Masking] = []
    text = _scannable(text)
    if "ata" in text:  # cheap pre-check for data / stringData
        text = _mask_secret_data(text, where, findings)
    if ANY_RULE.search(text) is None:
        # No rule matches anywhere, so each pass below would leave the text as it is: one
        # scan instead of one per rule (most texts, and every short Slack field).
        return text, findings
    for kind, pattern in RULES:

        def replace(match: Any, kind: str = kind, groups: int = pattern.groups) -> str:
            # The first value group that took part (quoted or bare), else the whole match.
            group = next((g for g in range(1, groups + 1) if match.start(g) >= 0), 0)
            value = match.group(group)
            if not value or value == MASK:
                return str(match.group(0))
            findings.append(Masking(kind, where))
            whole = match.group(0)
            start = match.start(group) - match.start(0)
            return str(whole[:start] + MASK + whole[start + len(value) :])

        text = pattern.sub(replace, text)
    return text, findings


def _scannable(text: str) -> str:
    """Within the scan cap, and valid Unicode: RE2 reads UTF-8, which a lone surrogate
    (from a JSON `\\ud800` escape) cannot be encoded to."""
    if len(text) > MAX_SCAN_CHARS:
        cut = len(text) - MAX_SCAN_CHARS
        text = text[:MAX_SCAN_CHARS] + f"\n[cut by kelpie: {cut:,} characters not scanned]"
    return valid_unicode(text)


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD: they cannot be encoded to UTF-8, so
    RE2, the database, a model request or Slack would fail on them."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


async def mask_text_async(text: str, where: str = "") -> tuple[str, list[Masking]]:
    """`mask_text`, in a worker thread when the text is large enough to matter."""
    if len(text) < THREAD_THRESHOLD:
        return mask_text(text, where)
    return await asyncio.to_thread(mask_text, text, where)


async def mask_value_async(value: Any, where: str = "") -> tuple[Any, list[Masking]]:
    """`mask_value`, in a worker thread when the value holds a lot of text."""
    if _size(value) < THREAD_THRESHOLD:
        return mask_value(value, where)
    return await asyncio.to_thread(mask_value, value, where)


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(_size(item) for item in value)
    if isinstance(value, dict):
        return sum(_size(item) for item in value.values())
    return 0


def _mask_secret_data(text: str, where: str, findings: list[Masking]) -> str:
    """Mask the values of Secret-style `data`/`stringData` maps (base64 in a Secret)."""
    if "Secret" not in text and "secret" not in text:
        return text

    def json_block(match: Any) -> str:
        def value(inner: Any) -> str:
            if not inner.group(2) or inner.group(2) == MASK:
                return str(inner.group(0))
            findings.append(Masking("secret_data", where))
            return str(inner.group(1) + MASK + inner.group(3))

        block = SECRET_DATA_JSON_VALUE.sub(value, match.group(1))
        return str(match.group(0).replace(match.group(1), block))

    text = SECRET_DATA_JSON.sub(json_block, text)
    if SECRET_DATA_YAML.search(text) is None:
        return text
    out: list[str] = []
    block_indent: int | None = None
    for line in text.split("\n"):
        if block_indent is not None:
            indent = len(line) - len(line.lstrip(" \t"))
            entry = YAML_ENTRY.match(line)
            if line.strip() and indent > block_indent and entry is not None:
                if entry.group(2) != MASK:
                    findings.append(Masking("secret_data", where))
                    line = entry.group(1) + MASK
                out.append(line)
                continue
            block_indent = None
        header = SECRET_DATA_YAML.match(line)
        if header is not None:
            block_indent = len(header.group(1))
        out.append(line)
    return "\n".join(out)


def mask_value(value: Any, where: str = "") -> tuple[Any, list[Masking]]:
    """Mask every string inside a JSON-like value (dicts, lists, strings)."""
    if isinstance(value, str):
        return mask_text(value, where)
    if isinstance(value, list):
        findings: list[Masking] = []
        items = []
        for index, item in enumerate(value):
            masked, found = mask_value(item, f"{where}[{index}]")
            items.append(masked)
            findings += found
        return items, findings
    if isinstance(value, dict):
        findings = []
        result = {}
        for key, item in value.items():
            masked, found = mask_value(item, f"{where}.{key}" if where else str(key))
            result[key] = masked
            findings += found
        return result, findings
    return value, []


class MaskingLogFilter(logging.Filter):
    """Masks every record that passes a handler: the message, its arguments and any
    traceback. Installed on handlers (a logger's filters miss records from child loggers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked, found = mask_text(message)
        if found or masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)[0]
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info)[0]
        return True


def install_log_masking(logger: logging.Logger | None = None) -> None:
    """Put a `MaskingLogFilter` on every handler of `logger` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, MaskingLogFilter) for f in handler.filters):
            handler.addFilter(MaskingLogFilter())


# --- the request gateway ---------------------------------------------------------------

MAX_MESSAGE_CHARS = 60_000
MAX_REQUEST_CHARS = 400_000


@dataclass(frozen=True)
class SentPayload:
    """Exactly what was handed to the provider gateway for one request (already masked),
    save the provider's thinking, which is masked here only (see `storable_thinking`)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reasoning_effort: str | None
    maskings: tuple[Masking, ...]
    tag: RequestTag | None = None
    cut_messages: tuple[int, ...] = field(default_factory=tuple)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The payload as JSON: indented for people, compact (`indent=None`, the fast C
        encoder) for storage."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.tools:
            body["tools"] = self.tools
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        return json.dumps(
            {
                "request": body,
                "masked": [{"kind": m.kind, "where": m.where} for m in self.maskings],
                "cut_messages": list(self.cut_messages),
            },
            indent=indent,
            ensure_ascii=False,
        )


def storable_thinking(blocks: tuple[ThinkingBlock, ...]) -> tuple[ThinkingBlock, ...]:
    """The thinking blocks that may be kept in the database, each exactly as the provider
    sent it: the provider refuses a block that differs from what it signed, so a masked one
    could never be sent back. The model only ever sees masked text, so its reasoning rarely
    holds anything secret-like; a block in which the masker finds something is dropped
    (never kept, masked or not), and a turn resumed without it may be refused by the
    provider. A redacted block is the provider's own ciphertext and is kept."""
    kept: list[ThinkingBlock] = []
    for block in blocks:
        if block.redacted_data is None and mask_text(block.thinking)[0] != block.thinking:
            log.info("a thinking block the masker changed was not stored")
            continue
        kept.append(block)
    return tuple(kept)


def _thinking_for_the_record(
    message: dict[str, Any], index: int, mask: Masker
) -> tuple[dict[str, Any], list[Masking]]:
    """The message with its thinking masked: it goes to the provider verbatim (signed), but
    the payload log is kept in the database and shown in Slack."""
    blocks = message.get("thinking_blocks")
    if not blocks:
        return message, []
    findings: list[Masking] = []
    masked_blocks = []
    for position, block in enumerate(blocks):
        text = block.get("thinking")
        if isinstance(text, str) and text:
            where = f"messages[{index}].thinking_blocks[{position}]"
            text, found = mask(text, where)
            findings += found
            block = {**block, "thinking": text}
        masked_blocks.append(block)
    return {**message, "thinking_blocks": masked_blocks}, findings


class PayloadSink(Protocol):
    async def keep(self, payload: SentPayload) -> None:
        """Remember the payload (the last one per session is enough)."""
        ...


Masker = Callable[[str, str], tuple[str, list[Masking]]]


def mask_messages(
    messages: list[dict[str, Any]], mask: Masker = mask_text
) -> tuple[list[dict[str, Any]], list[Masking]]:
    """Mask message contents and tool-call arguments; roles, ids and names stay as they are."""
    findings: list[Masking] = []
    masked: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        copy, found = mask_message(message, index, mask)
        masked.append(copy)
        findings += found
    return masked, findings


def mask_message(
    message: dict[str, Any], index: int, mask: Masker = mask_text
) -> tuple[dict[str, Any], list[Masking]]:
    """`mask_messages` for the message at `index` of a request."""
    findings: list[Masking] = []
    copy = dict(message)
    content = copy.get("content")
    if isinstance(content, str) and content:
        copy["content"], found = mask(content, f"messages[{index}].content")
        findings += found
    calls = copy.get("tool_calls")
    if calls:
        new_calls = []
        for position, call in enumerate(calls):
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                where = f"messages[{index}].tool_calls[{position}].arguments"
                function["arguments"], found = mask(arguments, where)
                findings += found
            new_calls.append({**call, "function": function})
        copy["tool_calls"] = new_calls
    return copy, findings


class MaskMemo:
    """Masked texts by their original, least recently used first, within `max_chars`.

    A conversation resends every earlier message in each round; with the memo each message
    is masked once, when it first leaves, so a round's masking does not grow with the
    length of the conversation. Findings are kept by kind and re-placed at each use."""

    def __init__(self, max_chars: int = 4_000_000) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self._entries: OrderedDict[str, tuple[str, tuple[str, ...]]] = OrderedDict()

    def missing(self, messages: list[dict[str, Any]]) -> list[str]:
        """The texts of `messages` the memo has not masked yet."""
        unseen: dict[str, None] = {}

        def collect(text: str, where: str) -> tuple[str, list[Masking]]:
            if text not in self._entries:
                unseen[text] = None
            return text, []

        mask_messages(messages, collect)
        return list(unseen)

    def add(self, text: str, masked: str, findings: list[Masking]) -> None:
        if text in self._entries or len(text) + len(masked) > self._max_chars:
            return
        self._entries[text] = (masked, tuple(f.kind for f in findings))
        self._chars += len(text) + len(masked)
        while self._chars > self._max_chars:
            old, (old_masked, _) = self._entries.popitem(last=False)
            self._chars -= len(old) + len(old_masked)

    def mask(self, text: str, where: str) -> tuple[str, list[Masking]]:
        """`mask_text`, answered from the memo when the text was masked before."""
        entry = self._entries.get(text)
        if entry is None:
            return mask_text(text, where)
        self._entries.move_to_end(text)
        return entry[0], [Masking(kind, where) for kind in entry[1]]

    def keep(self, text: str) -> str:
        """`text` masked, from the memo or masked now and remembered: the store keeps what
        the next request sends (a round's tool results), so it is masked once for both."""
        entry = self._entries.get(text)
        if entry is not None:
            self._entries.move_to_end(text)
            return entry[0]
        masked, findings = mask_text(text)
        self.add(text, masked, findings)
        return masked


def _mask_all(texts: list[str]) -> list[tuple[str, list[Masking]]]:
    return [mask_text(text) for text in texts]


@dataclass(frozen=True)
class Outbound:
    """One message of a request as it leaves: masked, cut to the per-message limit, its
    length as JSON (for the request's limit) and its form in the payload record."""

    source: dict[str, Any]  # held, so that no other message can take its id meanwhile
    index: int
    sent: dict[str, Any]
    recorded: dict[str, Any]
    maskings: tuple[Masking, ...]
    cut: bool
    json_chars: int


class OutboundCache:
    """Messages as they left, by the message object, least recently sent first.

    A turn resends all its earlier messages in every round, as the same objects (the
    conversation appends new ones and never changes one). Each is masked, cut, measured
    and recorded once, the first time it leaves at its position, so the gateway's work in
    a round is that of its new messages, not of the whole conversation."""

    def __init__(self, max_chars: int = 8_000_000) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self._entries: OrderedDict[int, Outbound] = OrderedDict()

    def get(self, message: dict[str, Any], index: int) -> Outbound | None:
        entry = self._entries.get(id(message))
        if entry is None or entry.source is not message or entry.index != index:
            return None
        self._entries.move_to_end(id(message))
        return entry

    def put(self, entry: Outbound) -> Outbound:
        old = self._entries.pop(id(entry.source), None)
        if old is not None:
            self._chars -= old.json_chars
        self._entries[id(entry.source)] = entry
        self._chars += entry.json_chars
        while self._chars > self._max_chars and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self._chars -= evicted.json_chars
        return entry


def _fresh(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of a cached message for the provider layer, down to its tool calls (what
    the masking made new for every request before the cache), so that a provider client
    that edits the messages it is given cannot change what the next round sends."""
    copy = dict(message)
    calls = copy.get("tool_calls")
    if calls:
        copy["tool_calls"] = [
            {**call, "function": dict(call.get("function") or {})} for call in calls
        ]
    return copy


def _json_list_chars(item_chars: list[int]) -> int:
    """`len(json.dumps(items))` from the items' own lengths: `[`, `]` and `, ` between."""
    return 2 + sum(item_chars) + 2 * max(len(item_chars) - 1, 0)


class MaskingGateway:
    """Wraps a ModelGateway: masks, limits and records every request before it leaves."""

    def __init__(
        self,
        inner: ModelGateway,
        sink: PayloadSink | None = None,
        *,
        max_message_chars: int = MAX_MESSAGE_CHARS,
        max_request_chars: int = MAX_REQUEST_CHARS,
        memo: MaskMemo | None = None,
    ) -> None:
        self._inner = inner
        self._sink = sink
        self._max_message_chars = max_message_chars
        self._max_request_chars = max_request_chars
        self.last_payload: SentPayload | None = None
        # Shared with the store (`app.py`), which masks what it keeps with the same memo.
        self._memo = memo or MaskMemo()
        self._sent = OutboundCache()
        self._tools: tuple[list[dict[str, Any]], int] | None = None

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelReply:
        outbound = await self._outbound(request.messages)
        size = _json_list_chars([m.json_chars for m in outbound]) + self._tools_chars(request.tools)
        if size > self._max_request_chars:
            raise ModelError(
                f"The request is too large to send ({size:,} characters, limit "
                f"{self._max_request_chars:,}): ask a narrower question or start a new thread.",
                retryable=False,
                detail=f"request of {size} characters over the limit",
            )
        maskings = tuple(found for message in outbound for found in message.maskings)
        payload = SentPayload(
            model=self._inner.model_name,
            messages=[message.recorded for message in outbound],
            tools=list(request.tools),
            reasoning_effort=request.reasoning_effort,
            maskings=maskings,
            tag=request.tag,
            cut_messages=tuple(message.index for message in outbound if message.cut),
        )
        self.last_payload = payload
        if maskings:
            kinds = sorted({f.kind for f in maskings})
            log.info("masked %d secret(s) before a model request: %s", len(maskings), kinds)
        if self._sink is not None:
            try:
                await self._sink.keep(payload)
            except Exception:  # the payload log is a record, not a reason to fail the turn
                log.exception("could not keep the payload of a model request")
        messages = [_fresh(message.sent) for message in outbound]
        return await self._inner.complete(replace(request, messages=messages), on_text)

    async def _outbound(self, messages: list[dict[str, Any]]) -> list[Outbound]:
        """Each message as it leaves: from the cache, or prepared now when it is new."""
        cached = [self._sent.get(message, index) for index, message in enumerate(messages)]
        new = [messages[index] for index, entry in enumerate(cached) if entry is None]
        if new:
            await self._mask_new(new)
        return [
            entry or self._sent.put(self._prepare(messages[index], index))
            for index, entry in enumerate(cached)
        ]

    async def _mask_new(self, messages: list[dict[str, Any]]) -> None:
        """Mask the texts the memo has not seen into it, in a worker thread when large."""
        missing = self._memo.missing(messages)
        if _size(missing) < THREAD_THRESHOLD:
            results = _mask_all(missing)
        else:
            results = await asyncio.to_thread(_mask_all, missing)
        for text, (masked, found) in zip(missing, results, strict=True):
            self._memo.add(text, masked, found)

    def _prepare(self, message: dict[str, Any], index: int) -> Outbound:
        sent, maskings = mask_message(message, index, self._memo.mask)
        content = sent.get("content")
        cut = False
        if isinstance(content, str) and len(content) > self._max_message_chars:
            cut = True
            note = (
                f"\n[cut by kelpie: {len(content):,} characters, "
                f"limit {self._max_message_chars:,} per message]"
            )
            sent["content"] = content[: self._max_message_chars] + note
        recorded, thinking = _thinking_for_the_record(sent, index, self._memo.mask)
        return Outbound(
            message, index, sent, recorded, (*maskings, *thinking), cut, len(json.dumps(sent))
        )

    def _tools_chars(self, tools: list[dict[str, Any]]) -> int:
        """The tools' length as JSON; a turn sends the same tools (a copy of its list of the
        same objects) in every round."""
        known = self._tools
        if (
            known is None
            or len(known[0]) != len(tools)
            or any(a is not b for a, b in zip(known[0], tools, strict=True))
        ):
            known = self._tools = (list(tools), len(json.dumps(tools)))
        return known[1]
