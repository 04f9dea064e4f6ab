"""Typed events a turn emits while it runs; the Slack reporter (or a terminal) renders them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from bot.values import Picture, ToolStatus, plural


class TurnFinish(StrEnum):
    STOP = "stop"
    MAX_ITERATIONS = "max_iterations"
    INTERRUPTED = "interrupted"
    ERROR = "error"


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    tool_call_id: str
    name: str
    args_summary: str


@dataclass(frozen=True)
class ToolFinished:
    tool_call_id: str
    name: str
    status: ToolStatus
    summary: str
    # Full output a person may want as a file (e.g. logs); None when there is none.
    attachment: str | None = None
    # An image for the thread (show_graph); None when there is none.
    picture: Picture | None = None


@dataclass(frozen=True)
class TurnStarted:
    """The model and tier a turn runs under, first of its events: a turn that ends without
    stats (an interrupt) still has its footer name them like any other."""

    model: str
    tier: str
    tier_source: str


@dataclass(frozen=True)
class RoundStarted:
    round_index: int


@dataclass(frozen=True)
class TurnStats:
    model: str
    rounds: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_estimated: bool = False
    duration_s: float = 0.0
    # The tier the turn ran under and where it came from (the router's tier source).
    tier: str = ""
    tier_source: str = ""
    # The answer stopped at the model's output limit (not a whole answer).
    cut: bool = False


@dataclass(frozen=True)
class TurnFinished:
    finish: TurnFinish
    answer: str
    stats: TurnStats
    # One sentence for the person when finish is ERROR.
    error: str | None = None
    evidence: list[str] = field(default_factory=list)
    # An approval card in the session (this turn's or an earlier one's) still waits for a
    # person when the turn ends: the thread waits on them, not on kelpie.
    awaiting_approval: bool = False


TurnEvent = TurnStarted | TextDelta | ToolStarted | ToolFinished | RoundStarted | TurnFinished
EventSink = Callable[[TurnEvent], Awaitable[None]]


ANSWER_CUT_FOOTER = "answer cut at the output limit"


def seen_stats(
    started: TurnStarted | None, model: str, rounds: int, tool_calls: int, duration_s: float
) -> TurnStats:
    """The stats of a turn that ended without any (an interrupt, a crash): what its reporter
    saw, under the model and tier the turn announced when it started."""
    return TurnStats(
        model=started.model if started else model,
        rounds=rounds,
        tool_calls=tool_calls,
        duration_s=duration_s,
        tier=started.tier if started else "",
        tier_source=started.tier_source if started else "",
    )


def footer_line(stats: TurnStats, evidence: list[str] | None = None) -> str:
    """One line under an answer: model, tier and its source, rounds, tool calls, tokens
    (estimates marked), a cut answer, the evidence the answer cites, duration. Slack and
    the terminal show the same line."""
    parts = [stats.model] if stats.model else []
    if stats.tier:
        source = f" ({stats.tier_source})" if stats.tier_source else ""
        parts.append(f"tier {stats.tier}{source}")
    parts += [plural(stats.rounds, "round"), plural(stats.tool_calls, "tool call")]
    if stats.input_tokens or stats.output_tokens:
        tokens = f"{stats.input_tokens:,} in / {stats.output_tokens:,} out tokens"
        if stats.tokens_estimated:
            tokens = f"~{stats.input_tokens:,} in / ~{stats.output_tokens:,} out tokens (estimated)"
        parts.append(tokens)
    if stats.cut:
        parts.append(ANSWER_CUT_FOOTER)
    if evidence:
        parts.append(f"evidence {', '.join(evidence)}")
    parts.append(f"{stats.duration_s:.1f} s")
    return " · ".join(parts)
