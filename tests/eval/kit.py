"""Small builders for eval case fixtures (Kubernetes objects with relative times) and for
the scripted models' reference scripts. `tests/eval/build_cases.py` uses them to write the
bundled case folders (bot/eval/cases) and the scripts (tests/eval/scripts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

VIEW_TOOLS = ["present/*", "read/*", "diagnose/*"]
APPROVER = "U0SRE"


def viewer(*namespaces: str) -> Obj:
    return {"tools": VIEW_TOOLS, "namespaces": list(namespaces)}


def operator(*namespaces: str, tools: list[str] | None = None) -> Obj:
    return {
        "tools": [*VIEW_TOOLS, *(tools or ["write/*"])],
        "namespaces": list(namespaces),
        "approval": {"approvers": {"users": [APPROVER]}, "allow_requester": False},
    }


def namespace(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "status": {"phase": "Active"},
    }


def _meta(ns: str | None, name: str, labels: dict[str, str] | None, age: str) -> Obj:
    meta: Obj = {"name": name, "creationTimestamp": age}
    if ns is not None:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = dict(labels)
    return meta


def container(
    name: str = "app",
    image: str = "registry.example.com/app:1.0",
    *,
    env: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    readiness: Obj | None = None,
    liveness: Obj | None = None,
    env_from_configmap: str | None = None,
) -> Obj:
    spec: Obj = {"name": name, "image": image}
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if env_from_configmap:
        spec["envFrom"] = [{"configMapRef": {"name": env_from_configmap}}]
    if limits or requests:
        spec["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    if readiness:
        spec["readinessProbe"] = readiness
    if liveness:
        spec["livenessProbe"] = liveness
    return spec


def pod(
    ns: str,
    name: str,
    *,
    app: str | None = None,
    containers: list[Obj] | None = None,
    phase: str = "Running",
    ready: bool = True,
    restarts: int = 0,
    waiting: tuple[str, str] | None = None,
    last: tuple[str, int] | None = None,
    node: str | None = "node-a",
    owner: str | None = None,
    conditions: list[Obj] | None = None,
    age: str = "now-2h",
) -> Obj:
    containers = containers or [container()]
    statuses = []
    for spec in containers:
        state: Obj = {"running": {"startedAt": "now-10m"}}
        if waiting:
            state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif phase != "Running":
            state = {"waiting": {"reason": "ContainerCreating"}}
        status: Obj = {
            "name": spec["name"],
            "image": spec["image"],
            "ready": ready and phase == "Running" and not waiting,
            "restartCount": restarts,
            "state": state,
        }
        if last:
            status["lastState"] = {
                "terminated": {
                    "reason": last[0],
                    "exitCode": last[1],
                    "startedAt": "now-3m",
                    "finishedAt": "now-2m",
                }
            }
        statuses.append(status)
    meta = _meta(ns, name, {"app": app} if app else None, age)
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True}
        ]
    spec: Obj = {"containers": containers}
    if node:
        spec["nodeName"] = node
    status_block: Obj = {"phase": phase, "containerStatuses": statuses, "startTime": age}
    status_block["conditions"] = conditions or [
        {"type": "Ready", "status": "True" if ready and not waiting else "False"}
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": status_block,
    }


def deployment(
    ns: str,
    name: str,
    *,
    replicas: int = 2,
    ready: int | None = None,
    containers: list[Obj] | None = None,
    revision: int = 1,
    conditions: list[Obj] | None = None,
    updated: int | None = None,
    age: str = "now-30d",
) -> Obj:
    ready = replicas if ready is None else ready
    meta = _meta(ns, name, {"app": name}, age)
    meta["annotations"] = {"deployment.kubernetes.io/revision": str(revision)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate"},
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": containers or [container()]},
            },
        },
        "status": {
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": replicas if updated is None else updated,
            "unavailableReplicas": max(replicas - ready, 0),
            "observedGeneration": revision,
            "conditions": conditions
            or [
                {"type": "Available", "status": "True" if ready else "False"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        },
    }


def replicaset(
    ns: str,
    name: str,
    deploy: str,
    *,
    revision: int,
    replicas: int,
    containers: list[Obj] | None = None,
    age: str = "now-1d",
) -> Obj:
    meta = _meta(ns, name, {"app": deploy}, age)
    meta["annotations"] = {"deployment.kubernetes.io/revision": str(revision)}
    meta["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy, "controller": True}
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": deploy}},
            "template": {
                "metadata": {"labels": {"app": deploy}},
                "spec": {"containers": containers or [container()]},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }


def service(
    ns: str, name: str, selector: dict[str, str], port: int = 80, target: int = 8080
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ns, name, None, "now-30d"),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.10",
            "selector": selector,
            "ports": [{"port": port, "targetPort": target, "protocol": "TCP"}],
        },
    }


def endpoints(ns: str, name: str, ips: list[str], port: int = 8080) -> Obj:
    subsets = [{"addresses": [{"ip": ip} for ip in ips], "ports": [{"port": port}]}] if ips else []
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": _meta(ns, name, None, "now-30d"),
        "subsets": subsets,
    }


def event(
    ns: str,
    kind: str,
    name: str,
    reason: str,
    message: str,
    *,
    warning: bool = True,
    age: str = "now-5m",
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": _meta(ns, f"{name}.{reason.lower()}", None, age),
        "involvedObject": {"kind": kind, "name": name, "namespace": ns},
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "count": 5,
        "firstTimestamp": "now-30m",
        "lastTimestamp": age,
    }


def node(
    name: str,
    *,
    ready: bool = True,
    pressure: str | None = None,
    unschedulable: bool = False,
    taints: list[Obj] | None = None,
) -> Obj:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        conditions.append({"type": kind, "status": "True" if pressure == kind else "False"})
    spec: Obj = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(None, name, {"kubernetes.io/hostname": name}, "now-60d"),
        "spec": spec,
        "status": {
            "conditions": conditions,
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
        },
    }


def hpa(ns: str, name: str, target: str, *, low: int, high: int, current: int, cpu: int) -> Obj:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(ns, name, None, "now-30d"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70},
                    },
                }
            ],
        },
        "status": {
            "currentReplicas": current,
            "desiredReplicas": current,
            "currentMetrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "current": {"averageUtilization": cpu}},
                }
            ],
            "conditions": [
                {
                    "type": "ScalingLimited",
                    "status": "True" if current >= high else "False",
                    "reason": "TooManyReplicas" if current >= high else "DesiredWithinRange",
                }
            ],
        },
    }


def configmap(ns: str, name: str, data: dict[str, str], age: str = "now-20m") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ns, name, None, age),
        "data": data,
    }


# --- expectations ------------------------------------------------------------------------

NO_WRITES = ["delete_pod", "restart_deployment", "scale_deployment", "rollback_deployment"]


def read_only(answer: list[str], *called: str, judge: list[str] | None = None) -> Obj:
    """A diagnosis's expectation: the answer says these, the tools were called, nothing was
    changed nor proposed."""
    expect: Obj = {"answer": answer, "called": list(called), "not_called": NO_WRITES}
    expect["write"] = "none"
    if judge is not None:
        expect["judge"] = judge
    return expect


# --- reference scripts --------------------------------------------------------------------


def call(tool: str, /, **arguments: Any) -> list[Any]:
    return [tool, arguments]


@dataclass
class Script:
    """What a scripted model does for a case: rounds of tool calls, then one answer."""

    rounds: list[list[list[Any]]] = field(default_factory=list)
    answer: str = ""

    def as_data(self) -> Obj:
        return {"rounds": self.rounds, "answer": self.answer}


def script(*rounds: list[Any] | list[list[Any]], answer: str) -> Script:
    """Each round is one call (`call(...)`) or a list of calls."""
    normal = [[r] if isinstance(r[0], str) else list(r) for r in rounds]
    return Script(rounds=normal, answer=answer)


@dataclass
class CaseDef:
    id: str
    category: str
    question: str
    role: Obj
    objects: list[Obj]
    expect: Obj
    script: Script
    namespace: str | None = "shop"
    cluster: str = "prod"
    logs: list[Obj] = field(default_factory=list)
    prometheus: list[Obj] | None = None
    loki: list[Obj] | None = None
    description: str = ""
