"""The namespaces toolset: what namespaces the cluster has (read)."""

from __future__ import annotations

from bot.toolsets.declare import (
    Selected,
    declare,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    age,
    capped,
    dig,
    items_of,
    result,
    table,
)
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult, ToolScope
from bot.values import plural


class _Namespaces(KubeReads):
    async def list_namespaces(self, args: Selected, context: ToolContext) -> ToolResult:
        selector = args.label_selector
        kube = self.kube(context)
        listing = await kube.call_json(
            "list namespaces", kube.core.list_namespace, label_selector=selector
        )
        items = items_of(listing)
        rows = [
            [
                dig(n, "metadata", "name") or "?",
                dig(n, "status", "phase") or "?",
                age(dig(n, "metadata", "creationTimestamp")),
            ]
            for n in items
        ]
        rows, more = capped(rows, "namespaces")
        summary = plural(len(items), "namespace")
        lines = [summary, *table(["NAME", "STATUS", "AGE"], rows), *([more] if more else [])]
        return result(lines, summary)


def namespace_tools(clients: KubeClients) -> list[Tool]:
    reads = _Namespaces(clients)
    return [
        declare(
            "list_namespaces",
            ToolKind.READ,
            "Namespaces with status and age.",
            Selected,
            reads.audited(reads.list_namespaces),
            scope=ToolScope.CLUSTER,
            kinds=("Namespace",),
        )
    ]
