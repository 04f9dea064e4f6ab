"""Loki's HTTP API as the tools need it: log lines of a (scoped) LogQL query over a window,
newest first and bounded, and LogQL metric queries summarised like a Prometheus range.

Lines are returned as read; masking them is the tool's job, as for pod logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp, check_window
from bot.toolsets.observe.prometheus import RangeResult, auto_step, summarise_matrix

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
NOT_A_LOG_QUERY = "That is a metric query; use loki_metric for it, or give a log selector."
NOT_A_METRIC_QUERY = "That is a log query; use loki_query for it, or wrap it in a range function."


@dataclass(frozen=True)
class LogLine:
    at_ns: int
    labels: dict[str, str]
    line: str

    @property
    def when(self) -> str:
        return datetime.fromtimestamp(self.at_ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LogLines:
    lines: tuple[LogLine, ...]
    limit: int
    clamped_from: int | None  # the limit asked for, when it was over MAX_LIMIT


def clamp_limit(asked: int | None) -> tuple[int, int | None]:
    if asked is None or asked < 1:
        return DEFAULT_LIMIT, None
    return (MAX_LIMIT, asked) if asked > MAX_LIMIT else (asked, None)


class Loki:
    def __init__(self, http: ObserveHttp, endpoint: Endpoint, max_window_h: float, max_series: int):
        self._http = http
        self.endpoint = endpoint
        self._max_window_h = max_window_h
        self._max_series = max_series

    async def ready(self) -> str:
        said = await self._http.get_text(self.endpoint, "/ready")
        return f"Loki {said}"

    async def lines(self, query: str, start: float, end: float, limit: int | None) -> LogLines:
        """Newest first, at most `limit` (default 100, clamped to 500)."""
        check_window(start, end, self._max_window_h)
        chosen, clamped_from = clamp_limit(limit)
        data = await self._range(query, start, end, {"limit": str(chosen)})
        if data.get("resultType") != "streams":
            raise ObserveError(NOT_A_LOG_QUERY)
        found = [
            LogLine(int(at), _labels(stream.get("stream")), str(line))
            for stream in data.get("result", [])
            for at, line in stream.get("values", [])
        ]
        found.sort(key=lambda entry: entry.at_ns, reverse=True)
        return LogLines(tuple(found[:chosen]), chosen, clamped_from)

    async def metric(self, query: str, start: float, end: float) -> RangeResult:
        check_window(start, end, self._max_window_h)
        step = auto_step(start, end)
        data = await self._range(query, start, end, {"step": str(step)})
        if data.get("resultType") != "matrix":
            raise ObserveError(NOT_A_METRIC_QUERY)
        return summarise_matrix(data.get("result", []), start, end, step, self._max_series)

    async def _range(self, query: str, start: float, end: float, extra: dict[str, str]) -> Any:
        params = {
            "query": query,
            "start": str(int(start * 1e9)),
            "end": str(int(end * 1e9)),
            "direction": "backward",
            **extra,
        }
        body = await self._http.get(self.endpoint, "/loki/api/v1/query_range", params)
        if not isinstance(body, dict) or body.get("status") != "success":
            raise ObserveError(f"Loki {self.endpoint.name} answered without data.")
        data = body.get("data")
        return data if isinstance(data, dict) else {}


def render_lines(result: LogLines) -> str:
    if not result.lines:
        return "No log lines matched."
    lines = [f"{entry.when} {_stream(entry.labels)} {entry.line}" for entry in result.lines]
    if result.clamped_from is not None:
        lines.append(f"(asked for {result.clamped_from} lines; at most {MAX_LIMIT} are read)")
    elif len(result.lines) == result.limit:
        lines.append(f"(the newest {result.limit} lines; narrow the query for older ones)")
    return "\n".join(lines)


def _labels(stream: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (stream or {}).items()}


def _stream(labels: dict[str, str]) -> str:
    shown = [labels[key] for key in ("namespace", "pod", "container") if key in labels]
    return "/".join(shown) or "-"
