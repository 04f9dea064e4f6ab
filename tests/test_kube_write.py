"""The write tools against a Kubernetes-compatible server, through the official client.

`prepare` must send nothing but a SelfSubjectAccessReview, reads and dry runs; `execute`
must send exactly one write bound to the previewed object (uid and resourceVersion), and a
target that changed or was replaced in between must be refused with nothing changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.toolsets.kube.client import KubeClients, KubeFailure
from bot.toolsets.kube.write import diff, write_tools
from bot.toolsets.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolScope,
    WriteConflict,
    WriteOperation,
)
from bot.values import FieldChange, WritePlan, WriteTarget
from tests.peers.kube_server import SSAR_PATH, Demo, KubeServer, RecordedRequest

CTX = ToolContext(cluster="prod", default_namespace="shop")
DEPLOYMENTS = "/apis/apps/v1/namespaces/shop/deployments"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture
def clients(kube: KubeServer, tmp_path: Path) -> Iterator[KubeClients]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", context="test")
    built = KubeClients.build([("prod", str(kubeconfig), "test", False)], request_timeout=5)
    yield built
    built.close()


@pytest.fixture
def tools(clients: KubeClients, demo: Demo) -> dict[str, Tool]:
    return {tool.name: tool for tool in write_tools(clients)}


def op(tools: dict[str, Tool], name: str) -> WriteOperation:
    operation = tools[name].write
    assert operation is not None
    return operation


class Watch:
    """What the server received since a mark."""

    def __init__(self, kube: KubeServer) -> None:
        self.kube = kube
        self.mark = len(kube.requests)

    def requests(self) -> list[RecordedRequest]:
        return self.kube.requests[self.mark :]

    def writes(self) -> list[RecordedRequest]:
        return [r for r in self.kube.writes() if r in self.requests()]

    def real_writes(self) -> list[RecordedRequest]:
        return [w for w in self.writes() if not is_dry_run(w)]

    def reviews(self) -> list[dict[str, Any]]:
        return [
            r.body["spec"]["resourceAttributes"]
            for r in self.requests()
            if r.path == SSAR_PATH and isinstance(r.body, dict)
        ]


# Every PATCH names kelpie as the field manager (the cluster's managedFields say who changed what).
AS_KELPIE = {"fieldManager": "kelpie"}


def is_dry_run(request: RecordedRequest) -> bool:
    """As the API server reads it: a DELETE with a body takes dryRun from the body only."""
    if request.method == "DELETE" and isinstance(request.body, dict) and request.body:
        return request.body.get("dryRun") == ["All"]
    return request.query.get("dryRun") == "All"


async def prepared(
    kube: KubeServer, tools: dict[str, Tool], name: str, args: dict[str, Any]
) -> tuple[WritePlan, Watch]:
    """Prepare a plan and check that prepare changed nothing (dry runs only)."""
    watch = Watch(kube)
    world = {kind: kube.objects(kind) for kind in ("Deployment", "ReplicaSet", "Pod", "Node")}
    plan = await op(tools, name).prepare(args, CTX)
    assert watch.writes(), "prepare previews with a dry run"
    assert all(is_dry_run(w) for w in watch.writes())
    assert all(w.status is not None and w.status < 300 for w in watch.writes())
    assert {kind: kube.objects(kind) for kind in world} == world
    assert plan.tool == name and plan.cluster == "prod"
    json.dumps(dataclasses.asdict(plan))  # a plan can wait in the database
    return plan, watch


def current(kube: KubeServer, kind: str, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get(kind, namespace, name)
    assert obj is not None
    return obj


def replicaset(kube: KubeServer, deployment: str, revision: str) -> dict[str, Any]:
    return next(
        rs
        for rs in kube.objects("ReplicaSet")
        if rs["metadata"]["ownerReferences"][0]["name"] == deployment
        and rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    )


def uid_of(obj: dict[str, Any]) -> dict[str, str]:
    """What a preview's body names: the uid it was read with, no resourceVersion."""
    return {"uid": obj["metadata"]["uid"]}


def churn_status(kube: KubeServer, kind: str, namespace: str, name: str) -> dict[str, Any]:
    """A controller rewrites the object's status: a new resourceVersion, same spec."""
    obj = current(kube, kind, namespace, name)
    obj.setdefault("status", {})["observedAt"] = str(len(kube.requests))
    return kube.put(kind, obj)


def target_of(kind: str, obj: dict[str, Any]) -> WriteTarget:
    meta = obj["metadata"]
    return WriteTarget(
        kind, meta.get("namespace", ""), meta["name"], meta["uid"], meta["resourceVersion"]
    )


async def touch_deployment(clients: KubeClients, name: str = "checkout-api") -> None:
    """Someone else changes the deployment's spec: a new generation, same uid."""
    kube = clients["prod"]
    await kube.call_json(
        "pause deployment",
        kube.apps.patch_namespaced_deployment,
        name,
        "shop",
        {"spec": {"minReadySeconds": 7}},
        _content_type=MERGE,
    )


