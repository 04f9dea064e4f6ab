"""The tools against both Kubernetes backends: the fake and a real kube-apiserver.

Every test runs twice (`backend` is `fake` or `real`; the real one is the `realkube` tier,
`pytest -m realkube`), so a behaviour the fake gets wrong fails on the real server. Tests
assert what the tools answer and what the cluster holds afterwards, never request shapes.
On the real server the tools run with exactly the ClusterRole in deploy/base/rbac-cluster.yaml.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bot.toolsets.kube.client import KubeClients, KubeFailure
from bot.toolsets.kube.read import read_tools
from bot.toolsets.kube.write import write_tools
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, WriteConflict, WriteOperation
from tests.realkube.backends import CLUSTER, Backend
from tests.realkube.cluster import Admin, RealKube


def tools(backend: Backend) -> dict[str, Tool]:
    return {t.name: t for t in [*read_tools(backend.clients), *write_tools(backend.clients)]}


def writer(backend: Backend, name: str) -> WriteOperation:
    operation = tools(backend)[name].write
    assert operation is not None
    return operation


def context(backend: Backend) -> ToolContext:
    return ToolContext(cluster=CLUSTER, default_namespace=backend.namespace)


def spec_of(backend: Backend, kind: str, name: str) -> Any:
    obj = backend.read(kind, name)
    assert obj is not None
    return obj["spec"]


async def approved(
    backend: Backend, tool: str, args: dict[str, Any], kind: str, name: str
) -> tuple[Any, Any]:
    """Preview (which must leave the object as it was), then execute while status churns.

    Answers the tool's result and how many status writes happened meanwhile.
    """
    ctx = context(backend)
    before = backend.read(kind, name)
    assert before is not None
    stop = asyncio.Event()
    churn = asyncio.create_task(backend.churning(kind, name, stop))
    try:
        plan = await writer(backend, tool).prepare(args, ctx)
        after_preview = backend.read(kind, name)
        assert after_preview is not None, f"the {tool} preview removed the object"
        assert after_preview["spec"] == before["spec"], f"the {tool} preview changed the spec"
        assert after_preview["metadata"].get("deletionTimestamp") is None
        await asyncio.sleep(0.1)  # let the churn move resourceVersion past the preview
        result = await writer(backend, tool).execute(plan, ctx)
    finally:
        stop.set()
        churned = await churn
    assert churned > 0
    return result, churned


# --- writes: previews change nothing, approved writes land while status churns ----------


async def test_scale_restart_and_resources_land_while_status_churns(backend: Backend) -> None:
    backend.deployment("web", replicas=2)
    await approved(backend, "scale_deployment", {"name": "web", "replicas": 3}, "Deployment", "web")
    assert spec_of(backend, "Deployment", "web")["replicas"] == 3

    await approved(backend, "restart_deployment", {"name": "web"}, "Deployment", "web")
    annotations = spec_of(backend, "Deployment", "web")["template"]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/restartedAt" in annotations

    args = {"name": "web", "container": "app", "limits": {"memory": "256Mi"}}
    await approved(backend, "set_container_resources", args, "Deployment", "web")
    (container,) = spec_of(backend, "Deployment", "web")["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    assert container["resources"]["requests"]["cpu"] == "100m"


async def test_rollback_returns_to_the_previous_template(backend: Backend) -> None:
    backend.deployment("api", replicas=1, image="registry.example.com/api:1")
    backend.new_revision("api", "registry.example.com/api:2")
    result, _ = await approved(backend, "rollback_deployment", {"name": "api"}, "Deployment", "api")
    assert "revision 1" in result.text
    (container,) = spec_of(backend, "Deployment", "api")["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/api:1"


async def test_delete_pod_preview_keeps_the_pod_and_the_approved_delete_removes_it(
    backend: Backend,
) -> None:
    backend.pod("stuck")
    result, _ = await approved(backend, "delete_pod", {"name": "stuck"}, "Pod", "stuck")
    assert result.summary == f"deleted pod {backend.namespace}/stuck"
    assert backend.read("Pod", "stuck") is None


async def test_cordon_and_uncordon_land_while_heartbeats_churn(backend: Backend) -> None:
    node = backend.node_name("worker")
    backend.node(node)
    await approved(backend, "cordon_node", {"name": node}, "Node", node)
    assert spec_of(backend, "Node", node)["unschedulable"] is True
    await approved(backend, "uncordon_node", {"name": node}, "Node", node)
    assert not spec_of(backend, "Node", node).get("unschedulable")


# --- a changed or replaced target: nothing written, one sentence ------------------------


async def test_a_spec_changed_after_the_preview_writes_nothing(backend: Backend) -> None:
    backend.deployment("web", replicas=2)
    ctx = context(backend)
    plan = await writer(backend, "scale_deployment").prepare({"name": "web", "replicas": 4}, ctx)
    backend.change_spec("Deployment", "web", {"minReadySeconds": 5})
    with pytest.raises(WriteConflict) as caught:
        await writer(backend, "scale_deployment").execute(plan, ctx)
    assert str(caught.value) == (
        f"deployment {backend.namespace}/web changed since the preview (its spec was changed "
        "by someone else: generation 1 is now 2); nothing was changed; propose the change again."
    )
    assert spec_of(backend, "Deployment", "web")["replicas"] == 2


async def test_a_replaced_target_writes_nothing(backend: Backend) -> None:
    backend.deployment("web", replicas=2)
    ctx = context(backend)
    plan = await writer(backend, "restart_deployment").prepare({"name": "web"}, ctx)
    backend.replace("Deployment", "web")
    with pytest.raises(WriteConflict, match=r"changed since the preview \(it was replaced: uid"):
        await writer(backend, "restart_deployment").execute(plan, ctx)
    template = spec_of(backend, "Deployment", "web")["template"]
    assert "kubectl.kubernetes.io/restartedAt" not in (
        template["metadata"].get("annotations") or {}
    )

    node = backend.node_name("worker")
    backend.node(node)
    plan = await writer(backend, "cordon_node").prepare({"name": node}, ctx)
    backend.change_spec("Node", node, {"unschedulable": True})
    with pytest.raises(WriteConflict, match=r"spec\.unschedulable was false and is now true"):
        await writer(backend, "cordon_node").execute(plan, ctx)


async def test_a_target_deleted_after_the_preview_is_a_sentence(backend: Backend) -> None:
    backend.pod("gone")
    ctx = context(backend)
    plan = await writer(backend, "delete_pod").prepare({"name": "gone"}, ctx)
    await writer(backend, "delete_pod").execute(plan, ctx)
    with pytest.raises(WriteConflict, match="changed since the preview \\(it no longer exists\\)"):
        await writer(backend, "delete_pod").execute(plan, ctx)


# --- reads on what a real cluster holds -------------------------------------------------


async def test_read_tools_render_pending_pods_and_nodes_without_addresses(
    backend: Backend,
) -> None:
    backend.pod("waiting")
    node = backend.node_name("bare")
    backend.node(node)
    ctx = context(backend)
    all_tools = tools(backend)
    pods = await all_tools["list_pods"].handler({}, ctx)
    assert "waiting" in pods.text and "Pending" in pods.text
    described = await all_tools["describe_pod"].handler({"name": "waiting"}, ctx)
    assert "waiting" in described.text and "Pending" in described.text
    # The API server answers an unscheduled pod's logs with nothing at all (204).
    logs = await all_tools["pod_logs"].handler({"name": "waiting"}, ctx)
    assert logs.text == "(no log lines)"
    nodes = await all_tools["list_nodes"].handler({}, ctx)
    assert node in nodes.text
    # A pod on a node the API server cannot reach (no addresses): its logs cannot be read.
    backend.pod("placed", node=node)
    with pytest.raises(KubeFailure) as unreachable:
        await all_tools["pod_logs"].handler({"name": "placed"}, ctx)
    assert str(unreachable.value) == (
        "The Kubernetes API failed (500 Internal Server Error) to read logs of pod "
        f"{backend.namespace}/placed: no preferred addresses found; known addresses: []."
    )


async def test_describe_deployment_lists_the_rollout_replicasets(backend: Backend) -> None:
    backend.deployment("api", replicas=1, image="registry.example.com/api:1")
    backend.new_revision("api", "registry.example.com/api:2")
    ctx = context(backend)
    described = await tools(backend)["describe_deployment"].handler({"name": "api"}, ctx)
    assert "registry.example.com/api:2" in described.text
    assert "revision" in described.text.lower()
    # The controller's events about it (core/v1 events, involvedObject).
    events = await tools(backend)["list_events"].handler({"kind": "Deployment", "name": "api"}, ctx)
    line = next(ln for ln in events.text.splitlines() if "ScalingReplicaSet" in ln)
    assert "Scaled up replica set api-" in line and "Normal" in line


async def test_an_unknown_object_is_one_sentence(backend: Backend) -> None:
    ctx = context(backend)
    with pytest.raises(ToolFailure) as caught:
        await tools(backend)["describe_deployment"].handler({"name": "nope"}, ctx)
    assert "not found" in str(caught.value) and "{" not in str(caught.value)


# --- identity: kelpie's ClusterRole allows nothing else; other identities are refused ----


def _review(verb: str, resource: str, group: str = "", namespace: str | None = None) -> Any:
    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


@pytest.mark.realkube
async def test_kelpies_identity_may_not_read_secrets_or_do_anything_else(
    realkube: tuple[RealKube, Admin],
) -> None:
    cluster, admin = realkube
    namespace = admin.namespace(wait=False)
    clients = KubeClients.build([(CLUSTER, str(cluster.kubeconfig("kelpie")), None, False)])
    kube = clients[CLUSTER]
    try:
        with pytest.raises(KubeFailure) as caught:
            await kube.call_json(
                f"list secrets in namespace {namespace}",
                kube.core.list_namespaced_secret,
                namespace,
            )
        assert caught.value.status == 403
        assert str(caught.value).startswith(
            f"Kubernetes refused (403 Forbidden) to list secrets in namespace {namespace}"
        )
        for verb, resource, group in [
            ("get", "secrets", ""),
            ("list", "secrets", ""),
            ("watch", "secrets", ""),
            ("list", "serviceaccounts", ""),
            ("create", "pods", ""),
            ("patch", "pods", ""),
            ("update", "deployments", "apps"),
            ("delete", "deployments", "apps"),
            ("create", "pods/exec", ""),
            ("impersonate", "users", ""),
            ("patch", "nodes/status", ""),
        ]:
            review = await kube.call_json(
                "review",
                kube.authz.create_self_subject_access_review,
                _review(verb, resource, group, namespace),
            )
            assert review["status"].get("allowed") is not True, (verb, resource)
    finally:
        clients.close()


async def test_a_namespace_limited_identity_gets_sentences_not_errors(backend: Backend) -> None:
    viewer = backend.clients_as("viewer")  # may read in namespace shop only
    try:
        backend.deployment("web", replicas=1)
        ctx = context(backend)
        scale = write_tools(viewer)[0].write
        assert scale is not None
        with pytest.raises(ToolFailure) as caught:
            await scale.prepare({"name": "web", "replicas": 2}, ctx)
        assert str(caught.value) == (
            "kelpie's Kubernetes identity may not patch deployments/scale in "
            f"{backend.namespace}. Ask a cluster admin to grant it, or make the change "
            "another way."
        )
        listing = {t.name: t for t in read_tools(viewer)}["list_pods"]
        with pytest.raises(KubeFailure) as denied:
            await listing.handler({}, ctx)
        assert denied.value.status == 403
        assert str(denied.value) == (
            f"Kubernetes refused (403 Forbidden) to list pods in namespace {backend.namespace}: "
            'pods is forbidden: User "kelpie-viewer" cannot list resource "pods" in API group "" '
            f'in the namespace "{backend.namespace}".'
        )
        assert spec_of(backend, "Deployment", "web")["replicas"] == 1
    finally:
        viewer.close()


# --- the API's own answers: content types, Status codes and messages -------------------


async def test_patch_content_types_and_failures_answer_like_the_real_server(
    backend: Backend,
) -> None:
    """Through the official client as admin: the fake must answer what the real server does."""
    backend.deployment("web", replicas=1)
    admin = backend.clients_as("admin")
    kube = admin[CLUSTER]
    ns, apps = backend.namespace, kube.apps

    async def patch(body: Any, content_type: str, **kw: Any) -> Any:
        return await kube.call_json(
            "patch deployment web",
            apps.patch_namespaced_deployment,
            "web",
            ns,
            body,
            _content_type=content_type,
            **kw,
        )

    async def refusal(body: Any, content_type: str, **kw: Any) -> KubeFailure:
        with pytest.raises(KubeFailure) as caught:
            await patch(body, content_type, **kw)
        return caught.value

    try:
        replace = [{"op": "replace", "path": "/spec/replicas", "value": 2}]
        answer = await patch(replace, "application/json-patch+json")
        assert answer["spec"]["replicas"] == 2
        failed = await refusal(
            [{"op": "test", "path": "/spec/replicas", "value": 7}], "application/json-patch+json"
        )
        assert (failed.status, str(failed)) == (
            422,
            "Kubernetes rejected the request to patch deployment web (422 Unprocessable "
            "Entity): the server rejected our request due to an error in our request.",
        )
        apply = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
        failed = await refusal(apply, "application/apply-patch+yaml")
        assert failed.status == 422 and "fieldManager: Required value" in str(failed)
        failed = await refusal({"spec": {"replicas": -1}}, "application/merge-patch+json")
        assert str(failed) == (
            "Kubernetes rejected the request to patch deployment web (422 Unprocessable "
            'Entity): Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1: '
            "must be greater than or equal to 0."
        )
        stale = {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 3}}
        failed = await refusal(stale, "application/merge-patch+json")
        assert str(failed) == (
            "Kubernetes answered 409 Conflict to patch deployment web: Operation cannot be "
            'fulfilled on deployments.apps "web": the object has been modified; please apply '
            "your changes to the latest version and try again."
        )
        wrong_uid = {"metadata": {"uid": "not-its-uid"}, "spec": {"replicas": 3}}
        failed = await refusal(wrong_uid, "application/merge-patch+json")
        assert failed.status == 422 and "metadata.uid" in str(failed)
        with pytest.raises(KubeFailure) as missing:
            await kube.call_json("read pod nope", kube.core.read_namespaced_pod, "nope", ns)
        assert (
            str(missing.value)
            == 'Kubernetes could not read pod nope: not found (404: pods "nope" not found).'
        )
        assert spec_of(backend, "Deployment", "web")["replicas"] == 2
    finally:
        admin.close()


# --- field ownership: managedFields and server-side apply conflicts ---------------------

RESTARTED = ("spec", "template", "metadata", "annotations", "kubectl.kubernetes.io/restartedAt")


def owners(obj: Any, path: tuple[str, ...]) -> set[tuple[str, str]]:
    """(manager, operation) of every managedFields entry that owns the field at `path`."""
    found = set()
    for entry in obj["metadata"].get("managedFields") or []:
        node = entry["fieldsV1"]
        for key in path:
            node = node.get(f"f:{key}")
            if node is None:
                break
        else:
            found.add((entry["manager"], entry["operation"]))
    return found


async def test_field_owners_and_apply_conflicts_answer_like_the_real_server(
    backend: Backend,
) -> None:
    """kelpie's approved writes are Updates by field manager "kelpie" (the scale subresource
    records no owner on v1.20); a server-side applier (say, a GitOps tool) sending a field
    kelpie set gets 409 naming kelpie unless the value is the same (then both own it) or it
    forces (then it alone does)."""
    backend.deployment("web", replicas=1)
    ctx = context(backend)
    for tool, args in (("scale_deployment", {"replicas": 2}), ("restart_deployment", {})):
        operation = writer(backend, tool)
        await operation.execute(await operation.prepare({"name": "web"} | args, ctx), ctx)
    deployment = backend.read("Deployment", "web")
    assert deployment is not None
    assert owners(deployment, ("spec", "replicas")) == {("OpenAPI-Generator", "Update")}
    assert owners(deployment, RESTARTED) == {("kelpie", "Update")}
    kelpies = deployment["spec"]["template"]["metadata"]["annotations"][RESTARTED[-1]]

    admin = backend.clients_as("admin")
    kube = admin[CLUSTER]

    async def apply(stamp: str, **kw: Any) -> Any:
        annotations = {RESTARTED[-1]: stamp}
        config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
        config["spec"] = {"template": {"metadata": {"annotations": annotations}}}
        return await kube.call_json(
            "apply deployment web",
            kube.apps.patch_namespaced_deployment,
            "web",
            backend.namespace,
            config,
            _content_type="application/apply-patch+yaml",
            field_manager="gitops",
            **kw,
        )

    try:
        field = f".spec.template.metadata.annotations.{RESTARTED[-1]}"
        for dry_run in ({"dry_run": "All"}, {}):
            with pytest.raises(KubeFailure) as conflict:
                await apply("2000-01-01T00:00:00Z", **dry_run)
            assert conflict.value.status == 409
            status = json.loads(conflict.value.__cause__.body)  # type: ignore[union-attr]
            assert (status["reason"], status["message"]) == (
                "Conflict",
                f'Apply failed with 1 conflict: conflict with "kelpie" using apps/v1: {field}',
            )
            cause = {"reason": "FieldManagerConflict", "field": field}
            assert status["details"]["causes"] == [
                cause | {"message": 'conflict with "kelpie" using apps/v1'}
            ]
        shared = await apply(kelpies)
        assert owners(shared, RESTARTED) == {("kelpie", "Update"), ("gitops", "Apply")}
        forced = await apply("2000-01-01T00:00:00Z", force=True)
        assert owners(forced, RESTARTED) == {("gitops", "Apply")}
        # kelpie made the annotations map, so it still owns the map itself, no key in it.
        (kept,) = [e for e in forced["metadata"]["managedFields"] if e["manager"] == "kelpie"]
        assert kept["fieldsV1"] == {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {}}}}}
        stored = backend.read("Deployment", "web")
        assert (
            stored is not None
            and stored["metadata"]["managedFields"] == (forced["metadata"]["managedFields"])
        )
        annotations = stored["spec"]["template"]["metadata"]["annotations"]
        assert annotations[RESTARTED[-1]] == "2000-01-01T00:00:00Z"
        # gitops owns the key as an applier (printed without an API version), kelpie still
        # the map holding it: both conflict with a third manager, at the key's path.
        with pytest.raises(KubeFailure) as both:
            await kube.call_json(
                "apply deployment web",
                kube.apps.patch_namespaced_deployment,
                "web",
                backend.namespace,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web"},
                    "spec": {"template": {"metadata": {"annotations": {RESTARTED[-1]: "x"}}}},
                },
                _content_type="application/apply-patch+yaml",
                field_manager="other",
            )
        assert json.loads(both.value.__cause__.body)["message"] == (  # type: ignore[union-attr]
            f'Apply failed with 2 conflicts: conflicts with "gitops":\n- {field}\n'
            f'conflicts with "kelpie" using apps/v1:\n- {field}'
        )
    finally:
        admin.close()
