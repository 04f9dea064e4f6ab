"""What every provider client shares once a response streams in: OpenAI-shaped chunks
assembled into a `ModelReply`, and `<think>` blocks kept out of the visible text.

`StreamAssembly` reads a chunk's fields whether they are objects (LiteLLM's chunk types) or
plain dicts (JSON from the wire), so both clients use this one copy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bot.model.failures import broke_off
from bot.model.types import (
    FinishReason,
    ModelReply,
    ModelRequest,
    TextSink,
    Usage,
    estimate_usage,
)
from bot.values import ThinkingBlock, ToolCallRequest

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass
class _ToolCallParts:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _ThinkingParts:
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted_data: str | None = None


def _field(item: Any, name: str) -> Any:
    """A field of a chunk or one of its parts, whether it is a dict or an object."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


@dataclass
class StreamAssembly:
    """Accumulates streamed deltas: content, tool-call fragments by index, thinking blocks
    by index, finish_reason and the provider's usage report. Text is kept as its parts and
    joined once when read: appending to one string copies it on every delta, quadratic in
    a long answer of small deltas."""

    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    thinking: dict[int, _ThinkingParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any | None = None

    def take(self, chunk: Any) -> str:
        """Record one chunk; return its content delta."""
        usage = _field(chunk, "usage")
        if usage is not None:
            self.usage = usage
        choices = _field(chunk, "choices") or []
        if not choices:  # the usage chunk of `include_usage` has none
            return ""
        choice = choices[0]
        finish_reason = _field(choice, "finish_reason")
        if finish_reason:
            self.finish_reason = finish_reason
        delta = _field(choice, "delta")
        if delta is None:
            return ""
        for fragment in _field(delta, "tool_calls") or []:
            self._take_tool_fragment(fragment)
        for block in _field(delta, "thinking_blocks") or []:
            self._take_thinking(block)
        content = str(_field(delta, "content") or "")
        if content:
            self.text_parts.append(content)
        return content

    @property
    def raw_text(self) -> str:
        return "".join(self.text_parts)

    def _take_tool_fragment(self, fragment: Any) -> None:
        index = _field(fragment, "index")
        call_id = _field(fragment, "id")
        if index is None:  # some servers omit it: a fragment with an id starts a new call
            if call_id or not self.calls:
                index = len(self.calls)
            else:
                index = max(self.calls)
        parts = self.calls.setdefault(index, _ToolCallParts())
        if call_id and parts.id is None:
            parts.id = call_id
        function = _field(fragment, "function")
        if function is not None:
            name = _field(function, "name")
            if name and parts.name is None:
                parts.name = name
            arguments = _field(function, "arguments")
            if arguments:
                parts.arguments.append(arguments)

    def _take_thinking(self, block: Any) -> None:
        index = _field(block, "index")
        if not isinstance(index, int):
            index = max(self.thinking, default=0)
        parts = self.thinking.setdefault(index, _ThinkingParts())
        if _field(block, "type") == "redacted_thinking":
            parts.redacted_data = (parts.redacted_data or "") + str(_field(block, "data") or "")
            return
        if _field(block, "thinking"):
            parts.thinking.append(str(_field(block, "thinking")))
        if _field(block, "signature"):
            parts.signature = str(_field(block, "signature"))

    def thinking_blocks(self) -> tuple[ThinkingBlock, ...]:
        return tuple(
            ThinkingBlock("".join(p.thinking), p.signature, p.redacted_data)
            for _, p in sorted(self.thinking.items())
        )

    def tool_calls(self) -> list[ToolCallRequest]:
        return [
            ToolCallRequest(
                # A missing id stays empty: the engine reports it to the model rather than
                # inventing one silently.
                id=parts.id or "",
                name=parts.name or "",
                arguments="".join(parts.arguments),
            )
            for index, parts in sorted(self.calls.items())
        ]

    def finish(self) -> FinishReason:
        if self.finish_reason == "length":
            return FinishReason.LENGTH
        if self.calls or self.finish_reason in ("tool_calls", "function_call"):
            return FinishReason.TOOL_CALLS
        return FinishReason.STOP


class ThinkFilter:
    """Removes `<think>...</think>` blocks from streamed text, whatever the delta boundaries.

    Text that could be the start of a tag is held back until the next delta decides; a
    block still open when the stream ends is dropped. The visible text is kept as parts
    and joined once (`text`), so a long answer of small deltas stays linear.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._inside = False
        self._after_block = False
        self._visible: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._visible)

    def feed(self, delta: str) -> str:
        self._pending += delta
        out: list[str] = []
        while self._pending:
            if self._inside:
                end = self._pending.find(THINK_CLOSE)
                if end < 0:
                    keep = _partial_tag(self._pending, THINK_CLOSE)
                    self._pending = self._pending[len(self._pending) - keep :]
                    break
                self._pending = self._pending[end + len(THINK_CLOSE) :]
                self._inside = False
                self._after_block = True
                continue
            if self._after_block:  # the answer after a thought usually starts with blank lines
                self._pending = self._pending.lstrip()
                if not self._pending:
                    break
                self._after_block = False
            start = self._pending.find(THINK_OPEN)
            if start >= 0:
                out.append(self._pending[:start])
                self._pending = self._pending[start + len(THINK_OPEN) :]
                self._inside = True
                continue
            keep = _partial_tag(self._pending, THINK_OPEN)
            out.append(self._pending[: len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep :]
            break
        visible = "".join(out)
        if visible:
            self._visible.append(visible)
        return visible

    def finish(self) -> str:
        """Flush held-back text at the end of the stream; an unclosed block is dropped."""
        visible = "" if self._inside else self._pending
        self._pending = ""
        if visible:
            self._visible.append(visible)
        return visible


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def reported_usage(request: ModelRequest, assembly: StreamAssembly) -> Usage:
    """The usage of the stream's final chunk (`stream_options.include_usage`): the
    provider's own figures. When the provider sent none (or LiteLLM's zeros: its token
    counter is off), kelpie estimates."""
    reported = assembly.usage
    input_tokens = int(_field(reported, "prompt_tokens") or 0) if reported is not None else 0
    output_tokens = int(_field(reported, "completion_tokens") or 0) if reported is not None else 0
    if input_tokens or output_tokens:
        return Usage(input_tokens, output_tokens)
    calls = "".join(c.arguments for c in assembly.tool_calls())
    return estimate_usage(request, assembly.raw_text, calls)


async def relay(chunks: AsyncIterator[Any], assembly: StreamAssembly, on_text: TextSink) -> str:
    """Feed every chunk to `assembly`, passing the visible text to `on_text` as it comes;
    return the whole visible text. `chunks` raises the client's own errors; `on_text`'s
    failures pass through untouched (they are not the model's)."""
    think = ThinkFilter()
    async for chunk in chunks:
        visible = think.feed(assembly.take(chunk))
        if visible:
            await on_text(visible)
    tail = think.finish()
    if tail:
        await on_text(tail)
    return think.text


def assembled_reply(
    request: ModelRequest, assembly: StreamAssembly, text: str, model: str
) -> ModelReply:
    """The reply of a stream that ended; one without a finish_reason broke off."""
    if assembly.finish_reason is None:
        raise broke_off("stream ended without a finish_reason")
    return ModelReply(
        text=text,
        tool_calls=assembly.tool_calls(),
        finish_reason=assembly.finish(),
        usage=reported_usage(request, assembly),
        model=model,
        thinking=assembly.thinking_blocks(),
    )
