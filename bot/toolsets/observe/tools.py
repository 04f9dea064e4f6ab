"""The observability read tools: Prometheus (instant, range, series), Loki (lines, metric)
and Alertmanager (active alerts), each query scoped to the channel's reach before it is
sent and recorded as evidence (the exact text sent, its window, the instance).

The instance is the channel's cluster's (`instances.py`); the scope is built per call from
the context's reach, the instance's namespace label and the firewall's denied namespaces.
A refused query or a backend's failure is the one sentence the model gets (ToolFailure).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import Field

from bot.model.outbound import mask_text
from bot.toolsets.declare import ToolArgs, declare, limited_text
from bot.toolsets.observe.alertmanager import Alertmanager, render_alerts
from bot.toolsets.observe.http import Endpoint, ObserveError, ObserveHttp
from bot.toolsets.observe.instances import Instances
from bot.toolsets.observe.loki import Loki, render_lines
from bot.toolsets.observe.prometheus import (
    Prometheus,
    RangeResult,
    render_instant,
    render_range,
)
from bot.toolsets.observe.scope import NamespaceScope, QueryRefused, scope_logql, scope_promql
from bot.toolsets.observe.window import TIME, Window, minute, resolve_time, span
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult, ToolScope

Args = TypeVar("Args", bound=ToolArgs)
QUERY = limited_text(4000, required=True)


@dataclass(frozen=True)
class ObserveSettings:
    """Limits from `observability`, and the firewall's namespaces no query may reach."""

    max_window_h: float = 24
    max_series: int = 50
    max_silence_h: float = 4
    denied: tuple[str, ...] = ()


class Observe:
    """What the observability tools share: the session, the instances, limits, the clock."""

    def __init__(
        self,
        http: ObserveHttp,
        instances: Instances,
        settings: ObserveSettings,
        clock: Callable[[], float],
    ) -> None:
        self.http = http
        self.instances = instances
        self.settings = settings
        self.clock = clock

    def endpoint(self, kind: str, context: ToolContext) -> Endpoint:
        return self.instances.pick(kind, context.cluster)

    def scope(self, endpoint: Endpoint, context: ToolContext) -> NamespaceScope:
        reach = context.reach
        return NamespaceScope(
            reach.namespaces, reach.cluster_metrics, endpoint.namespace_label, self.settings.denied
        )

    def prometheus(self, context: ToolContext) -> tuple[Prometheus, NamespaceScope]:
        endpoint = self.endpoint("prometheus", context)
        limits = (self.settings.max_window_h, self.settings.max_series)
        return Prometheus(self.http, endpoint, *limits), self.scope(endpoint, context)

    def loki(self, context: ToolContext) -> tuple[Loki, NamespaceScope]:
        endpoint = self.endpoint("loki", context)
        limits = (self.settings.max_window_h, self.settings.max_series)
        return Loki(self.http, endpoint, *limits), self.scope(endpoint, context)

    def alertmanager(self, context: ToolContext) -> tuple[Alertmanager, NamespaceScope]:
        endpoint = self.endpoint("alertmanager", context)
        client = Alertmanager(self.http, endpoint, self.settings.max_silence_h)
        return client, self.scope(endpoint, context)


def sent(query: str, endpoint: Endpoint, when: str) -> str:
    """The evidence of one query: exactly what went where, over which time."""
    return f'sent {query} to {endpoint.kind} "{endpoint.name}", {when}'


def sentences(
    handler: Callable[[Args, ToolContext], Awaitable[ToolResult]],
) -> Callable[[Args, ToolContext], Awaitable[ToolResult]]:
    """A refused query or a backend's failure as the one sentence the model gets."""

    async def run(args: Args, context: ToolContext) -> ToolResult:
        try:
            return await handler(args, context)
        except (ObserveError, QueryRefused) as error:
            raise ToolFailure(str(error)) from error

    return run


class InstantQuery(ToolArgs):
    query: Annotated[str, QUERY]
    time: Annotated[
        str | None, TIME, Field(description="RFC3339 or how long ago; default now.")
    ] = None


class RangeQuery(Window):
    query: Annotated[str, QUERY]


class SeriesMatch(Window):
    match: Annotated[str, QUERY, Field(description='e.g. up{job="api"}')]


class LogQuery(Window):
    query: Annotated[str, QUERY, Field(description='e.g. {app="api"} |= "error"')]
    limit: Annotated[int | None, Field(ge=1, description="Default 100, at most 500.")] = None


class LogMetric(Window):
    query: Annotated[str, QUERY, Field(description='e.g. sum(rate({app="api"}[5m]))')]


class NoArgs(ToolArgs):
    pass


