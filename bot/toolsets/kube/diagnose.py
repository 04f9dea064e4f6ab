"""The diagnose toolset: deterministic diagnoses of a pod, a workload, a Service, a node or a
whole namespace (kind `diagnose`, no model involved).

Each tool reads the objects through the same client as the read tools (same identity, same
one-sentence failures), runs the pure analyzers of diagnose_analyzers.py over them and
answers ranked findings (diagnose_findings.py), each citing the field it rests on. The
object asked about must be readable; a supporting read that fails (events, logs, HPAs…)
becomes a "Not checked:" line rather than a failed call.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from bot.model.outbound import mask_text
from bot.toolsets.declare import (
    NAME,
    NamespacedObject,
    ObjectNamespace,
    ToolArgs,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
from bot.toolsets.kube.diagnose_analyzers import (
    Logs,
    analyze_claims,
    analyze_hpa,
    analyze_node,
    analyze_pod,
    analyze_service,
    analyze_workload,
    counts_against_node,
    crashing_containers,
    hpa_targets,
)
from bot.toolsets.kube.diagnose_findings import DEFAULT_SHOWN, Finding, clip, render
from bot.toolsets.kube.render import KubeReads, Obj, dig, items_of
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult, ToolScope

LOG_LINES = 20  # of a crashed container's previous instance, shown with its finding
_LOG_BYTES = 8192
_LOG_LINE_CHARS = 200
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")

CHECKS = {
    "pod": "container states, crash loops, OOM kills, image pulls, scheduling, probes, "
    "init containers",
    "workload": "rollout progress, available replicas, job failures, autoscaler limits and "
    "its pods",
    "service": "selector, ready endpoints and target ports",
    "node": "readiness, memory/disk/PID pressure, network and cordon",
    "namespace": "its pods, workloads, autoscalers and Services",
}
NO_SELECTOR = "its pods (the workload has no matchLabels selector to find them by)"


class WorkloadTarget(ToolArgs):
    namespace: ObjectNamespace = None
    kind: Annotated[
        Literal["Deployment", "StatefulSet", "DaemonSet", "Job"],
        Field(),
    ]
    name: Annotated[str, NAME]


class NodeName(ToolArgs):
    name: Annotated[str, NAME]


class NamespaceScan(ToolArgs):
    namespace: ObjectNamespace = None
    max_findings: Annotated[int, Field(ge=1, le=50)] = DEFAULT_SHOWN


class _Reads:
    """The reads of one diagnosis; supporting reads that fail are noted, not raised."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.notes: list[str] = []

    async def one(self, describe: str, fn: Callable[..., Any], *args: Any) -> Obj:
        found = await self.kube.call_json(describe, fn, *args)
        return found if isinstance(found, dict) else {}

    async def items(
        self, what: str, fn: Callable[..., Any], *args: Any, **selectors: Any
    ) -> list[Obj]:
        return await self.maybe_items(what, fn, *args, **selectors) or []

    async def maybe_items(
        self, what: str, fn: Callable[..., Any], *args: Any, **selectors: Any
    ) -> list[Obj] | None:
        """The objects listed, or None (and a note) when they could not be."""
        try:
            return items_of(await self.kube.call_json(f"list {what}", fn, *args, **selectors))
        except ToolFailure as failure:
            self.notes.append(f"{what} ({failure})")
            return None

    async def events(self, namespace: str, selector: str) -> list[Obj]:
        core = self.kube.core
        what = f"events in namespace {namespace}"
        return await self.items(
            what, core.list_namespaced_event, namespace, field_selector=selector
        )

    async def claims_for(self, namespace: str, pods: Sequence[Obj]) -> list[Obj] | None:
        """The namespace's claims, read only when a Pending pod mounts one (None: they
        could not be read)."""
        if not any(_pending_with_claims(p) for p in pods):
            return []
        core = self.kube.core
        what = f"persistentvolumeclaims in namespace {namespace}"
        return await self.maybe_items(what, core.list_namespaced_persistent_volume_claim, namespace)

    async def previous_logs(self, namespace: str, pods: Sequence[Obj], budget: int) -> Logs:
        """The last lines of crashed containers' previous instances (masked), at most
        `budget` containers."""
        wanted = [
            (str(dig(p, "metadata", "name")), c) for p in pods for c in crashing_containers(p)
        ]
        logs: dict[tuple[str, str], tuple[str, ...]] = {}
        for pod, container in wanted[:budget]:
            try:
                text = await self.kube.call(
                    f"read the previous logs of container {container} of pod {namespace}/{pod}",
                    self.kube.core.read_namespaced_pod_log,
                    pod,
                    namespace,
                    container=container,
                    previous=True,
                    tail_lines=LOG_LINES,
                    limit_bytes=_LOG_BYTES,
                )
            except ToolFailure as failure:
                self.notes.append(f"previous logs of {container} in pod {pod} ({failure})")
                continue
            masked, _ = mask_text(text if isinstance(text, str) else str(text or ""))
            lines = masked.splitlines()[-LOG_LINES:]
            logs[(pod, container)] = tuple(clip(line, _LOG_LINE_CHARS) for line in lines)
        return logs


