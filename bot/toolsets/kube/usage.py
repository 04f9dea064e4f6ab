"""The usage toolset: cpu and memory of pods and nodes from metrics.k8s.io (read).

Served by metrics-server (or any adapter of that API); a cluster without one answers 404
on the group, which reads as one sentence rather than a failure.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from bot.toolsets.declare import NamespacedList, Selected, declare, resolve_namespace
from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
from bot.toolsets.kube.render import KubeReads, Obj, dig, items_of, result, table, where
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult, ToolScope
from bot.values import plural

METRICS = "/apis/metrics.k8s.io/v1beta1"
MAX_ROWS = 50
_NO_METRICS = (
    "Cluster {cluster} serves no metrics API (metrics.k8s.io answered 404): install "
    "metrics-server to see cpu and memory usage."
)
_MORE = "… and {more} more {noun} not shown; narrow your call with {how}."
_CPU = re.compile(r"(\d+(?:\.\d+)?)(n|u|m|)")
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|)")
_MEMORY_FACTOR = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_MEMORY_FACTOR |= {"E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_MEMORY_FACTOR |= {"Pi": 2**50, "Ei": 2**60}


class TopPods(NamespacedList):
    sort_by: Annotated[Literal["cpu", "memory"], Field()] = "cpu"


def millicores(quantity: object) -> float:
    """A cpu quantity ("250m", "1", "123456789n") in millicores (0 when unreadable)."""
    found = _CPU.fullmatch(str(quantity or ""))
    if found is None:
        return 0.0
    value, unit = float(found[1]), found[2]
    return value * {"n": 1e-6, "u": 1e-3, "m": 1.0, "": 1000.0}[unit]


def mem_bytes(quantity: object) -> float:
    """A memory quantity ("64Mi", "131072Ki", "1G") in bytes (0 when unreadable)."""
    found = _MEMORY.fullmatch(str(quantity or ""))
    return float(found[1]) * _MEMORY_FACTOR[found[2]] if found else 0.0


def cpu_text(value: float) -> str:
    return f"{value:.0f}m"


def mem_text(value: float) -> str:
    return f"{value / 2**20:.0f}Mi"


class _Usage(KubeReads):
    async def _metrics(
        self, kube: KubeClient, describe: str, path: str, selector: str | None
    ) -> Obj:
        try:
            found = await kube.get_path(describe, path, {"labelSelector": selector})
        except KubeFailure as failure:
            if failure.status == 404:
                raise KubeFailure(_NO_METRICS.format(cluster=kube.name), status=404) from None
            raise
        return found if isinstance(found, dict) else {}

    async def top_pods(self, args: TopPods, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=True)
        kube = self.kube(context)
        path = f"{METRICS}/namespaces/{namespace}/pods" if namespace else f"{METRICS}/pods"
        listing = await self._metrics(
            kube, f"read pod metrics {where(namespace)}", path, args.label_selector
        )
        usage = []
        for pod in items_of(listing):
            containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
            cpu = sum(millicores(dig(c, "usage", "cpu")) for c in containers)
            memory = sum(mem_bytes(dig(c, "usage", "memory")) for c in containers)
            name = str(dig(pod, "metadata", "name"))
            if namespace is None:
                name = f"{dig(pod, 'metadata', 'namespace')}/{name}"
            usage.append((name, cpu, memory))
        key = 1 if args.sort_by == "cpu" else 2
        usage.sort(key=lambda row: row[key], reverse=True)
        total_cpu, total_mem = sum(u[1] for u in usage), sum(u[2] for u in usage)
        summary = (
            f"{plural(len(usage), 'pod')} {where(namespace)} use {cpu_text(total_cpu)} cpu "
            f"and {mem_text(total_mem)} memory"
        )
        rows = [[n, cpu_text(c), mem_text(m)] for n, c, m in usage[:MAX_ROWS]]
        more = len(usage) - MAX_ROWS
        how = "a namespace or label_selector"
        note = [_MORE.format(more=more, noun="pods", how=how)] if more > 0 else []
        lines = [summary, *table(["NAME", "CPU", "MEMORY"], rows), *note]
        return result(lines, summary)

    async def top_nodes(self, args: Selected, context: ToolContext) -> ToolResult:
        kube = self.kube(context)
        listing = await self._metrics(
            kube, "read node metrics", f"{METRICS}/nodes", args.label_selector
        )
        nodes = await kube.call_json(
            "list nodes", kube.core.list_node, label_selector=args.label_selector
        )
        allocatable = {
            str(dig(n, "metadata", "name")): dig(n, "status", "allocatable") or {}
            for n in items_of(nodes)
        }
        rows = []
        for node in sorted(items_of(listing), key=lambda n: str(dig(n, "metadata", "name"))):
            name = str(dig(node, "metadata", "name"))
            cpu = millicores(dig(node, "usage", "cpu"))
            memory = mem_bytes(dig(node, "usage", "memory"))
            alloc = allocatable.get(name, {})
            rows.append(
                [
                    name,
                    cpu_text(cpu),
                    _percent(cpu, millicores(alloc.get("cpu"))),
                    mem_text(memory),
                    _percent(memory, mem_bytes(alloc.get("memory"))),
                ]
            )
        summary = f"usage of {plural(len(rows), 'node')}"
        header = ["NAME", "CPU", "CPU% of allocatable", "MEMORY", "MEMORY% of allocatable"]
        more = len(rows) - MAX_ROWS
        note = [_MORE.format(more=more, noun="nodes", how="a label_selector")] if more > 0 else []
        return result([summary, *table(header, rows[:MAX_ROWS]), *note], summary)


def _percent(used: float, allocatable: float) -> str:
    return f"{100 * used / allocatable:.0f}%" if allocatable else "?"


def usage_tools(clients: KubeClients) -> list[Tool]:
    reads = _Usage(clients)
    return [
        declare(
            "top_pods",
            ToolKind.READ,
            "Current cpu and memory use per pod (metrics.k8s.io), highest first.",
            TopPods,
            reads.audited(reads.top_pods),
            kinds=("Pod",),
        ),
        declare(
            "top_nodes",
            ToolKind.READ,
            "Current cpu and memory use per node and as a share of allocatable.",
            Selected,
            reads.audited(reads.top_nodes),
            scope=ToolScope.CLUSTER,
            kinds=("Node",),
        ),
    ]
