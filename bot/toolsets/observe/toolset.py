"""The observability toolset as the composition root registers it: the tools of the kinds
with at least one configured instance (a build with no Prometheus offers no PromQL tool)."""

from __future__ import annotations

from collections.abc import Iterable

from bot.toolsets.declare import declare_write
from bot.toolsets.observe.graph import graph_tool
from bot.toolsets.observe.silence import SilenceWrite
from bot.toolsets.observe.tools import Observe, read_tools
from bot.toolsets.spec import Tool

# Which backend each tool needs.
_NEEDS = {
    "prometheus_query": "prometheus",
    "prometheus_range": "prometheus",
    "prometheus_series": "prometheus",
    "loki_query": "loki",
    "loki_metric": "loki",
    "list_alerts": "alertmanager",
    "show_graph": "prometheus",
    "silence_alert": "alertmanager",
}


def observe_tools(observe: Observe, kinds: Iterable[str] | None = None) -> list[Tool]:
    """The tools of `kinds` (default: the kinds configured; every kind to check roles)."""
    if kinds is None:
        wanted = {endpoint.kind for endpoint in observe.instances.endpoints}
    else:
        wanted = set(kinds)
    silence = declare_write(
        "silence_alert",
        "Silence Alertmanager alerts of one namespace for a while (needs approval).",
        SilenceWrite(observe),
    )
    tools = [*read_tools(observe), graph_tool(observe), silence]
    return [tool for tool in tools if _NEEDS[tool.name] in wanted]
