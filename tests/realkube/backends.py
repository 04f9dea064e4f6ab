"""One interface over the two Kubernetes backends the tool tests run against: the fake in
tests/peers/kube_server.py and a real kube-apiserver (tests/realkube/cluster.py).

Only seeding and reading back differ per backend; the tests call the tools through
`clients` (kelpie's identity) and assert on what the tools answer and on the objects read
back. Each test gets its own namespace (and node names), so one real cluster serves a session.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from bot.toolsets.kube.client import KubeClients
from tests.peers.kube_server import Identity, KubeServer
from tests.realkube.cluster import (
    KELPIE_USER,
    Admin,
    RealKube,
    binding,
    eventually,
    shipped_rbac,
)

Obj = dict[str, Any]
CLUSTER = "prod"
IMAGE = "registry.example.com/app:1.0"
_PLURAL = {"Deployment": "deployments", "Pod": "pods", "Node": "nodes"}


def _clients(kubeconfig: Path) -> KubeClients:
    return KubeClients.build([(CLUSTER, str(kubeconfig), None, False)], request_timeout=10)


class Backend(ABC):
    name: str
    namespace: str
    clients: KubeClients  # kelpie's own identity

    @abstractmethod
    def clients_as(self, who: str) -> KubeClients:
        """Clients with another identity's token: `viewer` (may read in namespace shop only)."""

    @abstractmethod
    def grant(self, doc: Obj) -> None:
        """Create an RBAC object (Role, ClusterRole, RoleBinding, ClusterRoleBinding)."""

    @abstractmethod
    def deployment(self, name: str, *, replicas: int = 2, image: str = IMAGE) -> None:
        """A deployment whose first ReplicaSet (revision 1) exists."""

    @abstractmethod
    def new_revision(self, name: str, image: str) -> None:
        """Change the deployment's image and wait for its next ReplicaSet."""

    @abstractmethod
    def pod(self, name: str, node: str | None = None) -> None:
        """A pod no controller owns; unscheduled (Pending) unless bound to `node`."""

    @abstractmethod
    def node(self, name: str) -> None:
        """A Ready node without addresses."""

    @abstractmethod
    def read(self, kind: str, name: str) -> Obj | None:
        """The object as stored now (None: gone)."""

    @abstractmethod
    def churn(self, kind: str, name: str) -> None:
        """What a controller or kubelet does all the time: a status-only write."""

    @abstractmethod
    def change_spec(self, kind: str, name: str, spec: Obj) -> None:
        """Someone else changes the spec (merge patch)."""

    @abstractmethod
    def replace(self, kind: str, name: str) -> None:
        """Delete the object and create one of the same name (a new uid)."""

    @abstractmethod
    def node_name(self, base: str) -> str:
        """A cluster-scoped name that no other test uses."""

    # The real server is reached through a blocking client: churn from a thread. The fake
    # lives on this event loop: a write from another thread would race its handlers (a
    # read-modify-write that loses the change under test).
    churns_in_thread = True

    async def churning(self, kind: str, name: str, stop: asyncio.Event) -> int:
        """Churn status until `stop` is set; answers how many writes were made."""
        count = 0
        while not stop.is_set():
            if self.churns_in_thread:
                await asyncio.to_thread(self.churn, kind, name)
            else:
                self.churn(kind, name)
            count += 1
            await asyncio.sleep(0.02)
        return count

    def close(self) -> None:
        self.clients.close()


# The real tier's identities (tests/realkube/start.sh), as the fake's bearer tokens.
_FAKE_IDENTITIES = {
    "admin": Identity("realkube-admin", ("system:masters",)),
    "kelpie": Identity(KELPIE_USER, ("kelpie:operators",)),
    "viewer": Identity("kelpie-viewer"),
}


