"""A Loki for the tests, following Loki's documented HTTP API (there is no Debian package).

What it follows, from grafana.com/docs/loki/latest/reference/loki-http-api/ and Loki's
limits config: `GET /ready`; `GET /loki/api/v1/query_range` with `query` (required), `start`
and `end` (nanosecond epochs, float seconds or RFC3339; defaults: one hour ago, now),
`limit` (default 100), `direction` (default backward), `step`; answers `{"status":
"success", "data": {"resultType": "streams"|"matrix", "result": [...]}}`; errors are plain
text with HTTP 400: a missing query, a limit over `max_entries_limit_per_query` (5000), a
window over `max_query_length` (721h), a selector whose matchers all match the empty string,
a query it cannot parse. LogQL is evaluated for what the tests send: a stream selector,
line filters (|=, !=, |~, !~), and `count_over_time`/`rate` over a range, optionally inside
`sum` / `sum by (...)`. Every query received is recorded (`queries`), with the request's
headers (`requests`). With `tenant_required` it is a multi-tenant Loki (`auth_enabled:
true`): a query without an `X-Scope-OrgID` header is answered 401 `no org id`, as Loki does.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import promql_parser as promql
from aiohttp import web

MAX_ENTRIES = 5000
MAX_QUERY_LENGTH_S = 721 * 3600
_FILTER = re.compile(r'\s*(\|=|!=|\|~|!~)\s*("(?:[^"\\]|\\.)*"|`[^`]*`)')
_METRIC = re.compile(
    r"^\s*(?:sum(?:\s+by\s*\((?P<by>[^)]*)\))?\s*\(\s*)?"
    r"(?P<fn>count_over_time|rate)\s*\(\s*(?P<inner>.*)\[(?P<range>\d+[smh])\]\s*\)\s*\)?\s*$",
    re.S,
)


@dataclass
class Entry:
    labels: dict[str, str]
    at_ns: int
    line: str


@dataclass(frozen=True)
class Received:
    """One request as it arrived: its path, parameters and headers."""

    path: str
    params: dict[str, str]
    headers: dict[str, str]


class LokiServer:
    def __init__(self, *, tenant_required: bool = False) -> None:
        self.entries: list[Entry] = []
        self.queries: list[dict[str, str]] = []
        self.requests: list[Received] = []
        self.tenant_required = tenant_required
        self._runner: web.AppRunner | None = None
        self.url = ""

    def push(self, labels: dict[str, str], at_s: float, line: str) -> None:
        self.entries.append(Entry(labels, int(at_s * 1e9), line))

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/ready", lambda _: web.Response(text="ready"))
        app.router.add_get("/loki/api/v1/query_range", self._query_range)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append(Received(request.path, dict(request.query), dict(request.headers)))
        if self.tenant_required and request.path.startswith("/loki/api/"):
            if not request.headers.get("X-Scope-OrgID"):
                return web.Response(status=401, text="no org id\n")
        response: web.StreamResponse = await handler(request)
        return response

    async def _query_range(self, request: web.Request) -> web.Response:
        params = dict(request.query)
        self.queries.append(params)
        try:
            return web.json_response({"status": "success", "data": self._evaluate(params)})
        except LokiError as error:
            return web.Response(status=400, text=str(error))

    def _evaluate(self, params: dict[str, str]) -> dict[str, Any]:
        query = params.get("query", "")
        if not query:
            raise LokiError("query parameter is required")
        end = _time_ns(params.get("end"), default=datetime.now().timestamp())
        start = _time_ns(params.get("start"), default=end / 1e9 - 3600)
        if end - start > MAX_QUERY_LENGTH_S * 1e9:
            raise LokiError(
                "the query time range exceeds the limit (query length: "
                f"{(end - start) / 3.6e12:.0f}h0m0s, limit: 721h0m0s)"
            )
        metric = _METRIC.match(query)
        if metric:
            return self._metric(metric, start, end, int(params.get("step", "60")))
        limit = int(params.get("limit", "100"))
        if limit > MAX_ENTRIES:
            raise LokiError(
                "max entries limit per query exceeded, limit > max_entries_limit_per_query "
                f"({limit} > {MAX_ENTRIES})"
            )
        chosen = self._select(query, start, end)
        chosen.sort(key=lambda e: e.at_ns, reverse=params.get("direction") != "forward")
        streams: dict[tuple[tuple[str, str], ...], list[list[str]]] = defaultdict(list)
        for entry in chosen[:limit]:
            streams[tuple(sorted(entry.labels.items()))].append([str(entry.at_ns), entry.line])
        result = [{"stream": dict(key), "values": values} for key, values in streams.items()]
        return {"resultType": "streams", "result": result}

    def _metric(self, match: re.Match[str], start: int, end: int, step: int) -> dict[str, Any]:
        window_ns = int(match["range"][:-1]) * {"s": 1, "m": 60, "h": 3600}[match["range"][-1]]
        window_ns *= 10**9
        by = [label.strip() for label in (match["by"] or "").split(",") if label.strip()]
        summed = query_is_summed(match.group(0))
        entries = self._select(match["inner"], start - window_ns, end)
        series: dict[tuple[tuple[str, str], ...], list[list[Any]]] = defaultdict(list)
        for at in range(start, end + 1, step * 10**9):
            counts: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)
            for entry in entries:
                if at - window_ns < entry.at_ns <= at:
                    labels = (
                        {k: entry.labels[k] for k in by if k in entry.labels}
                        if summed
                        else entry.labels
                    )
                    counts[tuple(sorted(labels.items()))] += 1
            for key, count in counts.items():
                value = count / (window_ns / 1e9) if match["fn"] == "rate" else count
                series[key].append([at / 1e9, str(value)])
        result = [{"metric": dict(key), "values": values} for key, values in series.items()]
        return {"resultType": "matrix", "result": result}

    def _select(self, query: str, start: int, end: int) -> list[Entry]:
        selector_text, filters = _split(query)
        try:
            # A metric name makes the PromQL parser accept all-empty matchers, which Loki
            # refuses with its own words below.
            selector = promql.parse("loki" + selector_text)
        except ValueError as error:
            raise LokiError(f"parse error : {error}") from error
        matchers = selector.matchers.matchers  # type: ignore[attr-defined]
        if all(_matches(m, "") for m in matchers):
            raise LokiError(
                "queries require at least one regexp or equality matcher that does not have an "
                'empty-compatible value. For instance, app=~".*" does not meet this requirement, '
                'but app=~".+" will'
            )
        return [
            entry
            for entry in self.entries
            if start <= entry.at_ns <= end
            and all(_matches(m, entry.labels.get(m.name, "")) for m in matchers)
            and all(_passes(op, pattern, entry.line) for op, pattern in filters)
        ]


class LokiError(Exception):
    pass


def query_is_summed(query: str) -> bool:
    return query.lstrip().startswith("sum")


def _split(query: str) -> tuple[str, list[tuple[str, str]]]:
    query = query.strip()
    if not query.startswith("{") or "}" not in query:
        raise LokiError("parse error at line 1, col 1: syntax error: unexpected IDENTIFIER")
    close = query.index("}") + 1
    rest, filters = query[close:], []
    while rest.strip():
        found = _FILTER.match(rest)
        if not found:
            raise LokiError(f"parse error : syntax error: unexpected {rest.strip()[:20]!r}")
        literal = found[2]
        pattern = (
            literal[1:-1]
            if literal.startswith("`")
            else literal[1:-1].encode().decode("unicode_escape")
        )
        filters.append((found[1], pattern))
        rest = rest[found.end() :]
    return query[:close], filters


def _matches(matcher: Any, value: str) -> bool:
    op = str(matcher.op)
    if op.endswith("Equal") and not op.endswith("NotEqual"):
        return value == matcher.value
    if op.endswith("NotEqual"):
        return value != matcher.value
    hit = re.fullmatch(matcher.value, value) is not None
    return hit if op.endswith(".Re") else not hit


def _passes(op: str, pattern: str, line: str) -> bool:
    if op == "|=":
        return pattern in line
    if op == "!=":
        return pattern not in line
    hit = re.search(pattern, line) is not None
    return hit if op == "|~" else not hit


def _time_ns(value: str | None, default: float) -> int:
    if not value:
        return int(default * 1e9)
    if re.fullmatch(r"\d{16,}", value):
        return int(value)
    try:
        return int(float(value) * 1e9)
    except ValueError:
        pass
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError as error:
        raise LokiError(f'cannot parse "{value}" to a valid timestamp') from error