# --- the tool vocabulary ---------------------------------------------------------------


async def test_every_write_tool_is_described_closed_and_guarded(tools: dict[str, Tool]) -> None:
    assert set(tools) == {
        "scale_deployment",
        "restart_deployment",
        "rollback_deployment",
        "delete_pod",
        "cordon_node",
        "uncordon_node",
        "set_container_resources",
    }
    for tool in tools.values():
        assert tool.kind is ToolKind.WRITE and tool.write is not None
        assert tool.parameters["type"] == "object"
        assert tool.parameters["additionalProperties"] is False
        assert "name" in tool.parameters["required"]
        assert tool.resource_kinds and len(tool.description) > 40
        with pytest.raises(ToolFailure, match="write tools run only through an approval"):
            await tool.handler({"name": "x"}, CTX)
    assert tools["cordon_node"].scope is ToolScope.CLUSTER
    assert tools["uncordon_node"].scope is ToolScope.CLUSTER
    assert tools["scale_deployment"].scope is ToolScope.NAMESPACED
    assert tools["scale_deployment"].parameters["properties"]["replicas"]["maximum"] == 50
    assert tools["scale_deployment"].resource_kinds == ("Deployment",)
    assert tools["delete_pod"].resource_kinds == ("Pod",)
    assert tools["cordon_node"].resource_kinds == ("Node",)
    resources = tools["set_container_resources"].parameters["properties"]["limits"]
    assert resources["additionalProperties"] is False


# --- scale_deployment -------------------------------------------------------------------


async def test_scale_previews_with_a_dry_run_and_executes_bound(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients
) -> None:
    before = current(kube, "Deployment", "shop", "checkout-api")
    plan, watch = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    assert plan.target == target_of("Deployment", before)
    assert plan.changes == (FieldChange("spec.replicas", "3", "5"),)
    assert plan.changes[0].render() == "spec.replicas 3 → 5"
    assert plan.description == "Scale deployment shop/checkout-api from 3 to 5 replicas"
    assert plan.args == {
        "namespace": "shop",
        "name": "checkout-api",
        "replicas": 5,
        "expect": [[["metadata", "generation"], 1], [["spec", "replicas"], 3]],
    }
    assert watch.reviews() == [
        {
            "verb": "patch",
            "group": "apps",
            "resource": "deployments",
            "subresource": "scale",
            "namespace": "shop",
            "name": "checkout-api",
        }
    ]
    (dry,) = watch.writes()
    assert dry.method == "PATCH" and dry.path == f"{DEPLOYMENTS}/checkout-api/scale"
    assert dry.body == {"metadata": uid_of(before), "spec": {"replicas": 5}}

    watch = Watch(kube)
    result = await op(tools, "scale_deployment").execute(plan, CTX)
    assert result.summary == "scaled shop/checkout-api to 5 replicas"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query) == (
        "PATCH",
        f"{DEPLOYMENTS}/checkout-api/scale",
        AS_KELPIE,
    )
    assert write.content_type == MERGE
    assert write.body == {"metadata": uid_of(before), "spec": {"replicas": 5}}
    assert write.status == 200
    # The deployment was re-read (uid, generation and replicas compared) before the patch.
    assert next((r.method, r.path) for r in watch.requests()) == (
        "GET",
        f"{DEPLOYMENTS}/checkout-api",
    )
    assert current(kube, "Deployment", "shop", "checkout-api")["spec"]["replicas"] == 5


async def test_scale_to_a_replaced_deployment_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    replaced = kube.replace_object("Deployment", "shop", "checkout-api")
    watch = Watch(kube)
    with pytest.raises(WriteConflict) as caught:
        await op(tools, "scale_deployment").execute(plan, CTX)
    message = str(caught.value)
    assert message.startswith("deployment shop/checkout-api changed since the preview (")
    assert "it was replaced" in message and replaced["metadata"]["uid"] in message
    assert message.endswith("nothing was changed; propose the change again.")
    assert watch.writes() == []
    assert current(kube, "Deployment", "shop", "checkout-api") == replaced


async def test_scale_after_a_spec_change_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients
) -> None:
    plan, _ = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    await touch_deployment(clients)
    watch = Watch(kube)
    with pytest.raises(WriteConflict) as caught:
        await op(tools, "scale_deployment").execute(plan, CTX)
    assert str(caught.value) == (
        "deployment shop/checkout-api changed since the preview (its spec was changed by "
        "someone else: generation 1 is now 2); nothing was changed; propose the change again."
    )
    assert watch.writes() == []
    assert current(kube, "Deployment", "shop", "checkout-api")["spec"]["replicas"] == 3


async def test_scale_after_replicas_moved_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    moved = current(kube, "Deployment", "shop", "checkout-api")
    moved["spec"]["replicas"] = 4  # e.g. an autoscaler, writing the scale subresource
    kube.put("Deployment", moved)
    with pytest.raises(WriteConflict, match=r"spec\.replicas was 3 and is now 4"):
        await op(tools, "scale_deployment").execute(plan, CTX)
    assert current(kube, "Deployment", "shop", "checkout-api")["spec"]["replicas"] == 4


