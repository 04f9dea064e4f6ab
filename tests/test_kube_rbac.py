"""kelpie's shipped RBAC (deploy/base/rbac-cluster.yaml) is exactly what its tools use.

Every read tool and every write tool (preview and approved write) runs against the fake; the
RBAC attributes of every request it received must be granted by the ClusterRole, and every
rule the ClusterRole grants must have been used. The real-server tier runs the same tools
with exactly this ClusterRole (tests/test_kube_backends.py) and shows anything else is
forbidden.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.effects import KubeEffects
from bot.toolsets.kube.read import read_tools
from bot.toolsets.kube.write import write_tools
from bot.toolsets.spec import ToolContext
from tests.peers.kube_server import Demo, KubeServer, request_attributes

RBAC = Path(__file__).resolve().parents[1] / "deploy" / "base" / "rbac-cluster.yaml"
CTX = ToolContext(cluster="prod", default_namespace="shop")

Grant = tuple[str, str, str]  # verb, API group, resource[/subresource]


def _stamp() -> datetime:
    return datetime(2030, 1, 15, tzinfo=UTC)


def granted() -> set[Grant]:
    documents = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    assert role["metadata"]["name"] == "kelpie"
    grants: set[Grant] = set()
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        for verb in rule["verbs"]:
            for group in rule["apiGroups"]:
                grants |= {(verb, group, resource) for resource in rule["resources"]}
    return grants


def _seed_what_diagnoses_read(kube: KubeServer) -> None:
    """A Pending pod mounting a claim (its claims are then read) and one of each workload."""
    pod = kube.add_pod("shop", "claimant", node=None, phase="Pending", ready=False)
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    kube.put("Pod", pod)
    selector = {"matchLabels": {"app": "store"}}
    for kind in ("StatefulSet", "DaemonSet", "Job"):
        kube.put(
            kind,
            {"metadata": {"name": "store", "namespace": "shop"}}
            | {"spec": {"selector": selector}, "status": {}},
        )


# (kind, name to get) the generic tools read in the test below; None: listed only.
GENERIC_READS: list[tuple[str, str | None]] = [
    ("PersistentVolumeClaim", None),
    ("PersistentVolumeClaim", "data"),
    ("Namespace", "shop"),
    ("Service", "checkout-api"),
    ("StatefulSet", None),
    ("StatefulSet", "orders-db"),
    ("DaemonSet", None),
    ("DaemonSet", "log-agent"),
    ("Job", None),
    ("Job", "report-1"),
    ("CronJob", None),
    ("CronJob", "report"),
    ("Ingress", None),
    ("Ingress", "shop"),
    ("HorizontalPodAutoscaler", None),
    ("HorizontalPodAutoscaler", "checkout-api"),
    ("CustomResourceDefinition", None),
    ("CustomResourceDefinition", "gadgets.example.com"),
]


def _seed_more_kinds(kube: KubeServer) -> None:
    kube.add_configmap("shop", "checkout-config", {"LOG_LEVEL": "info"})
    kube.add_statefulset("shop", "orders-db")
    kube.add_cronjob("shop", "report")
    kube.add_job("shop", "report-1")
    kube.install_crd("example.com", "Gadget", "gadgets")
    for kind, name in (
        ("PersistentVolumeClaim", "data"),
        ("DaemonSet", "log-agent"),
        ("Ingress", "shop"),
        ("HorizontalPodAutoscaler", "checkout-api"),
    ):
        kube.put(kind, {"metadata": {"name": name, "namespace": "shop"}, "spec": {}})
    kube.set_pod_metrics("shop", "checkout-api-1", {"app": ("10m", "64Mi")})
    kube.set_node_metrics("node-a", "100m", "1Gi")


@pytest.fixture
def clients(kube: KubeServer, tmp_path: Path) -> Iterator[KubeClients]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    built = KubeClients.build([("prod", str(kubeconfig), None, False)], request_timeout=5)
    yield built
    built.close()


async def test_the_cluster_role_grants_exactly_what_the_tools_use(
    kube: KubeServer, clients: KubeClients, demo: Demo
) -> None:
    reads = {t.name: t for t in read_tools(clients)}
    _seed_more_kinds(kube)
    read_calls: dict[str, Any] = {
        "list_namespaces": {},
        "list_pods": {},
        "describe_pod": {"name": demo.crashing_pod},
        "pod_logs": {"name": demo.crashing_pod},
        "list_deployments": {},
        "describe_deployment": {"name": demo.deployment},
        "list_events": {},
        "list_nodes": {},
        "list_services": {},
        # the diagnose toolset: every kind its analyzers read
        "diagnose_pod": {"name": "claimant"},
        "diagnose_workload": {"kind": "Deployment", "name": demo.deployment},
        "diagnose_service": {"name": demo.deployment},
        "diagnose_node": {"name": "node-a"},
        "diagnose_namespace": {},
        "rollout_history": {"kind": "Deployment", "name": demo.deployment},
        "what_changed": {"workload": f"Deployment/{demo.deployment}"},
        "top_pods": {},
        "top_nodes": {},
        "list_resources": {"kind": "ConfigMap"},
        "get_resource": {"kind": "ConfigMap", "name": "checkout-config"},
    }
    _seed_what_diagnoses_read(kube)
    assert set(read_calls) == set(reads), "a new read tool: add it here"
    for kind in ("StatefulSet", "DaemonSet", "Job"):
        await reads["diagnose_workload"].handler({"kind": kind, "name": "store"}, CTX)
    for name, args in read_calls.items():
        await reads[name].handler(args, CTX)
    # The workloads whose history is ControllerRevisions.
    for kind in ("StatefulSet", "DaemonSet"):
        kube.add_revisioned(kind, "shop", kind.lower(), [("db:1", _stamp(), "")])
        await reads["rollout_history"].handler({"kind": kind, "name": kind.lower()}, CTX)
    # The generic tools over every built-in kind the ClusterRole grants them.
    (rs,) = [
        r["metadata"]["name"]
        for r in kube.objects("ReplicaSet")
        if r["spec"]["replicas"]
        and r["metadata"]["namespace"] == "shop"
        and "checkout" in r["metadata"]["name"]
    ]
    for kind, name in [*GENERIC_READS, ("ReplicaSet", rs)]:
        if name is None:
            await reads["list_resources"].handler({"kind": kind}, CTX)
        else:
            await reads["get_resource"].handler({"kind": kind, "name": name}, CTX)

    writes = {t.name: t for t in write_tools(clients)}
    write_calls = {
        "scale_deployment": {"name": demo.deployment, "replicas": 4},
        "restart_deployment": {"name": demo.deployment},
        "rollback_deployment": {"name": demo.deployment},
        "set_container_resources": {"name": "frontend", "container": "app"}
        | {"limits": {"memory": "1Gi"}},
        "delete_pod": {"name": demo.crashing_pod},
        "cordon_node": {"name": "node-a"},
        "uncordon_node": {"name": "node-a"},
    }
    assert set(write_calls) == set(writes), "a new write tool: add it here"
    effects = KubeEffects(clients)  # the verification watch reads each write's effect
    for name, args in write_calls.items():
        operation = writes[name].write
        assert operation is not None
        plan = await operation.prepare(args, CTX)
        await operation.execute(plan, CTX)
        await effects.observe(plan)

    used: set[Grant] = set()
    for request in kube.requests:
        seen = request_attributes(request.method, request.path)
        if seen is not None:
            used.add((seen.verb, seen.group, seen.resource))
    assert used - granted() == set(), "the tools use what deploy/base/rbac-cluster.yaml lacks"
    assert sorted(granted() - used) == [], "deploy/base/rbac-cluster.yaml grants what no tool uses"
