"""Seeding the real tier as the tool-level realkube tests and the whole-bot scenarios
(tests/test_real_scenarios.py) share it: kinds beyond the typed client (CronJob
batch/v1beta1, a CRD and its custom resource), the custom-kinds RBAC, rollouts, and what a
kubelet would report (the tier has none), written through the status subresource."""

from __future__ import annotations

import json
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from tests.realkube.backends import Backend, RealBackend
from tests.realkube.cluster import KELPIE_USER, ROOT, Admin, binding, eventually

Obj = dict[str, Any]

CUSTOM_KINDS_RBAC = ROOT / "deploy" / "base" / "rbac-custom-kinds.yaml"
GADGETS_READER: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {
        "name": "kelpie-read-gadgets",
        "labels": {"kelpie.dev/aggregate-to-reader": "true"},
    },
    "rules": [
        {"apiGroups": ["example.com"], "resources": ["gadgets"], "verbs": ["get", "list", "watch"]}
    ],
}
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"}
        | {"listKind": "GadgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def admin_request(admin: Admin, method: str, path: str, body: Any = None) -> Any:
    """A raw admin request (the client has no typed API for batch/v1beta1 or a CRD's kind)."""
    request = admin.api.param_serialize(
        method,
        path,
        body=body,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = admin.api.call_api(*request)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    return json.loads(response.data or b"null")


def create_once(admin: Admin, path: str, body: Any) -> None:
    try:
        admin_request(admin, "POST", path, body)
    except ApiException as exc:
        if exc.status != 409:  # one CRD (and its reader) per session
            raise


def grant_custom_kinds(backend: Backend) -> None:
    """The shipped aggregated ClusterRole, bound to user kelpie too, and an operator's
    labelled ClusterRole for gadgets."""
    documents = [d for d in yaml.safe_load_all(CUSTOM_KINDS_RBAC.read_text()) if d]
    (aggregated,) = [d for d in documents if d["kind"] == "ClusterRole"]
    user = {"kind": "User", "name": KELPIE_USER}
    for doc in [*documents, binding(aggregated, user), GADGETS_READER]:
        try:
            backend.grant(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
    if isinstance(backend, RealBackend):
        eventually(
            "the aggregated ClusterRole's rules",
            lambda: backend.admin.json(backend.admin.rbac.read_cluster_role, "kelpie-custom-kinds")[
                "rules"
            ],
        )


def seed_kinds(admin: Admin, ns: str) -> None:
    """StatefulSet ledger, CronJob cleanup (batch/v1beta1, all v1.20 serves), the Gadget CRD
    (once per session) and Gadget sprocket, in namespace `ns`."""
    labels = {"app": "ledger"}
    template = {"metadata": {"labels": labels}}
    template["spec"] = {"containers": [{"name": "ledger", "image": "registry.example.com/l:1"}]}
    statefulset = {"metadata": {"name": "ledger"}, "spec": {"replicas": 2}}
    statefulset["spec"] |= {"serviceName": "ledger", "selector": {"matchLabels": labels}}
    statefulset["spec"]["template"] = template
    admin.apps.create_namespaced_stateful_set(ns, statefulset)
    job_spec = {"template": {"spec": template["spec"] | {"restartPolicy": "OnFailure"}}}
    cronjob = {"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "cleanup"}}
    cronjob["spec"] = {"schedule": "*/10 * * * *", "jobTemplate": {"spec": job_spec}}
    admin_request(admin, "POST", f"/apis/batch/v1beta1/namespaces/{ns}/cronjobs", cronjob)
    create_once(admin, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)

    def established() -> bool:
        crd = admin_request(
            admin,
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com",
        )
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    eventually("the Gadget CRD to be established", established)
    gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "sprocket"}}
    admin_request(
        admin,
        "POST",
        f"/apis/example.com/v1/namespaces/{ns}/gadgets",
        gadget | {"spec": {"size": 3}},
    )


def roll(real: RealBackend, name: str, image: str, cause: str, revision: int) -> None:
    """Change a deployment's image and change-cause in one patch (the controller copies the
    deployment's annotations onto the new ReplicaSet) and wait for that revision."""
    patch = {
        "metadata": {"annotations": {"kubernetes.io/change-cause": cause}},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
    }
    real.admin.apps.patch_namespaced_deployment(name, real.namespace, patch)

    def revised() -> bool:
        # The controller makes the ReplicaSet, then writes the revision on the Deployment in
        # a second update: wait for both, or a read in between sees the older revision.
        key = "deployment.kubernetes.io/revision"
        found = real.admin.json(
            real.admin.apps.list_namespaced_replica_set,
            real.namespace,
            label_selector=f"app={name}",
        )
        annotations = [(rs["metadata"].get("annotations") or {}) for rs in found["items"]]
        deployment = real.admin.json(
            real.admin.apps.read_namespaced_deployment, name, real.namespace
        )
        marked = (deployment["metadata"].get("annotations") or {}).get(key) == str(revision)
        return marked and any(a.get(key) == str(revision) for a in annotations)

    eventually(f"revision {revision} of {name}", revised)


def real_pod(admin: Admin, ns: str, name: str, *, node: str | None, labels: Obj) -> None:
    """A bare pod, bound to `node` or left for a scheduler the tier does not run."""
    spec: Obj = {"containers": [{"name": "app", "image": "registry.example.com/app:1.0"}]}
    spec |= {"nodeName": node} if node else {}
    admin.core.create_namespaced_pod(
        ns, {"metadata": {"name": name, "labels": labels}} | {"spec": spec}
    )


def crash_looping(ns: str, name: str) -> Obj:
    """What a kubelet reports for a container that exited 1 seven times."""
    status = {
        "name": "app",
        "image": "registry.example.com/app:1.0",
        "imageID": "",
        "ready": False,
        "restartCount": 7,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    not_ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    return {
        "status": {"phase": "Running", "conditions": [not_ready], "containerStatuses": [status]}
    }


def real_node(admin: Admin, name: str) -> None:
    """A Ready node under memory pressure, as its kubelet would report it."""
    admin.core.create_node({"metadata": {"name": name}})
    conditions = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {
            "type": "MemoryPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientMemory",
            "message": "kubelet has insufficient memory available",
        },
    ]
    capacity = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    admin.core.patch_node_status(
        name, {"status": {"conditions": conditions, "capacity": capacity, "allocatable": capacity}}
    )