async def scoped_range(
    observe: Observe, args: RangeQuery, context: ToolContext
) -> tuple[RangeResult, str, Endpoint, tuple[float, float]]:
    """A range query scoped and run: its summary, the text sent, the instance, the window."""
    client, scope = observe.prometheus(context)
    query = scope_promql(args.query, scope)
    window = args.resolve(observe.clock())
    return await client.range(query, *window), query, client.endpoint, window


class Reads:
    """The read tools' handlers: scope, send, summarise, and say what was sent."""

    def __init__(self, observe: Observe) -> None:
        self._observe = observe

    async def instant(self, args: InstantQuery, context: ToolContext) -> ToolResult:
        client, scope = self._observe.prometheus(context)
        query = scope_promql(args.query, scope)
        at = resolve_time(args.time, self._observe.clock())
        result = await client.instant(query, at)
        return ToolResult(
            render_instant(result),
            f"{len(result.samples)} series",
            evidence=sent(query, client.endpoint, f"at {minute(at)}"),
        )

    async def range(self, args: RangeQuery, context: ToolContext) -> ToolResult:
        result, query, endpoint, window = await scoped_range(self._observe, args, context)
        return ToolResult(
            render_range(result),
            f"{len(result.series)} series, step {result.step_s}s",
            evidence=sent(query, endpoint, span(*window)),
        )

    async def series(self, args: SeriesMatch, context: ToolContext) -> ToolResult:
        client, scope = self._observe.prometheus(context)
        match = scope_promql(args.match, scope)
        window = args.resolve(self._observe.clock())
        found, more = await client.series(match, *window)
        lines = [_labels(labels) for labels in found] or ["No series matched."]
        if more:
            lines.append(f"{more} more series not shown: narrow the selector.")
        return ToolResult(
            "\n".join(lines),
            f"{len(found)} series",
            evidence=sent(match, client.endpoint, span(*window)),
        )

    async def log_lines(self, args: LogQuery, context: ToolContext) -> ToolResult:
        client, scope = self._observe.loki(context)
        query = scope_logql(args.query, scope)
        window = args.resolve(self._observe.clock())
        result = await client.lines(query, *window, args.limit)
        # Log lines are read like pod logs: masked before anything else sees them.
        text, _ = mask_text(render_lines(result))
        return ToolResult(
            text,
            f"{len(result.lines)} line(s)",
            evidence=sent(query, client.endpoint, span(*window)),
        )

    async def log_metric(self, args: LogMetric, context: ToolContext) -> ToolResult:
        client, scope = self._observe.loki(context)
        query = scope_logql(args.query, scope)
        window = args.resolve(self._observe.clock())
        result = await client.metric(query, *window)
        return ToolResult(
            render_range(result),
            f"{len(result.series)} series, step {result.step_s}s",
            evidence=sent(query, client.endpoint, span(*window)),
        )

    async def alerts(self, args: NoArgs, context: ToolContext) -> ToolResult:
        client, scope = self._observe.alertmanager(context)
        found = await client.alerts(scope)
        name = client.endpoint.name
        return ToolResult(
            render_alerts(found),
            f"{len(found)} active alert(s)",
            evidence=f'active alerts of alertmanager "{name}" in {scope.describe()}',
        )


def read_tools(observe: Observe) -> list[Tool]:
    reads = Reads(observe)
    read, query = ToolKind.READ, ToolScope.QUERY
    return [
        declare("prometheus_query", read, "An instant PromQL query.", InstantQuery, sentences(reads.instant), scope=query),  # noqa: E501
        declare("prometheus_range", read, "A PromQL range query, each series as min/max/mean/last.", RangeQuery, sentences(reads.range), scope=query),  # noqa: E501
        declare("prometheus_series", read, "Series and labels a selector matches.", SeriesMatch, sentences(reads.series), scope=query),  # noqa: E501
        declare("loki_query", read, "Loki log lines for a LogQL query, newest first.", LogQuery, sentences(reads.log_lines), scope=query),  # noqa: E501
        declare("loki_metric", read, "A LogQL metric query, summarised like a range.", LogMetric, sentences(reads.log_metric), scope=query),  # noqa: E501
        declare("list_alerts", read, "Active alerts of this channel's namespaces.", NoArgs, sentences(reads.alerts), scope=query),  # noqa: E501
    ]  # fmt: skip


def _labels(labels: dict[str, str]) -> str:
    name = labels.get("__name__", "")
    rest = [f"{key}={json.dumps(value)}" for key, value in sorted(labels.items())]
    return name + "{" + ",".join(part for part in rest if not part.startswith("__name__=")) + "}"
