"""What the tools of a thread read from Kubernetes, as object reads a fixture can repeat.

The stored tool results are rendered text (what the model read), not the objects: so the
export names, per read tool call, the objects it fetched (a pod, the pods of a namespace,
a workload with its ReplicaSets, …) and re-reads them. Secrets are never named (no kelpie
tool reads one; a `get_resource` of a Secret is listed as not captured), nor is anything a
Kubernetes read cannot repeat: metrics (`top_*`) and observability queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

SECRET_KINDS = frozenset({"Secret"})


@dataclass(frozen=True)
class ObjectRead:
    """One GET (with `name`) or LIST (without) of a kind, in a namespace (None: cluster)."""

    kind: str
    namespace: str | None
    name: str | None = None
    label_selector: str | None = None


@dataclass(frozen=True)
class LogRead:
    namespace: str
    pod: str
    container: str | None
    previous: bool
    tail_lines: int | None


@dataclass(frozen=True)
class ReadPlan:
    objects: tuple[ObjectRead, ...]
    logs: tuple[LogRead, ...]
    # Calls whose reads are not in the fixture, each with why (said in the case's notes).
    not_captured: tuple[str, ...]


Args = dict[str, Any]
Reads = Callable[[Args, str | None], list[ObjectRead]]


def _one(kind: str) -> Reads:
    return lambda a, ns: [ObjectRead(kind, a.get("namespace") or ns, a.get("name"))]


def _all(*kinds: str) -> Reads:
    return lambda a, ns: [
        ObjectRead(k, a.get("namespace") or ns, None, a.get("label_selector")) for k in kinds
    ]


def _cluster(kind: str, *, named: bool = False) -> Reads:
    return lambda a, ns: [ObjectRead(kind, None, a.get("name") if named else None)]


def _and(*parts: Reads) -> Reads:
    return lambda a, ns: [read for part in parts for read in part(a, ns)]


def _generic(a: Args, ns: str | None) -> list[ObjectRead]:
    kind = str(a.get("kind") or "")
    return [ObjectRead(kind, a.get("namespace") or ns, a.get("name"), a.get("label_selector"))]


def _workload(a: Args, ns: str | None) -> list[ObjectRead]:
    namespace = a.get("namespace") or ns
    kind = str(a.get("kind") or "Deployment")
    name = a.get("name") or a.get("workload")
    owned = "ReplicaSet" if kind == "Deployment" else "ControllerRevision"
    return [
        ObjectRead(kind, namespace, name),
        ObjectRead(owned, namespace),
        ObjectRead("Pod", namespace),
        ObjectRead("Event", namespace),
    ]


def _changes(a: Args, ns: str | None) -> list[ObjectRead]:
    namespace = a.get("namespace") or ns
    kinds = ("Deployment", "ReplicaSet", "ConfigMap", "Event")
    return [ObjectRead(kind, namespace) for kind in kinds]


_TOOLS: dict[str, Reads] = {
    "list_namespaces": _cluster("Namespace"),
    "list_pods": _all("Pod"),
    "describe_pod": _and(
        _one("Pod"), lambda a, ns: [ObjectRead("Event", a.get("namespace") or ns)]
    ),
    "list_deployments": _all("Deployment"),
    "describe_deployment": _and(_one("Deployment"), _all("ReplicaSet"), _all("Pod")),
    "list_events": _all("Event"),
    "list_nodes": _cluster("Node"),
    "list_services": _all("Service"),
    "list_resources": _generic,
    "get_resource": _generic,
    "rollout_history": _workload,
    "what_changed": _changes,
    "diagnose_pod": _and(_one("Pod"), _all("Event")),
    "diagnose_workload": _workload,
    "diagnose_service": _and(_one("Service"), _one("Endpoints"), _all("Pod")),
    "diagnose_node": _cluster("Node", named=True),
    "diagnose_namespace": _all("Pod", "Deployment", "ReplicaSet", "Service", "Event"),
}
_NOT_KUBE = {
    "top_pods": "metrics (metrics.k8s.io) are not captured",
    "top_nodes": "metrics (metrics.k8s.io) are not captured",
}


def plan_reads(calls: Iterable[tuple[str, Args]], namespace: str | None) -> ReadPlan:
    """The reads behind `calls` (tool name, arguments), `namespace` where a call named none."""
    objects: dict[ObjectRead, None] = {}
    logs: dict[LogRead, None] = {}
    skipped: list[str] = []
    for name, args in calls:
        if name == "pod_logs":
            pod_ns = args.get("namespace") or namespace
            if pod_ns and args.get("name"):
                logs[_log_read(args, pod_ns)] = None
                objects[ObjectRead("Pod", pod_ns, args["name"])] = None
            continue
        reads = _TOOLS.get(name)
        if reads is None:
            why = _NOT_KUBE.get(name, "not a Kubernetes read kelpie can repeat")
            skipped.append(f"{name}: {why}")
            continue
        for read in reads(args, namespace):
            if read.kind in SECRET_KINDS:
                skipped.append(f"{name} {read.kind}: Secrets are never exported")
            elif read.kind:
                objects[read] = None
    return ReadPlan(tuple(objects), tuple(logs), tuple(dict.fromkeys(skipped)))


def _log_read(args: Args, namespace: str) -> LogRead:
    tail = args.get("tail_lines")
    return LogRead(
        namespace,
        str(args["name"]),
        args.get("container"),
        bool(args.get("previous")),
        int(tail) if isinstance(tail, int) else None,
    )