class FakeBackend(Backend):
    name = "fake"
    churns_in_thread = False

    def __init__(self, kube: KubeServer, tmp: Path) -> None:
        self.kube = kube
        self.tmp = tmp
        self.namespace = f"t-{uuid.uuid4().hex[:8]}"
        kube.add_namespace(self.namespace)
        kube.authenticate({f"{who}-token": identity for who, identity in _FAKE_IDENTITIES.items()})
        for doc in shipped_rbac():
            if doc["kind"] != "ServiceAccount":
                self.grant(doc)
        viewer = {"kind": "User", "name": "kelpie-viewer"}
        self.grant(binding({"kind": "ClusterRole", "metadata": {"name": "view"}}, viewer, "shop"))
        self.clients = self.clients_as("kelpie")

    def clients_as(self, who: str) -> KubeClients:
        path = self.kube.write_kubeconfig(self.tmp / f"{who}.kubeconfig", token=f"{who}-token")
        return _clients(path)

    def grant(self, doc: Obj) -> None:
        self.kube.add_rbac(doc)

    def _ns(self, kind: str) -> str:
        return "" if kind == "Node" else self.namespace

    def deployment(self, name: str, *, replicas: int = 2, image: str = IMAGE) -> None:
        self.kube.add_deployment(self.namespace, name, replicas=replicas, image=image, pods=True)
        self._scaled_event(name, replicas)

    def _scaled_event(self, name: str, replicas: int) -> None:
        """What the deployment controller records when it scales a ReplicaSet up."""
        message = f"Scaled up replica set {name}-{uuid.uuid4().hex[:10]} to {replicas}"
        self.kube.add_event(
            self.namespace,
            "Deployment",
            name,
            "ScalingReplicaSet",
            message,
            type="Normal",
            component="deployment-controller",
        )

    def new_revision(self, name: str, image: str) -> None:
        current = self.read("Deployment", name)
        assert current is not None
        revision = int(current["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
        replicas = current["spec"]["replicas"]
        self.kube.add_deployment(
            self.namespace, name, replicas=replicas, image=image, revision=revision + 1
        )
        self._scaled_event(name, replicas)

    def pod(self, name: str, node: str | None = None) -> None:
        phase = "Pending" if node is None else "Running"
        self.kube.add_pod(self.namespace, name, node=node, phase=phase, ready=False)

    def node(self, name: str) -> None:
        node = self.kube.add_node(name)
        del node["status"]["addresses"]
        self.kube.put("Node", node)

    def read(self, kind: str, name: str) -> Obj | None:
        return self.kube.get(kind, self._ns(kind), name)

    def churn(self, kind: str, name: str) -> None:
        obj = self.read(kind, name)
        if obj is not None:
            obj.setdefault("status", {})["observedAt"] = str(len(self.kube.requests))
            self.kube.put(kind, obj)

    def change_spec(self, kind: str, name: str, spec: Obj) -> None:
        obj = self.read(kind, name)
        assert obj is not None
        obj["spec"] |= copy.deepcopy(spec)
        if kind == "Deployment":
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        self.kube.put(kind, obj)

    def replace(self, kind: str, name: str) -> None:
        self.kube.replace_object(kind, self._ns(kind), name)

    def node_name(self, base: str) -> str:
        return f"{base}-{uuid.uuid4().hex[:6]}"


class RealBackend(Backend):
    name = "real"

    def __init__(self, cluster: RealKube, admin: Admin) -> None:
        self.cluster = cluster
        self.admin = admin
        self.namespace = admin.namespace()
        self.clients = self.clients_as("kelpie")

    def clients_as(self, who: str) -> KubeClients:
        return _clients(self.cluster.kubeconfig(who))

    def grant(self, doc: Obj) -> None:
        self.admin.grant(doc)

    def deployment(self, name: str, *, replicas: int = 2, image: str = IMAGE) -> None:
        labels = {"app": name}
        container = {"name": "app", "image": image}
        container["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        }
        self.admin.apps.create_namespaced_deployment(self.namespace, body)
        self._wait_revision(name, 1)

    def _wait_revision(self, name: str, revision: int) -> None:
        def found() -> bool:
            listing = self.admin.json(
                self.admin.apps.list_namespaced_replica_set,
                self.namespace,
                label_selector=f"app={name}",
            )
            return any(
                (rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
                == str(revision)
                for rs in listing["items"]
            )

        eventually(f"revision {revision} of deployment {name}", found)

    def new_revision(self, name: str, image: str) -> None:
        def revision_now() -> str | None:
            current = self.read("Deployment", name) or {}
            annotations = current.get("metadata", {}).get("annotations") or {}
            return annotations.get("deployment.kubernetes.io/revision")

        # The controller annotates the deployment a moment after its ReplicaSet.
        revision = int(eventually(f"the revision annotation of {name}", revision_now))
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}
        self.admin.apps.patch_namespaced_deployment(name, self.namespace, patch)
        self._wait_revision(name, revision + 1)

    def pod(self, name: str, node: str | None = None) -> None:
        container = {"name": "app", "image": IMAGE}
        spec: Obj = {"containers": [container]} | ({"nodeName": node} if node else {})
        body = {"metadata": {"name": name}, "spec": spec}
        self.admin.core.create_namespaced_pod(self.namespace, body)

    def node(self, name: str) -> None:
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        capacity = {"cpu": "4", "memory": "16Gi", "pods": "110"}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        }
        created = self.admin.json(self.admin.core.create_node, body)
        status = {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}
        status["nodeInfo"] = {"kubeletVersion": "v1.20.2", "osImage": "Debian GNU/Linux 12"}
        self.admin.core.patch_node_status(name, {"status": status})
        assert created is not None

    def read(self, kind: str, name: str) -> Obj | None:
        match kind:
            case "Deployment":
                fn, args = self.admin.apps.read_namespaced_deployment, (name, self.namespace)
            case "Pod":
                fn, args = self.admin.core.read_namespaced_pod, (name, self.namespace)
            case _:
                fn, args = self.admin.core.read_node, (name,)
        found = self.admin.json(fn, *args)
        return dict(found) if found is not None else None

    def churn(self, kind: str, name: str) -> None:
        try:
            self._churn(kind, name)
        except ApiException as exc:
            if exc.status != 404:  # the object may be gone: the write under test deleted it
                raise

    def _churn(self, kind: str, name: str) -> None:
        stamp = uuid.uuid4().hex[:8]
        match kind:
            case "Deployment":
                # A condition the deployment controller does not own: it keeps it as is.
                condition = {"type": "kelpie-test", "status": "True", "reason": stamp}
                self.admin.apps.patch_namespaced_deployment_status(
                    name, self.namespace, {"status": {"conditions": [condition]}}
                )
            case "Pod":
                self.admin.core.patch_namespaced_pod_status(
                    name, self.namespace, {"status": {"message": stamp}}
                )
            case _:
                heartbeat = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
                self.admin.core.patch_node_status(
                    name, {"status": {"conditions": [heartbeat | {"message": stamp}]}}
                )

    def change_spec(self, kind: str, name: str, spec: Obj) -> None:
        patch = {"spec": spec}
        match kind:
            case "Deployment":
                self.admin.apps.patch_namespaced_deployment(name, self.namespace, patch)
            case "Pod":
                self.admin.core.patch_namespaced_pod(name, self.namespace, patch)
            case _:
                self.admin.core.patch_node(name, patch)

    def replace(self, kind: str, name: str) -> None:
        obj = self.read(kind, name)
        assert obj is not None
        fresh = {"metadata": {"name": name, "labels": obj["metadata"].get("labels") or {}}}
        fresh["spec"] = obj["spec"]
        match kind:
            case "Deployment":
                self.admin.apps.delete_namespaced_deployment(name, self.namespace)
                eventually("the deletion", lambda: self.read(kind, name) is None)
                self.admin.apps.create_namespaced_deployment(self.namespace, fresh)
            case "Pod":
                self.admin.core.delete_namespaced_pod(name, self.namespace)
                eventually("the deletion", lambda: self.read(kind, name) is None)
                self.admin.core.create_namespaced_pod(self.namespace, fresh)
            case _:
                self.admin.core.delete_node(name)
                eventually("the deletion", lambda: self.read(kind, name) is None)
                self.node(name)

    def node_name(self, base: str) -> str:
        return f"{base}-{uuid.uuid4().hex[:6]}"
