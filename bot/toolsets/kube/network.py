"""The network toolset: services and their ready endpoints (read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.toolsets.declare import (
    NamespacedList,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    Obj,
    capped,
    dig,
    items_of,
    ns_name,
    result,
    table,
    where,
)
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult
from bot.values import plural


class _Network(KubeReads):
    async def list_services(self, args: NamespacedList, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=True)
        selector = args.label_selector
        kube = self.kube(context)
        place = where(namespace)
        if namespace is None:
            services = await kube.call_json(
                f"list services {place}",
                kube.core.list_service_for_all_namespaces,
                label_selector=selector,
            )
            endpoints_call: Callable[..., Any] = kube.core.list_endpoints_for_all_namespaces
            endpoint_args: tuple[str, ...] = ()
        else:
            services = await kube.call_json(
                f"list services {place}",
                kube.core.list_namespaced_service,
                namespace,
                label_selector=selector,
            )
            endpoints_call, endpoint_args = kube.core.list_namespaced_endpoints, (namespace,)
        endpoints: dict[str, tuple[int, int]] | None = None
        try:
            listing = await kube.call_json(
                f"list endpoints {place}", endpoints_call, *endpoint_args
            )
        except ToolFailure:
            pass  # the services are still worth showing; their endpoints read "?"
        else:
            endpoints = {}
            for item in items_of(listing):
                subsets = item.get("subsets") or []
                ready = sum(len(s.get("addresses") or []) for s in subsets)
                pending = sum(len(s.get("notReadyAddresses") or []) for s in subsets)
                endpoints[ns_name(item)] = (ready, pending)
        items = items_of(services)
        rows, without = [], 0
        for service in items:
            spec = service.get("spec") or {}
            if endpoints is None:
                endpoint_text = "?"
            elif not spec.get("selector") and spec.get("type") == "ExternalName":
                endpoint_text = "-"
            else:
                ready, pending = endpoints.get(ns_name(service), (0, 0))
                without += ready == 0
                endpoint_text = f"{ready} ready" + (f", {pending} not ready" if pending else "")
            ingress = dig(service, "status", "loadBalancer", "ingress") or []
            external = ",".join(str(i.get("ip") or i.get("hostname")) for i in ingress)
            name = ns_name(service) if namespace is None else dig(service, "metadata", "name")
            rows.append(
                [
                    str(name),
                    str(spec.get("type") or "ClusterIP"),
                    str(spec.get("clusterIP") or "-"),
                    external or spec.get("externalName") or "-",
                    _ports(spec),
                    endpoint_text,
                ]
            )
        rows, more = capped(rows, "services")
        summary = f"{plural(len(items), 'service')} {place}, {without} without ready endpoints"
        if not items:
            return result([f"No services {place} match."], summary)
        header = ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL", "PORTS", "ENDPOINTS"]
        return result([summary, *table(header, rows), *([more] if more else [])], summary)


def _ports(spec: Obj) -> str:
    ports = []
    for port in spec.get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        target = port.get("targetPort")
        if target is not None and target != port.get("port"):
            text += f"->{target}"
        ports.append(f"{text}/{port.get('protocol') or 'TCP'}")
    return ",".join(ports) or "-"


def network_tools(clients: KubeClients) -> list[Tool]:
    reads = _Network(clients)
    return [
        declare(
            "list_services",
            ToolKind.READ,
            "Services: type, addresses, ports, ready endpoints.",
            NamespacedList,
            reads.audited(reads.list_services),
            kinds=("Service", "Endpoints"),
        )
    ]
