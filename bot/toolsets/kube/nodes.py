"""The nodes toolset: readiness, pressure, capacity and taints of the nodes (read)."""

from __future__ import annotations

from bot.toolsets.declare import (
    Selected,
    declare,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    Obj,
    age,
    capped,
    dig,
    items_of,
    result,
    table,
)
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult, ToolScope
from bot.values import plural


class _Nodes(KubeReads):
    async def list_nodes(self, args: Selected, context: ToolContext) -> ToolResult:
        selector = args.label_selector
        kube = self.kube(context)
        listing = await kube.call_json("list nodes", kube.core.list_node, label_selector=selector)
        nodes = items_of(listing)
        rows, not_ready, cordoned = [], 0, 0
        for node in nodes:
            state = node_state(node)
            not_ready += not state.startswith("Ready")
            cordoned += bool(dig(node, "spec", "unschedulable"))
            cap = dig(node, "status", "capacity") or {}
            alloc = dig(node, "status", "allocatable") or {}
            taints = [
                f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                for t in dig(node, "spec", "taints") or []
            ]
            rows.append(
                [str(dig(node, "metadata", "name")), state]
                + [f"{alloc.get(r, '?')}/{cap.get(r, '?')}" for r in ("cpu", "memory", "pods")]
                + [
                    ",".join(taints) or "-",
                    dig(node, "status", "nodeInfo", "kubeletVersion") or "?",
                ]
                + [age(dig(node, "metadata", "creationTimestamp"))]
            )
        rows, more = capped(rows, "nodes")
        summary = f"{plural(len(nodes), 'node')}, {not_ready} not ready, {cordoned} cordoned"
        header = ["NAME", "STATUS", "CPU alloc/cap", "MEMORY alloc/cap", "PODS alloc/cap"]
        header += ["TAINTS", "VERSION", "AGE"]
        return result([summary, *table(header, rows), *([more] if more else [])], summary)


def node_state(node: Obj) -> str:
    """Ready / NotReady / Unknown, plus SchedulingDisabled and any pressure condition."""
    state, extra = "Unknown", []
    for condition in dig(node, "status", "conditions") or []:
        kind, status = condition.get("type"), condition.get("status")
        if kind == "Ready":
            state = {"True": "Ready", "False": "NotReady"}.get(str(status), "Unknown")
        elif status == "True":
            extra.append(str(kind))
    if dig(node, "spec", "unschedulable"):
        extra.insert(0, "SchedulingDisabled")
    return ",".join([state, *extra])


def node_tools(clients: KubeClients) -> list[Tool]:
    reads = _Nodes(clients)
    return [
        declare(
            "list_nodes",
            ToolKind.READ,
            "Nodes: readiness, pressure, cordoned, allocatable/capacity, taints, version.",
            Selected,
            reads.audited(reads.list_nodes),
            scope=ToolScope.CLUSTER,
            kinds=("Node",),
        )
    ]
