"""Prometheus' HTTP API as the tools need it: instant and range queries summarised per
series, which series exist, and readiness for `kelpie check`.

A range is never dumped: each series becomes min / max / mean / last and when the extremes
happened, with a step chosen so a series has at most ~120 points. Queries arrive here
already scoped (`scope.py`); limits (window, series) are applied here, before sending.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp, check_window

MAX_POINTS = 120
# Steps a person reads easily; the smallest one that keeps a series under MAX_POINTS wins.
NICE_STEPS_S = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)

PROMETHEUS_FAILED = "Prometheus {name} could not run the query ({kind}): {error}."


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class InstantResult:
    result_type: str
    samples: tuple[Sample, ...]
    omitted: int  # series beyond the limit, counted, not shown


@dataclass(frozen=True)
class SeriesSummary:
    labels: dict[str, str]
    points: int
    minimum: float
    minimum_at: float
    maximum: float
    maximum_at: float
    mean: float
    last: float
    last_at: float


@dataclass(frozen=True)
class RangeResult:
    start: float
    end: float
    step_s: int
    series: tuple[SeriesSummary, ...]
    omitted: int


def auto_step(start: float, end: float, max_points: int = MAX_POINTS) -> int:
    """The smallest readable step that keeps a series of [start, end] under max_points."""
    needed = max(1.0, (end - start) / max_points)
    for step in NICE_STEPS_S:
        if step >= needed:
            return step
    return math.ceil(needed)


class Prometheus:
    def __init__(self, http: ObserveHttp, endpoint: Endpoint, max_window_h: float, max_series: int):
        self._http = http
        self.endpoint = endpoint
        self._max_window_h = max_window_h
        self._max_series = max_series

    async def ready(self) -> str:
        """One line for `kelpie check`: the server's version."""
        data = await self._api("/api/v1/status/buildinfo", {})
        return f"Prometheus {data.get('version', 'unknown version')}"

    async def instant(self, query: str, at: float) -> InstantResult:
        data = await self._api("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        kind = data.get("resultType", "")
        if kind in ("scalar", "string"):
            value = data.get("result", [0, "NaN"])[1]
            return InstantResult(kind, (Sample({}, _number(value)),), 0)
        shown = data.get("result", [])[: self._max_series]
        samples = tuple(Sample(_labels(s), _number(s.get("value", [0, "NaN"])[1])) for s in shown)
        return InstantResult(kind, samples, max(0, len(data.get("result", [])) - len(shown)))

    async def range(self, query: str, start: float, end: float) -> RangeResult:
        step, result = await self.matrix(query, start, end)
        return summarise_matrix(result, start, end, step, self._max_series)

    async def matrix(
        self, query: str, start: float, end: float
    ) -> tuple[int, list[dict[str, Any]]]:
        """The raw range answer (for a graph): the step and Prometheus' series."""
        check_window(start, end, self._max_window_h)
        step = auto_step(start, end)
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        data = await self._api("/api/v1/query_range", params)
        return step, list(data.get("result", []))

    async def series(
        self, match: str, start: float, end: float
    ) -> tuple[list[dict[str, str]], int]:
        """The label sets of the series `match` selects, at most max_series, and how many more."""
        check_window(start, end, self._max_window_h)
        params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        params["limit"] = str(self._max_series + 1)
        found = await self._api("/api/v1/series", params)
        listed = [dict(labels) for labels in found or []]
        return listed[: self._max_series], max(0, len(listed) - self._max_series)

    async def _api(self, path: str, params: dict[str, str]) -> Any:
        try:
            body = await self._http.get(self.endpoint, path, params)
        except ObserveError as error:
            raise ObserveError(_plainer(str(error))) from error
        if not isinstance(body, dict) or body.get("status") != "success":
            said = body if isinstance(body, dict) else {}
            raise ObserveError(
                PROMETHEUS_FAILED.format(
                    name=self.endpoint.name,
                    kind=said.get("errorType", "error"),
                    error=said.get("error", "no reason given"),
                )
            )
        return body.get("data")


def summarise_matrix(
    result: Sequence[dict[str, Any]], start: float, end: float, step: int, max_series: int
) -> RangeResult:
    summaries = [_summary(series) for series in result[:max_series]]
    kept = tuple(summary for summary in summaries if summary is not None)
    return RangeResult(start, end, step, kept, max(0, len(result) - max_series))


def _summary(series: dict[str, Any]) -> SeriesSummary | None:
    points = [(float(at), _number(value)) for at, value in series.get("values", [])]
    points = [(at, value) for at, value in points if not math.isnan(value)]
    if not points:
        return None
    low = min(points, key=lambda point: point[1])
    high = max(points, key=lambda point: point[1])
    mean = sum(value for _, value in points) / len(points)
    last_at, last = points[-1]
    return SeriesSummary(
        _labels(series), len(points), low[1], low[0], high[1], high[0], mean, last, last_at
    )


def render_range(result: RangeResult) -> str:
    """The model's view: one line per series."""
    lines = [
        f"{len(result.series)} series, {_time(result.start)} to {_time(result.end)}, "
        f"step {result.step_s}s"
    ]
    for summary in result.series:
        lines.append(
            f"{_selector(summary.labels)}: min {_fmt(summary.minimum)} at "
            f"{_time(summary.minimum_at)}, max {_fmt(summary.maximum)} at "
            f"{_time(summary.maximum_at)}, mean {_fmt(summary.mean)}, last "
            f"{_fmt(summary.last)} at {_time(summary.last_at)} ({summary.points} points)"
        )
    if result.omitted:
        lines.append(f"{result.omitted} more series not shown: narrow the query.")
    return "\n".join(lines)


def render_instant(result: InstantResult) -> str:
    if not result.samples:
        return "No series matched."
    lines = [f"{_selector(sample.labels)} {_fmt(sample.value)}" for sample in result.samples]
    if result.omitted:
        lines.append(f"{result.omitted} more series not shown: narrow the query.")
    return "\n".join(lines)


def _plainer(sentence: str) -> str:
    """Prometheus' best-known limit, said as what to do about it."""
    if "11,000 points" in sentence or "11000 points" in sentence:
        return sentence + " Use a shorter window."
    return sentence


def _labels(series: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (series.get("metric") or {}).items()}


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def selector(labels: dict[str, str]) -> str:
    return _selector(labels)


def _selector(labels: dict[str, str]) -> str:
    name = labels.get("__name__", "")
    rest = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"