async def test_status_churn_does_not_block_an_approved_write(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    """Controllers rewrite status all the time: neither the preview nor the write may care."""
    churn_status(kube, "Deployment", "shop", "checkout-api")
    plan, _ = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    churned = churn_status(kube, "Deployment", "shop", "checkout-api")
    watch = Watch(kube)
    await op(tools, "scale_deployment").execute(plan, CTX)
    (write,) = watch.real_writes()
    assert write.status == 200 and write.body["metadata"] == uid_of(churned)
    assert current(kube, "Deployment", "shop", "checkout-api")["spec"]["replicas"] == 5

    pod = await op(tools, "delete_pod").prepare({"name": demo.crashing_pod}, CTX)
    churn_status(kube, "Pod", "shop", demo.crashing_pod)
    await op(tools, "delete_pod").execute(pod, CTX)
    assert kube.get("Pod", "shop", demo.crashing_pod) is None

    node = await op(tools, "cordon_node").prepare({"name": "node-a"}, CTX)
    churn_status(kube, "Node", "", "node-a")
    await op(tools, "cordon_node").execute(node, CTX)
    assert current(kube, "Node", "", "node-a")["spec"]["unschedulable"] is True


async def test_a_conflict_on_the_write_is_retried_from_a_fresh_read(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    """A change that lands between the re-read and the scale patch does not matter unless
    it touches what was approved: the write names no resourceVersion, and a 409 the server
    could not resolve itself is retried after reading and checking again."""
    plan, _ = await prepared(
        kube, tools, "scale_deployment", {"name": "checkout-api", "replicas": 5}
    )
    kube.delay("/deployments/checkout-api/scale$", 0.3)  # the patch waits inside the server
    kube.fail("PATCH", "/deployments/checkout-api/scale$", 409, times=1)
    watch = Watch(kube)

    async def meanwhile() -> None:
        while not watch.real_writes():
            await asyncio.sleep(0.01)
        churn_status(kube, "Deployment", "shop", "checkout-api")

    racer = asyncio.create_task(meanwhile())
    await op(tools, "scale_deployment").execute(plan, CTX)
    await racer
    refused, accepted = watch.writes()
    assert (refused.status, accepted.status) == (409, 200)
    assert accepted.body["metadata"] == {"uid": plan.target.uid}
    reads = [r for r in watch.requests() if r.method == "GET"]
    assert len(reads) == 2  # read and checked again before the second try
    assert current(kube, "Deployment", "shop", "checkout-api")["spec"]["replicas"] == 5


async def test_a_target_that_never_holds_still_is_given_up_with_one_sentence(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    kube.fail("PATCH", "/deployments/checkout-api$", 409)
    watch = Watch(kube)
    with pytest.raises(WriteConflict) as caught:
        await op(tools, "restart_deployment").execute(plan, CTX)
    assert str(caught.value) == (
        "deployment shop/checkout-api kept changing while kelpie tried to write it "
        "(4 attempts); nothing was changed; propose the change again."
    )
    assert [w.status for w in watch.writes()] == [409] * 4


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        (-1, "replicas must be between 0 and 50, got -1"),
        (51, "replicas must be between 0 and 50, got 51"),
        ("5", "replicas must be an integer between 0 and 50"),
        (True, "replicas must be an integer between 0 and 50"),
        (2.5, "replicas must be an integer between 0 and 50"),
        (None, "replicas is required"),
    ],
)
async def test_scale_validates_replicas_before_any_request(
    kube: KubeServer, tools: dict[str, Tool], replicas: Any, message: str
) -> None:
    args: dict[str, Any] = {"name": "checkout-api"}
    if replicas is not None:
        args["replicas"] = replicas
    with pytest.raises(ToolArgumentError, match=re.escape(message)):
        await op(tools, "scale_deployment").prepare(args, CTX)
    assert kube.requests == []


async def test_scale_ceiling_is_configurable_and_other_arguments_are_checked(
    kube: KubeServer, clients: KubeClients, demo: Demo
) -> None:
    scale = {t.name: t for t in write_tools(clients, max_replicas=10)}["scale_deployment"]
    assert scale.write is not None and scale.parameters["properties"]["replicas"]["maximum"] == 10
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "checkout-api", "replicas": 11}, "between 0 and 10, got 11"),
        ({"name": "checkout-api", "replicas": 2, "force": True}, "unknown argument(s) force"),
        ({"name": "Checkout_API", "replicas": 2}, "not a valid Kubernetes object name"),
        ({"namespace": "Shop!", "name": "x", "replicas": 2}, "not a valid Kubernetes namespace"),
        ({"replicas": 2}, "name is required"),
    ]
    for args, message in cases:
        with pytest.raises(ToolArgumentError, match=re.escape(message)):
            await scale.write.prepare(args, CTX)
    with pytest.raises(ToolArgumentError, match="namespace is required"):
        await scale.write.prepare(
            {"name": "checkout-api", "replicas": 2}, ToolContext(cluster="prod")
        )
    assert kube.requests == []


