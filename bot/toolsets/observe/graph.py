"""`present/show_graph`: a PromQL range query, scoped like every other, drawn as a PNG line
chart and posted into the thread with the exact query sent and a link to the instance's UI.

matplotlib is an optional extra (`pip install kelpie[graphs]`; the container image has
it, from requirements-graphs.lock), imported only when a graph is drawn (by the injected
`importer`), with the Agg backend (no display), in a worker thread (drawing is CPU work).
Without it the model gets one sentence saying how to install it, and the log a line.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

from bot.toolsets.declare import declare
from bot.toolsets.observe.http import Endpoint
from bot.toolsets.observe.prometheus import selector
from bot.toolsets.observe.scope import scope_promql
from bot.toolsets.observe.tools import Observe, RangeQuery, sent, sentences
from bot.toolsets.observe.window import span
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult, ToolScope
from bot.values import Picture

log = logging.getLogger(__name__)

Importer = Callable[[str], ModuleType]
SHOW_GRAPH = "show_graph"
NEEDS_MATPLOTLIB = "Graphs need matplotlib, which is not installed: pip install kelpie[graphs]."
NO_DATA = "The query matched no series in that window; there is nothing to draw."
POSTED = "Posted a graph of {count} series to the thread."
# Beyond this many lines a legend says nothing; the chart still draws them all.
LEGEND_MAX = 8


class ShowGraph(RangeQuery):
    continue_analysis: bool = False


@dataclass(frozen=True)
class Plotting:
    """The parts of matplotlib a chart needs."""

    figure: Any  # matplotlib.figure.Figure
    canvas: Any  # matplotlib.backends.backend_agg.FigureCanvasAgg
    date2num: Callable[..., Any]


def plotting(importer: Importer) -> Plotting:
    """matplotlib, imported now; without it, the sentence that says how to install it."""
    try:
        figure = importer("matplotlib.figure")
        agg = importer("matplotlib.backends.backend_agg")
        dates = importer("matplotlib.dates")
    except ImportError as error:
        log.warning("show_graph: matplotlib cannot be imported (%s)", error)
        raise ToolFailure(NEEDS_MATPLOTLIB) from error
    return Plotting(figure.Figure, agg.FigureCanvasAgg, dates.date2num)


def graph_tool(observe: Observe, importer: Importer = importlib.import_module) -> Tool:
    @sentences
    async def show_graph(args: ShowGraph, context: ToolContext) -> ToolResult:
        plot = plotting(importer)  # before the query: nothing is asked that cannot be drawn
        client, scope = observe.prometheus(context)
        query = scope_promql(args.query, scope)
        window = args.resolve(observe.clock())
        _, series = await client.matrix(query, *window)
        series = series[: observe.settings.max_series]
        if not any(item.get("values") for item in series):
            raise ToolFailure(NO_DATA)
        png = await asyncio.to_thread(draw, plot, series, query)
        caption = f"`{query}` ({span(*window)})" + _link(client.endpoint, query, window)
        text = POSTED.format(count=len(series))
        if not args.continue_analysis:
            text += " The person can read it there; the turn ends here."
        return ToolResult(
            text,
            f"graph of {len(series)} series",
            picture=Picture(png, "graph.png", caption),
            evidence=sent(query, client.endpoint, span(*window)),
            end_turn=not args.continue_analysis,
        )

    return declare(
        SHOW_GRAPH,
        ToolKind.PRESENT,
        "Post a PromQL range query as a chart; ends the turn unless continue_analysis.",
        ShowGraph,
        show_graph,
        scope=ToolScope.QUERY,
    )


def draw(plot: Plotting, series: list[dict[str, Any]], title: str) -> bytes:
    """A PNG line chart of Prometheus range series (time on x, one line per series)."""
    figure = plot.figure(figsize=(9, 4), dpi=100)
    plot.canvas(figure)
    axes = figure.add_subplot()
    for item in series:
        points = [(datetime.fromtimestamp(float(t), UTC), float(v)) for t, v in item["values"]]
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        times = plot.date2num([point[0] for point in points])
        axes.plot(times, [point[1] for point in points], label=selector(labels))
    axes.set_title(title if len(title) <= 90 else title[:89] + "…", fontsize=9)
    axes.xaxis_date()
    axes.grid(True, alpha=0.3)
    if len(series) <= LEGEND_MAX:
        axes.legend(fontsize=7, loc="best")
    figure.autofmt_xdate()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def _link(endpoint: Endpoint, query: str, window: tuple[float, float]) -> str:
    """A Slack link to the query in the instance's own UI, when its `external_url` is set."""
    if not endpoint.external_url:
        return ""
    start, end = window
    params = {
        "g0.expr": query,
        "g0.tab": "0",
        "g0.range_input": f"{max(1, round((end - start) / 60))}m",
        "g0.end_input": datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M:%S"),
    }
    url = endpoint.external_url.rstrip("/") + "/graph?" + urlencode(params)
    return f"\n<{url}|Open in Prometheus {endpoint.name}>"