def _pending_with_claims(pod: Obj) -> bool:
    volumes = dig(pod, "spec", "volumes") or []
    claims = any(dig(v, "persistentVolumeClaim", "claimName") for v in volumes)
    return dig(pod, "status", "phase") == "Pending" and claims


def _selector(workload: Obj) -> str | None:
    labels = dig(workload, "spec", "selector", "matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


def _pod_findings(
    pods: Sequence[Obj], events: Sequence[Obj], claims: Sequence[Obj] | None, logs: Logs
) -> list[Finding]:
    about: dict[str, list[Obj]] = defaultdict(list)  # the events by the pod they are about
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        about[str(involved.get("name"))].append(event)
    found: list[Finding] = []
    for pod in pods:
        mine = about.get(str(dig(pod, "metadata", "name")), [])
        found += analyze_pod(pod, mine, logs)
        found += [] if claims is None else analyze_claims(pod, claims)
    return found


class _Diagnose(KubeReads):
    async def diagnose_pod(self, args: NamespacedObject, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        reads = _Reads(self.kube(context))
        core = reads.kube.core
        where = f"{namespace}/{args.name}"
        pod = await reads.one(f"read pod {where}", core.read_namespaced_pod, args.name, namespace)
        events = await reads.events(
            namespace, f"involvedObject.kind=Pod,involvedObject.name={args.name}"
        )
        claims = await reads.claims_for(namespace, [pod])
        logs = await reads.previous_logs(namespace, [pod], budget=3)
        findings = _pod_findings([pod], events, claims, logs)
        return render(f"pod {where}", findings, checked=CHECKS["pod"], notes=reads.notes)

    async def diagnose_workload(self, args: WorkloadTarget, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        reads = _Reads(self.kube(context))
        kube, kind, name = reads.kube, args.kind, args.name
        reader = {
            "Deployment": kube.apps.read_namespaced_deployment,
            "StatefulSet": kube.apps.read_namespaced_stateful_set,
            "DaemonSet": kube.apps.read_namespaced_daemon_set,
            "Job": kube.batch.read_namespaced_job,
        }[kind]
        where = f"{namespace}/{name}"
        workload = await reads.one(f"read {kind.lower()} {where}", reader, name, namespace)
        findings = analyze_workload(workload, kind)
        if kind in ("Deployment", "StatefulSet"):  # what an HPA scales
            hpas = await reads.items(
                f"horizontalpodautoscalers in namespace {namespace}",
                kube.autoscaling.list_namespaced_horizontal_pod_autoscaler,
                namespace,
            )
            for hpa in hpas:
                findings += analyze_hpa(hpa) if hpa_targets(hpa, kind, name) else []
        target = f"{kind.lower()} {where}"
        findings += await self._workload_pods(reads, workload, target)
        return render(target, findings, checked=CHECKS["workload"], notes=reads.notes)

    @staticmethod
    async def _workload_pods(reads: _Reads, workload: Obj, what: str) -> list[Finding]:
        """The pod analyzers over the workload's pods (found by its matchLabels)."""
        namespace = str(dig(workload, "metadata", "namespace"))
        selector = _selector(workload)
        if selector is None:
            reads.notes.append(NO_SELECTOR)
            return []
        core = reads.kube.core
        pods = await reads.items(
            f"pods of {what}", core.list_namespaced_pod, namespace, label_selector=selector
        )
        events = await reads.events(namespace, "type=Warning") if pods else []
        claims = await reads.claims_for(namespace, pods)
        logs = await reads.previous_logs(namespace, pods, budget=2)
        return _pod_findings(pods, events, claims, logs)

    async def diagnose_service(self, args: NamespacedObject, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        reads = _Reads(self.kube(context))
        core = reads.kube.core
        where = f"{namespace}/{args.name}"
        service = await reads.one(
            f"read service {where}", core.read_namespaced_service, args.name, namespace
        )
        endpoints = await self._endpoints(reads, args.name, namespace)
        selector = dig(service, "spec", "selector") or {}
        pods: list[Obj] | None = []
        if selector:
            shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods = await reads.maybe_items(
                f"pods in namespace {namespace}",
                core.list_namespaced_pod,
                namespace,
                label_selector=shown,
            )
        findings = analyze_service(service, endpoints, pods)
        return render(f"service {where}", findings, checked=CHECKS["service"], notes=reads.notes)

    @staticmethod
    async def _endpoints(reads: _Reads, name: str, namespace: str) -> Obj | None:
        try:
            return await reads.one(
                f"read endpoints {namespace}/{name}",
                reads.kube.core.read_namespaced_endpoints,
                name,
                namespace,
            )
        except KubeFailure as failure:
            if failure.status == 404:
                return {}  # no Endpoints object: no endpoints at all
            reads.notes.append(f"endpoints ({failure})")
            return None

    async def diagnose_node(self, args: NodeName, context: ToolContext) -> ToolResult:
        reads = _Reads(self.kube(context))
        core = reads.kube.core
        node = await reads.one(f"read node {args.name}", core.read_node, args.name)
        pods = await reads.items(
            f"pods on node {args.name}",
            core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={args.name}",
        )
        findings = analyze_node(node, sum(1 for p in pods if counts_against_node(p)))
        return render(f"node {args.name}", findings, checked=CHECKS["node"], notes=reads.notes)

    async def diagnose_namespace(self, args: NamespaceScan, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        reads = _Reads(self.kube(context))
        kube = reads.kube
        pods = items_of(
            await kube.call_json(
                f"list pods in namespace {namespace}", kube.core.list_namespaced_pod, namespace
            )
        )
        listers = _namespace_listers(kube)
        listed, events, claims = await asyncio.gather(
            asyncio.gather(
                *(
                    reads.maybe_items(f"{plural} in namespace {namespace}", fn, namespace)
                    for plural, fn in listers.values()
                )
            ),
            reads.events(namespace, "type=Warning"),
            reads.claims_for(namespace, pods),
        )
        found = dict(zip(listers, listed, strict=True))
        findings = _pod_findings(pods, events, claims, {}) + _namespace_findings(found, pods)
        return render(
            f"namespace {namespace}",
            findings,
            checked=CHECKS["namespace"],
            shown=args.max_findings,
            notes=reads.notes,
        )


def _namespace_listers(kube: KubeClient) -> dict[str, tuple[str, Callable[..., Any]]]:
    """kind: (plural, list call) of what a namespace scan reads beside its pods."""
    return {
        "Deployment": ("deployments", kube.apps.list_namespaced_deployment),
        "StatefulSet": ("statefulsets", kube.apps.list_namespaced_stateful_set),
        "DaemonSet": ("daemonsets", kube.apps.list_namespaced_daemon_set),
        "Job": ("jobs", kube.batch.list_namespaced_job),
        "HorizontalPodAutoscaler": (
            "horizontalpodautoscalers",
            kube.autoscaling.list_namespaced_horizontal_pod_autoscaler,
        ),
        "Service": ("services", kube.core.list_namespaced_service),
        "Endpoints": ("endpoints", kube.core.list_namespaced_endpoints),
    }


def _namespace_findings(found: dict[str, list[Obj] | None], pods: Sequence[Obj]) -> list[Finding]:
    """The workload, autoscaler and Service analyzers over a namespace's objects."""
    findings = [
        finding
        for kind in WORKLOAD_KINDS
        for workload in found[kind] or []
        for finding in analyze_workload(workload, kind)
    ]
    for hpa in found["HorizontalPodAutoscaler"] or []:
        findings += analyze_hpa(hpa)
    listed = found["Endpoints"]  # None: could not be listed
    endpoints = {dig(e, "metadata", "name"): e for e in listed or []}
    for service in found["Service"] or []:
        name = dig(service, "metadata", "name")
        ends = None if listed is None else endpoints.get(name, {})
        findings += analyze_service(service, ends, pods)
    return findings


def diagnose_tools(clients: KubeClients) -> list[Tool]:
    reads = _Diagnose(clients)
    pod_kinds = ("Pod", "Event", "PersistentVolumeClaim")
    return [
        declare(
            "diagnose_pod",
            ToolKind.DIAGNOSE,
            "Findings for a pod: crash loop, OOM, image pull, scheduling, probes, init containers.",
            NamespacedObject,
            reads.audited(reads.diagnose_pod),
            kinds=pod_kinds,
        ),
        declare(
            "diagnose_workload",
            ToolKind.DIAGNOSE,
            "Findings for a workload: rollout deadline, unavailable replicas, HPA at max.",
            WorkloadTarget,
            reads.audited(reads.diagnose_workload),
            kinds=(*WORKLOAD_KINDS, "HorizontalPodAutoscaler", *pod_kinds),
        ),
        declare(
            "diagnose_service",
            ToolKind.DIAGNOSE,
            "Findings for a Service: selector matching no pod, no endpoints, wrong targetPort.",
            NamespacedObject,
            reads.audited(reads.diagnose_service),
            kinds=("Service", "Endpoints", "Pod"),
        ),
        declare(
            "diagnose_node",
            ToolKind.DIAGNOSE,
            "Findings for a node: NotReady, pressure, network unavailable, cordoned with pods.",
            NodeName,
            reads.audited(reads.diagnose_node),
            scope=ToolScope.CLUSTER,
            kinds=("Node", "Pod"),
        ),
        declare(
            "diagnose_namespace",
            ToolKind.DIAGNOSE,
            "Findings for every pod, workload, HPA and Service of a namespace, ranked.",
            NamespaceScan,
            reads.audited(reads.diagnose_namespace),
            kinds=(*WORKLOAD_KINDS, "HorizontalPodAutoscaler", "Service", "Endpoints", *pod_kinds),
        ),
    ]