async def test_scale_to_the_current_count_is_refused(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    with pytest.raises(ToolArgumentError, match="already has 3 replicas"):
        await op(tools, "scale_deployment").prepare({"name": "checkout-api", "replicas": 3}, CTX)
    assert kube.writes() == []


async def test_scale_denied_by_rbac_fails_before_any_write(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    kube.deny_access(verb="patch", resource="deployments", namespace="shop")
    with pytest.raises(ToolFailure) as caught:
        await op(tools, "scale_deployment").prepare({"name": "checkout-api", "replicas": 5}, CTX)
    assert not isinstance(caught.value, ToolArgumentError)
    assert "kelpie's Kubernetes identity may not patch deployments/scale in shop" in str(
        caught.value
    )
    assert kube.writes() == []
    assert [r.path for r in kube.requests] == [SSAR_PATH]  # not even read


async def test_an_unknown_deployment_or_cluster_is_a_tool_failure(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    with pytest.raises(KubeFailure, match="not found") as caught:
        await op(tools, "scale_deployment").prepare({"name": "nope", "replicas": 2}, CTX)
    assert caught.value.status == 404
    with pytest.raises(ToolFailure, match="No Kubernetes cluster named 'staging'"):
        await op(tools, "scale_deployment").prepare(
            {"name": "checkout-api", "replicas": 2}, ToolContext("staging", "shop")
        )
    assert kube.writes() == []


# --- restart_deployment ------------------------------------------------------------------


async def test_restart_previews_the_annotation_and_executes_the_same_timestamp(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    before = current(kube, "Deployment", "shop", "checkout-api")
    plan, watch = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    stamp = plan.args["restarted_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert plan.target == target_of("Deployment", before)
    field = "spec.template.metadata.annotations.kubectl.kubernetes.io/restartedAt"
    assert plan.changes == (FieldChange(field, "(none)", stamp),)
    assert "rolling update" in plan.description and "3 pods" in plan.description
    assert watch.reviews()[0]["verb"] == "patch"
    assert "subresource" not in watch.reviews()[0]
    template = {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}
    expected = {"metadata": uid_of(before), "spec": {"template": template}}
    assert [w.body for w in watch.writes()] == [expected]

    watch = Watch(kube)
    result = await op(tools, "restart_deployment").execute(plan, CTX)
    assert result.summary == "restarted deployment shop/checkout-api"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query, write.content_type) == (
        "PATCH",
        f"{DEPLOYMENTS}/checkout-api",
        AS_KELPIE,
        MERGE,
    )
    assert write.body == expected and write.status == 200
    after = current(kube, "Deployment", "shop", "checkout-api")
    assert after["spec"]["template"]["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/restartedAt": stamp
    }
    assert after["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"


async def test_restart_after_a_spec_change_writes_nothing(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients
) -> None:
    plan, _ = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    await touch_deployment(clients)
    touched = current(kube, "Deployment", "shop", "checkout-api")
    watch = Watch(kube)
    with pytest.raises(WriteConflict, match="generation 1 is now 2"):
        await op(tools, "restart_deployment").execute(plan, CTX)
    assert watch.writes() == []
    assert current(kube, "Deployment", "shop", "checkout-api") == touched


async def test_restart_of_a_replaced_deployment_writes_nothing(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    replaced = kube.replace_object("Deployment", "shop", "checkout-api")
    watch = Watch(kube)
    with pytest.raises(WriteConflict, match=r"changed since the preview \(it was replaced"):
        await op(tools, "restart_deployment").execute(plan, CTX)
    assert current(kube, "Deployment", "shop", "checkout-api") == replaced
    assert watch.writes() == []


async def test_a_deleted_target_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients
) -> None:
    plan, _ = await prepared(kube, tools, "restart_deployment", {"name": "frontend"})
    client = clients["prod"]
    await client.call_json("delete", client.apps.delete_namespaced_deployment, "frontend", "shop")
    with pytest.raises(WriteConflict, match=r"frontend changed since the preview .*no longer"):
        await op(tools, "restart_deployment").execute(plan, CTX)


# --- rollback_deployment -----------------------------------------------------------------


async def test_rollback_to_the_previous_revision(kube: KubeServer, tools: dict[str, Tool]) -> None:
    before = current(kube, "Deployment", "shop", "checkout-api")
    plan, watch = await prepared(kube, tools, "rollback_deployment", {"name": "checkout-api"})
    assert plan.target == target_of("Deployment", before)
    assert plan.args["revision"] == 1
    assert plan.changes == (
        FieldChange(
            "spec.template.spec.containers[app].image",
            "registry.example.com/app:1.0",
            "registry.example.com/app:0.9",
        ),
    )
    assert "from revision 2 to revision 1" in plan.description
    lists = [r for r in watch.requests() if r.method == "GET" and r.path.endswith("/replicasets")]
    assert lists and lists[0].query["labelSelector"] == "app=checkout-api,tier=backend"

    old_rs = replicaset(kube, "checkout-api", "1")
    template = json.loads(json.dumps(old_rs["spec"]["template"]))
    del template["metadata"]["labels"]["pod-template-hash"]
    watch = Watch(kube)
    result = await op(tools, "rollback_deployment").execute(plan, CTX)
    assert result.summary == "rolled back shop/checkout-api to revision 1"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query, write.content_type) == (
        "PATCH",
        f"{DEPLOYMENTS}/checkout-api",
        AS_KELPIE,
        MERGE,
    )
    assert write.body == {"metadata": uid_of(before), "spec": {"template": template}}
    after = current(kube, "Deployment", "shop", "checkout-api")
    assert after["spec"]["template"] == template
    assert after["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.9")


async def test_rollback_replaces_the_template_exactly(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    """After a restart (revision 3 has an annotation revision 1 lacks), rolling back to 1
    clears it: the merge patch carries null for what the old template does not have."""
    restart, _ = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    await op(tools, "restart_deployment").execute(restart, CTX)
    plan, _ = await prepared(kube, tools, "rollback_deployment", {"name": "checkout-api"})
    assert plan.args["revision"] == 2  # the previous one
    plan, _ = await prepared(
        kube, tools, "rollback_deployment", {"name": "checkout-api", "revision": 1}
    )
    fields = {c.field: (c.before, c.after) for c in plan.changes}
    assert fields["spec.template.spec.containers[app].image"][1].endswith(":0.9")
    annotation = "spec.template.metadata.annotations.kubectl.kubernetes.io/restartedAt"
    assert fields[annotation] == (restart.args["restarted_at"], "(none)")
    assert plan.args["template"]["metadata"]["annotations"] is None
    await op(tools, "rollback_deployment").execute(plan, CTX)
    after = current(kube, "Deployment", "shop", "checkout-api")
    assert "annotations" not in after["spec"]["template"]["metadata"]
    assert after["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.9")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"name": "checkout-api", "revision": 7}, "has no revision 7 (revisions: 1, 2 (current))"),
        ({"name": "checkout-api", "revision": 2}, "revision 2 is the current revision"),
        ({"name": "frontend"}, "has no earlier revision to roll back to (revisions: 1 (current))"),
        ({"name": "checkout-api", "revision": 0}, "revision must be between 1"),
        ({"name": "checkout-api", "revision": "1"}, "revision must be an integer"),
    ],
)
async def test_rollback_refuses_missing_or_current_revisions(
    kube: KubeServer, tools: dict[str, Tool], args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolArgumentError, match=re.escape(message)):
        await op(tools, "rollback_deployment").prepare(args, CTX)
    assert kube.writes() == []


async def test_rollback_ignores_replicasets_of_other_owners(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    """A ReplicaSet with matching labels but another owner is not part of the history."""
    stranger = replicaset(kube, "checkout-api", "1")
    stranger["metadata"]["name"] = "checkout-api-stranger"
    stranger["metadata"]["uid"] = "someone-else"
    stranger["metadata"]["ownerReferences"][0]["uid"] = "another-deployment"
    stranger["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "9"
    kube.put("ReplicaSet", stranger)
    with pytest.raises(ToolArgumentError, match=re.escape("has no revision 9")):
        await op(tools, "rollback_deployment").prepare({"name": "checkout-api", "revision": 9}, CTX)


async def test_rollback_of_a_replaced_deployment_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(kube, tools, "rollback_deployment", {"name": "checkout-api"})
    replaced = kube.replace_object("Deployment", "shop", "checkout-api")
    with pytest.raises(WriteConflict, match="it was replaced: uid"):
        await op(tools, "rollback_deployment").execute(plan, CTX)
    assert current(kube, "Deployment", "shop", "checkout-api") == replaced


# --- delete_pod ----------------------------------------------------------------------------


async def test_delete_pod_previews_and_deletes_bound(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    pod = current(kube, "Pod", "shop", demo.crashing_pod)
    args = {"name": demo.crashing_pod, "grace_period_seconds": 10}
    plan, watch = await prepared(kube, tools, "delete_pod", args)
    assert plan.target == target_of("Pod", pod)
    assert plan.changes == (
        FieldChange(
            "metadata", "pod Running (CrashLoopBackOff) on node-a", "pod deleted (grace 10 s)"
        ),
    )
    assert plan.changes[0].render().endswith("→ pod deleted (grace 10 s)")
    assert plan.description.startswith(f"Delete pod shop/{demo.crashing_pod} (grace period 10 s)")
    assert "ReplicaSet checkout-api-" in plan.description and "replacement" in plan.description
    assert watch.reviews() == [
        {"verb": "delete", "group": "", "resource": "pods", "namespace": "shop"}
        | {"name": demo.crashing_pod}
    ]
    body = {"preconditions": uid_of(pod), "gracePeriodSeconds": 10}
    (dry,) = watch.writes()
    assert (dry.method, dry.path, dry.body) == (
        "DELETE",
        f"/api/v1/namespaces/shop/pods/{demo.crashing_pod}",
        body | {"dryRun": ["All"]},
    )

    watch = Watch(kube)
    result = await op(tools, "delete_pod").execute(plan, CTX)
    assert result.summary == f"deleted pod shop/{demo.crashing_pod}"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query, write.body, write.status) == (
        "DELETE",
        f"/api/v1/namespaces/shop/pods/{demo.crashing_pod}",
        {},
        body,
        200,
    )
    assert kube.get("Pod", "shop", demo.crashing_pod) is None


async def test_delete_pod_preview_leaves_the_pod_in_place(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    """The API server reads a DELETE's options from its body: the dry run must be there."""
    before = current(kube, "Pod", "shop", demo.crashing_pod)
    plan, watch = await prepared(kube, tools, "delete_pod", {"name": demo.crashing_pod})
    (dry,) = watch.writes()
    assert dry.body["dryRun"] == ["All"]
    assert current(kube, "Pod", "shop", demo.crashing_pod) == before
    assert plan.target.uid == before["metadata"]["uid"]


async def test_delete_pod_without_a_grace_period_uses_the_pods_own(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    pod = kube.add_pod("dev-a", "lonely", owner=None)
    context = ToolContext(cluster="prod", default_namespace="dev-a")
    plan = await op(tools, "delete_pod").prepare({"name": "lonely"}, context)
    assert plan.changes[0].after == "pod deleted (grace 30 s)"
    assert "nothing will replace it" in plan.description
    assert plan.args == {
        "namespace": "dev-a",
        "name": "lonely",
        "grace_period_seconds": None,
        "expect": [],
    }
    watch = Watch(kube)
    await op(tools, "delete_pod").execute(plan, context)
    (write,) = watch.writes()
    assert write.body == {"preconditions": uid_of(pod)}  # no gracePeriodSeconds
    assert kube.get("Pod", "dev-a", "lonely") is None


async def test_delete_of_a_replaced_pod_is_refused(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    plan, _ = await prepared(kube, tools, "delete_pod", {"name": demo.crashing_pod})
    replaced = kube.replace_object("Pod", "shop", demo.crashing_pod)
    watch = Watch(kube)
    with pytest.raises(WriteConflict) as caught:
        await op(tools, "delete_pod").execute(plan, CTX)
    assert str(caught.value).startswith(f"pod shop/{demo.crashing_pod} changed since the preview")
    assert "it was replaced: uid" in str(caught.value)
    assert watch.writes() == []
    assert current(kube, "Pod", "shop", demo.crashing_pod) == replaced


async def test_delete_of_a_relabelled_pod_still_deletes_that_pod(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients, demo: Demo
) -> None:
    """A pod is bound by its uid: a label or status change is not a different pod."""
    plan, _ = await prepared(kube, tools, "delete_pod", {"name": demo.crashing_pod})
    client = clients["prod"]
    await client.call_json(
        "label pod",
        client.core.patch_namespaced_pod,
        demo.crashing_pod,
        "shop",
        {"metadata": {"labels": {"debug": "1"}}},
    )
    await op(tools, "delete_pod").execute(plan, CTX)
    assert kube.get("Pod", "shop", demo.crashing_pod) is None


async def test_delete_of_a_pod_already_gone_is_a_conflict(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients, demo: Demo
) -> None:
    plan, _ = await prepared(kube, tools, "delete_pod", {"name": demo.crashing_pod})
    client = clients["prod"]
    await client.call_json("delete", client.core.delete_namespaced_pod, demo.crashing_pod, "shop")
    with pytest.raises(WriteConflict, match="it no longer exists"):
        await op(tools, "delete_pod").execute(plan, CTX)


async def test_delete_pod_validates_and_checks_access(
    kube: KubeServer, tools: dict[str, Tool], demo: Demo
) -> None:
    delete = op(tools, "delete_pod")
    for grace, message in ((-1, "between 0 and 3600, got -1"), (3601, "got 3601")):
        with pytest.raises(ToolArgumentError, match=re.escape(message)):
            await delete.prepare({"name": demo.crashing_pod, "grace_period_seconds": grace}, CTX)
    assert kube.requests == []
    kube.deny_access(verb="delete", resource="pods", namespace="shop")
    with pytest.raises(ToolFailure, match="may not delete pods in shop"):
        await delete.prepare({"name": demo.crashing_pod}, CTX)
    assert kube.writes() == []
    plan = await delete.prepare({"namespace": "dev-a", "name": "sandbox"}, CTX)
    assert plan.target.namespace == "dev-a"


# --- cordon_node / uncordon_node --------------------------------------------------------


async def test_cordon_then_uncordon(kube: KubeServer, tools: dict[str, Tool]) -> None:
    node = current(kube, "Node", "", "node-a")
    plan, watch = await prepared(kube, tools, "cordon_node", {"name": "node-a"})
    assert plan.target == WriteTarget(
        "Node", "", "node-a", node["metadata"]["uid"], node["metadata"]["resourceVersion"]
    )
    assert plan.changes == (FieldChange("spec.unschedulable", "false", "true"),)
    assert plan.description.startswith("Cordon node node-a")
    assert watch.reviews() == [
        {"verb": "patch", "group": "", "resource": "nodes", "name": "node-a"}
    ]
    watch = Watch(kube)
    result = await op(tools, "cordon_node").execute(plan, CTX)
    assert result.summary == "cordoned node node-a"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query, write.content_type) == (
        "PATCH",
        "/api/v1/nodes/node-a",
        AS_KELPIE,
        MERGE,
    )
    assert write.body == {"metadata": uid_of(node), "spec": {"unschedulable": True}}
    cordoned = current(kube, "Node", "", "node-a")
    assert cordoned["spec"]["unschedulable"] is True

    with pytest.raises(ToolArgumentError, match="node node-a is already cordoned"):
        await op(tools, "cordon_node").prepare({"name": "node-a"}, CTX)

    plan, _ = await prepared(kube, tools, "uncordon_node", {"name": "node-a"})
    assert plan.changes == (FieldChange("spec.unschedulable", "true", "false"),)
    watch = Watch(kube)
    result = await op(tools, "uncordon_node").execute(plan, CTX)
    assert result.summary == "uncordoned node node-a"
    (write,) = watch.writes()
    assert write.body == {"metadata": uid_of(cordoned), "spec": {"unschedulable": False}}
    assert current(kube, "Node", "", "node-a")["spec"]["unschedulable"] is False


async def test_node_tools_refuse_no_ops_conflicts_and_denials(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    with pytest.raises(ToolArgumentError, match="node node-b is already schedulable"):
        await op(tools, "uncordon_node").prepare({"name": "node-b"}, CTX)
    with pytest.raises(ToolArgumentError, match="unknown argument"):
        await op(tools, "cordon_node").prepare({"name": "node-b", "namespace": "shop"}, CTX)

    plan, _ = await prepared(kube, tools, "cordon_node", {"name": "node-b"})
    replaced = kube.replace_object("Node", "", "node-b")
    with pytest.raises(WriteConflict, match=r"^node node-b changed since the preview"):
        await op(tools, "cordon_node").execute(plan, CTX)
    assert current(kube, "Node", "", "node-b") == replaced

    kube.deny_access(verb="patch", resource="nodes")
    writes = len(kube.writes())
    with pytest.raises(ToolFailure, match="kelpie's Kubernetes identity may not patch nodes"):
        await op(tools, "cordon_node").prepare({"name": "node-b"}, CTX)
    assert len(kube.writes()) == writes


async def test_other_failures_during_execute_stay_failures(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    plan, _ = await prepared(kube, tools, "cordon_node", {"name": "node-a"})
    kube.forbid("PATCH", "/nodes/node-a$")
    with pytest.raises(KubeFailure) as caught:
        await op(tools, "cordon_node").execute(plan, CTX)
    assert not isinstance(caught.value, WriteConflict) and caught.value.status == 403
    assert "unschedulable" not in current(kube, "Node", "", "node-a")["spec"]


# --- set_container_resources -------------------------------------------------------------


async def test_set_container_resources_merges_by_container_name(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    before = current(kube, "Deployment", "shop", "checkout-api")
    args = {
        "name": "checkout-api",
        "container": "app",
        "requests": {"cpu": "250m"},
        "limits": {"memory": "512Mi"},
    }
    plan, watch = await prepared(kube, tools, "set_container_resources", args)
    assert plan.target == target_of("Deployment", before)
    prefix = "spec.template.spec.containers[app].resources"
    assert plan.changes == (
        FieldChange(f"{prefix}.requests.cpu", "100m", "250m"),
        FieldChange(f"{prefix}.limits.memory", "(none)", "512Mi"),
    )
    assert "requests.cpu=250m, limits.memory=512Mi" in plan.description
    assert watch.reviews()[0]["resource"] == "deployments"
    resources = {"requests": {"cpu": "250m"}, "limits": {"memory": "512Mi"}}
    expected = {
        "metadata": uid_of(before),
        "spec": {"template": {"spec": {"containers": [{"name": "app", "resources": resources}]}}},
    }
    assert [w.body for w in watch.writes()] == [expected]
    assert watch.writes()[0].content_type == STRATEGIC

    watch = Watch(kube)
    result = await op(tools, "set_container_resources").execute(plan, CTX)
    assert result.summary == "set resources of app in shop/checkout-api"
    (write,) = watch.writes()
    assert (write.method, write.path, write.query, write.content_type, write.body) == (
        "PATCH",
        f"{DEPLOYMENTS}/checkout-api",
        AS_KELPIE,
        STRATEGIC,
        expected,
    )
    container = current(kube, "Deployment", "shop", "checkout-api")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert container["image"] == "registry.example.com/app:1.0"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"requests": {"cpu": "12 cores"}}, "requests.cpu '12 cores' is not a Kubernetes quantity"),
        ({"limits": {"memory": "1GB"}}, "limits.memory '1GB' is not a Kubernetes quantity"),
        ({"limits": {"memory": "-1Gi"}}, "is not a Kubernetes quantity"),
        ({"limits": {"memory": "512m"}}, "thousandths of a byte"),
        ({"requests": {"gpu": "1"}}, "may only set cpu and memory, not gpu"),
        ({"requests": "500m"}, "requests must be an object"),
        ({}, "give at least one value in requests or limits"),
        ({"requests": {}, "limits": {}}, "give at least one value"),
        (
            {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}},
            "requests.memory 1Gi would be above limits.memory 512Mi",
        ),
        (
            {"requests": {"cpu": "1.5"}, "limits": {"cpu": "1200m"}},
            "requests.cpu 1.5 would be above limits.cpu 1200m",
        ),
    ],
)
async def test_set_container_resources_validates_before_any_request(
    kube: KubeServer, tools: dict[str, Tool], extra: dict[str, Any], message: str
) -> None:
    args = {"name": "checkout-api", "container": "app", **extra}
    with pytest.raises(ToolArgumentError, match=re.escape(message)):
        await op(tools, "set_container_resources").prepare(args, CTX)
    assert kube.requests == []


async def test_set_container_resources_checks_the_container_and_current_values(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    tool = op(tools, "set_container_resources")
    with pytest.raises(ToolArgumentError, match="has no container 'sidecar'; its containers: app"):
        await tool.prepare(
            {"name": "checkout-api", "container": "sidecar", "limits": {"cpu": "1"}}, CTX
        )
    # The current request is 128Mi: a 64Mi limit would be below it.
    with pytest.raises(ToolArgumentError, match="together with the container's current values"):
        await tool.prepare(
            {"name": "checkout-api", "container": "app", "limits": {"memory": "64Mi"}}, CTX
        )
    with pytest.raises(ToolArgumentError, match="nothing would change"):
        await tool.prepare(
            {"name": "checkout-api", "container": "app", "requests": {"cpu": "100m"}}, CTX
        )
    assert all(w.query.get("dryRun") == "All" for w in kube.writes())
    plan = await tool.prepare(
        {"name": "checkout-api", "container": "app", "limits": {"cpu": 2, "memory": "1Gi"}}, CTX
    )
    assert plan.args["limits"] == {"cpu": "2", "memory": "1Gi"}


async def test_set_container_resources_conflicts(
    kube: KubeServer, tools: dict[str, Tool], clients: KubeClients
) -> None:
    args = {"name": "checkout-api", "container": "app", "limits": {"memory": "512Mi"}}
    plan, _ = await prepared(kube, tools, "set_container_resources", args)
    await touch_deployment(clients)
    with pytest.raises(WriteConflict, match="generation 1 is now 2"):
        await op(tools, "set_container_resources").execute(plan, CTX)
    assert (
        "limits"
        not in (
            current(kube, "Deployment", "shop", "checkout-api")["spec"]["template"]["spec"][
                "containers"
            ][0]["resources"]
        )
    )


# --- plans ------------------------------------------------------------------------------


async def test_a_plan_survives_a_round_trip_through_json(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    """Approvals wait in the database: a plan rebuilt from JSON executes the same."""
    plan, _ = await prepared(kube, tools, "restart_deployment", {"name": "checkout-api"})
    stored = json.loads(json.dumps(dataclasses.asdict(plan)))
    rebuilt = WritePlan(
        tool=stored["tool"],
        description=stored["description"],
        cluster=stored["cluster"],
        target=WriteTarget(**stored["target"]),
        changes=tuple(FieldChange(**c) for c in stored["changes"]),
        args=stored["args"],
    )
    assert rebuilt == plan
    await op(tools, "restart_deployment").execute(rebuilt, ToolContext(cluster="prod"))
    after = current(kube, "Deployment", "shop", "checkout-api")
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"kubectl.kubernetes.io/restartedAt": plan.args["restarted_at"]}


async def test_a_plan_runs_only_on_its_own_tool(kube: KubeServer, tools: dict[str, Tool]) -> None:
    plan, _ = await prepared(kube, tools, "cordon_node", {"name": "node-a"})
    watch = Watch(kube)
    with pytest.raises(ToolFailure, match="cannot be executed by uncordon_node"):
        await op(tools, "uncordon_node").execute(plan, CTX)
    assert watch.writes() == []


def test_diff_names_list_items_by_name() -> None:
    before = {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y"}]}
    after = {"containers": [{"name": "a", "image": "x:2"}], "paused": True}
    assert diff(before, after, "spec") == [
        FieldChange("spec.containers[a].image", "x:1", "x:2"),
        FieldChange("spec.containers[b]", '{"name":"b","image":"y"}', "(none)"),
        FieldChange("spec.paused", "(none)", "true"),
    ]
    assert diff({"args": ["a"]}, {"args": ["a", "b"]}, "c") == [
        FieldChange("c.args", '["a"]', '["a","b"]')
    ]
    assert diff({"x": 1}, {"x": 1}, "s") == []
