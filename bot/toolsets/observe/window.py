"""The time arguments every observability tool shares: a point or a window, each end given
as RFC3339 or as how long ago ("1h" = an hour before now), resolved against the toolset's
clock (never the wall clock inside a handler), and rendered for the evidence ledger.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from bot.toolsets.declare import ToolArgs, checked
from bot.toolsets.spec import ToolArgumentError

DEFAULT_WINDOW = timedelta(hours=1)
# Prometheus' duration syntax: 1h, 90m, 1h30m, 2d, 1w.
_DURATION = re.compile(r"(?:(\d+)([smhdw]))+")
_PART = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
NOT_A_TIME = '{key} {value!r} is neither RFC3339 (2026-12-05T07:00:00Z) nor a duration ago ("1h").'
NOT_A_DURATION = '{key} {value!r} is not a duration such as "30m", "2h" or "1h30m".'


def parse_duration(value: str) -> timedelta | None:
    """ "1h30m" as a timedelta; None when it is not a duration."""
    if not _DURATION.fullmatch(value):
        return None
    return timedelta(seconds=sum(int(n) * _UNIT_S[u] for n, u in _PART.findall(value)))


def _time_text(key: str, value: Any) -> str | None:
    if value is None or value == "" or value == "now":
        return None
    if not isinstance(value, str) or len(value) > 40:
        raise ToolArgumentError(NOT_A_TIME.format(key=key, value=value))
    if parse_duration(value) is None and _rfc3339(value) is None:
        raise ToolArgumentError(NOT_A_TIME.format(key=key, value=value))
    return value


def _duration_text(key: str, value: Any) -> str:
    if not isinstance(value, str) or parse_duration(value) is None:
        raise ToolArgumentError(NOT_A_DURATION.format(key=key, value=value))
    return value


TIME = checked(_time_text)
DURATION = checked(_duration_text)


def _rfc3339(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def resolve_time(value: str | None, now: float) -> float:
    """A validated time argument as a Unix time (None: now)."""
    if value is None:
        return now
    ago = parse_duration(value)
    if ago is not None:
        return now - ago.total_seconds()
    parsed = _rfc3339(value)
    assert parsed is not None  # validated by TIME
    return parsed.timestamp()


class Window(ToolArgs):
    """A window of time, by default the last hour."""

    start: Annotated[
        str | None,
        TIME,
        Field(description='RFC3339 or how long ago, e.g. "6h"; default 1h'),
    ] = None
    end: Annotated[str | None, TIME, Field(description="Default now.")] = None

    def resolve(self, now: float) -> tuple[float, float]:
        end = resolve_time(self.end, now)
        if self.start is None:
            return end - DEFAULT_WINDOW.total_seconds(), end
        return resolve_time(self.start, now), end


def minute(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%MZ")


def span(start: float, end: float) -> str:
    """How the evidence ledger shows a window: 2026-12-05T07:00Z–08:00Z."""
    first, last = minute(start), minute(end)
    if first[:10] == last[:10]:
        last = last[11:]
    return f"{first}–{last}"
