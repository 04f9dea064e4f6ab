"""The changes toolset on the fake server: rollout_history and what_changed, with a clock.

The world is seeded at fixed times around NOW, years away from the machine's own clock, so
whatever the fake stamps with real time (a node's heartbeat, a pod's start) falls outside
every window; only the tools' injected clock decides what a window holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.toolsets.kube.changes import stamp
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.read import read_tools
from bot.toolsets.kube.write import write_tools
from bot.toolsets.spec import (
    KubeIdentity,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolResult,
)
from bot.values import GitOpsPolicy
from tests.peers.kube_server import SSAR_PATH, KubeServer
from tests.realkube.backends import RealBackend
from tests.realkube.cluster import Admin, RealKube, eventually
from tests.realkube.seeding import roll
from tests.test_approvals import card_text, click, propose_scale, real_writes, replicas, wait_said
from tests.world import ALICE, CAROL, OPS_CHANNEL, World

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
CTX = ToolContext(cluster="prod", default_namespace="shop")
IMAGE = "registry.example.com/checkout"


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


@pytest.fixture
def clients(kube: KubeServer, tmp_path: Path) -> Iterator[KubeClients]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    built = KubeClients.build([("prod", str(kubeconfig), None, False)], request_timeout=5)
    yield built
    built.close()


@pytest.fixture
def tools(clients: KubeClients) -> dict[str, Tool]:
    return {tool.name: tool for tool in read_tools(clients, clock=lambda: NOW)}


async def call(tools: dict[str, Tool], tool: str, **args: Any) -> ToolResult:
    return await tools[tool].handler(args, CTX)


def seed_checkout(kube: KubeServer) -> None:
    kube.add_namespace("shop")
    kube.add_deployment_history(
        "shop",
        "checkout",
        [
            (f"{IMAGE}:1.0", ago(days=3), ""),
            (f"{IMAGE}:1.1", ago(hours=2), "kubectl set image deployment/checkout app=1.1"),
            (f"{IMAGE}:1.2", ago(minutes=10), "release 1.2: faster cart"),
        ],
        env=[("DB_PASSWORD", "hunter2-horse-battery"), ("LOG_LEVEL", "debug")],
    )


# --- rollout_history ----------------------------------------------------------------------


async def test_a_deployments_revisions_show_change_cause_images_and_the_image_diff(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    seed_checkout(kube)
    found = await call(tools, "rollout_history", kind="Deployment", name="checkout")
    lines = found.text.splitlines()
    assert lines[0] == "Deployment shop/checkout: 3 revisions, current 3"
    assert lines[1].split() == ["REVISION", "CREATED", "IMAGES", "CHANGE-CAUSE"]
    assert lines[2].startswith("3 (current)  2030-01-15T11:50:00Z (10m ago)")
    assert lines[2].endswith(f"{IMAGE}:1.2  release 1.2: faster cart")
    assert "2030-01-15T10:00:00Z (2h ago)" in lines[3] and "kubectl set image" in lines[3]
    assert lines[4].startswith("1 ") and lines[4].endswith(f"{IMAGE}:1.0  -")
    diff = lines[lines.index("Pod template difference, revision 2 → revision 3:") + 1 :]
    assert diff[:2] == ["--- revision 2", "+++ revision 3"]
    assert f"-  - image: {IMAGE}:1.1" in diff and f"+    image: {IMAGE}:1.2" in diff
    # The env added in revision 3: its secret-looking value masked, the other one shown.
    assert diff[diff.index("+    - name: DB_PASSWORD") + 1] == "+      value: '[MASKED]'"
    assert "hunter2" not in found.text and "+      value: debug" in diff
    assert "pod-template-hash" not in found.text
    assert found.summary == "Deployment shop/checkout: 3 revisions, current 3"


async def test_two_named_revisions_are_compared_and_an_unknown_one_is_one_sentence(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    seed_checkout(kube)
    found = await call(
        tools, "rollout_history", kind="Deployment", name="checkout", revision=2, compare_to=1
    )
    assert "Pod template difference, revision 1 → revision 2:" in found.text
    assert f"-  - image: {IMAGE}:1.0" in found.text and f"+  - image: {IMAGE}:1.1" in found.text
    assert "1.2" not in found.text.split("Pod template difference")[1]
    with pytest.raises(ToolArgumentError, match=r"^Deployment shop/checkout has no revision 7 "):
        await call(tools, "rollout_history", kind="Deployment", name="checkout", revision=7)
    with pytest.raises(ToolArgumentError, match="must be Deployment, StatefulSet or DaemonSet"):
        await call(tools, "rollout_history", kind="ReplicaSet", name="checkout")


async def test_a_statefulsets_revisions_come_from_its_controller_revisions(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    kube.add_namespace("shop")
    kube.add_revisioned(
        "StatefulSet",
        "shop",
        "orders-db",
        [("postgres:15.4", ago(days=20), ""), ("postgres:16.1", ago(hours=5), "major upgrade")],
    )
    found = await call(tools, "rollout_history", kind="StatefulSet", name="orders-db")
    assert found.text.startswith("StatefulSet shop/orders-db: 2 revisions, current 2\n")
    row = " ".join(found.text.splitlines()[2].split())
    assert row == "2 (current) 2030-01-15T07:00:00Z (5h ago) postgres:16.1 major upgrade"
    assert "-  - image: postgres:15.4" in found.text and "+  - image: postgres:16.1" in found.text
    assert "$patch" not in found.text
    listed = [r for r in kube.requests if r.path.endswith("/controllerrevisions")]
    assert listed and listed[0].query == {"labelSelector": "app=orders-db"}


# --- what_changed ----------------------------------------------------------------------------


def seed_an_eventful_hour(kube: KubeServer) -> None:
    seed_checkout(kube)  # revision 3 at 10 minutes ago, revision 2 two hours ago
    kube.add_node("node-a")
    rs = next(r for r in kube.objects("ReplicaSet") if r["spec"]["replicas"] > 0)
    kube.add_pod("shop", "checkout-7f9c-abcde", owner=rs, node="node-a")
    kube.set_last_termination("shop", "checkout-7f9c-abcde", at=ago(minutes=5), reason="OOMKilled")
    kube.set_node_condition(
        "node-a", "MemoryPressure", "True", "KubeletHasInsufficientMemory", at=ago(minutes=7)
    )
    scaled = f"Scaled up replica set {rs['metadata']['name']} to 3"
    kube.add_event_at(
        "shop",
        "Deployment",
        "checkout",
        "ScalingReplicaSet",
        scaled,
        type="Normal",
        at=ago(minutes=9),
    )
    kube.add_event_at(
        "shop",
        "Pod",
        "checkout-7f9c-abcde",
        "BackOff",
        "Back-off restarting failed container",
        at=ago(minutes=4),
    )
    kube.add_event_at("shop", "Pod", "checkout-old", "FailedMount", "old trouble", at=ago(hours=3))
    kube.add_configmap(
        "shop",
        "checkout-config",
        {"PAYMENT_KEY": "pk-live-4242", "mode": "turbo-mode-on"},
        created=ago(days=30),
        changed=ago(minutes=20),
    )
    kube.add_hpa("shop", "checkout", "checkout", scaled=ago(minutes=15), current=2, desired=3)
    kube.add_deployment_history("shop", "search", [("search:2", ago(minutes=2), "")])


async def test_what_changed_is_a_timeline_newest_first_within_the_window(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    seed_an_eventful_hour(kube)
    found = await call(tools, "what_changed")
    lines = found.text.splitlines()
    assert lines[0].startswith(
        "What changed in namespace shop, 2030-01-15T11:00:00Z to 2030-01-15T12:00:00Z "
        "(newest first): 8 changes ("
    )
    expected = [
        ("11:58:00Z  rollout", "Deployment search revision 1: search:2"),
        ("11:56:00Z  warning", "Pod checkout-7f9c-abcde: BackOff: Back-off restarting"),
        ("11:55:00Z  restart", "container app restarted after OOMKilled (exit code 1, 1 restarts)"),
        ("11:53:00Z  node", "Node node-a condition MemoryPressure became True"),
        ("11:51:00Z  scale", "Deployment checkout: ScalingReplicaSet: Scaled up replica set"),
        ("11:50:00Z  rollout", f"Deployment checkout revision 3: {IMAGE}:1.1 → {IMAGE}:1.2"),
        ("11:45:00Z  hpa", "HPA checkout scaled Deployment checkout to 3 replicas (now 2)"),
        ("11:40:00Z  config", "ConfigMap checkout-config changed by kubectl-edit"),
    ]
    rows = [line for line in lines[1:] if line.startswith("2030")]
    for (when, what), line in zip(expected, rows, strict=True):
        assert line.startswith(f"2030-01-15T{when}") and what in line, (when, line)
    assert "[Pod checkout-7f9c-abcde status.containerStatuses[app].lastState]" in found.text
    assert "[ConfigMap checkout-config resourceVersion " in found.text
    # Outside the window: revision 2 (2h ago), the 3h-old warning, the ConfigMap's creation.
    assert "revision 2" not in found.text and "old trouble" not in found.text
    # ConfigMap values never: kelpie asked for metadata only, and shows none.
    assert "pk-live" not in found.text and "turbo-mode" not in found.text
    (listed,) = [r for r in kube.requests if r.path == "/api/v1/namespaces/shop/configmaps"]
    assert "as=PartialObjectMetadataList" in listed.headers["Accept"]


async def test_a_narrower_window_and_one_workload(kube: KubeServer, tools: dict[str, Tool]) -> None:
    seed_an_eventful_hour(kube)
    found = await call(tools, "what_changed", window="6m")
    kinds = [line.split()[1] for line in found.text.splitlines()[1:] if line.startswith("2030")]
    assert kinds == ["rollout", "warning", "restart"]
    # A deployment whose name starts like checkout's: its pod's events are not checkout's.
    worker = kube.add_deployment_history("shop", "checkout-worker", [("w:1", ago(days=1), "")])
    rs = next(
        r for r in kube.objects("ReplicaSet") if r["metadata"]["name"].startswith("checkout-w")
    )
    kube.add_pod("shop", "checkout-worker-1a2b3-xyz", owner=rs)
    kube.add_event_at(
        "shop", "Pod", "checkout-worker-1a2b3-xyz", "Unhealthy", "worker probe", at=ago(minutes=3)
    )
    assert worker["metadata"]["name"] == "checkout-worker"
    scoped = await call(tools, "what_changed", workload="Deployment/checkout", window="2h30m")
    assert "worker probe" not in scoped.text
    assert "Pod checkout-7f9c-abcde: BackOff" in scoped.text
    assert scoped.text.startswith("What changed in Deployment shop/checkout, 2030-01-15T09:30")
    assert "search" not in scoped.text  # another deployment's rollout
    assert f"Deployment checkout revision 2: {IMAGE}:1.0 → {IMAGE}:1.1" in scoped.text
    # The ConfigMap is not used by the deployment's template: not about it.
    assert "checkout-config" not in scoped.text
    with pytest.raises(ToolArgumentError, match="between 1m and 24h, got 72h"):
        await call(tools, "what_changed", window="72h")
    with pytest.raises(ToolArgumentError, match='must be a duration such as "30m"'):
        await call(tools, "what_changed", window="3d")


async def test_both_tools_act_as_the_roles_identity_on_every_request(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    seed_an_eventful_hour(kube)
    alice = ToolContext("prod", "shop", KubeIdentity("alice", ("oncall",)))
    history = await tools["rollout_history"].handler(
        {"kind": "Deployment", "name": "checkout"}, alice
    )
    timeline = await tools["what_changed"].handler({"workload": "Deployment/checkout"}, alice)
    assert history.acting_as == timeline.acting_as == "Kubernetes user alice (groups oncall)"
    assert len(kube.requests) >= 9
    assert {r.acting_as for r in kube.requests} == {("alice", ("oncall",))}


# --- GitOps-aware writes, through the approval flow ------------------------------------------


def mark(world: World, *, labels: dict[str, str], annotations: dict[str, str]) -> None:
    """What Argo CD or Flux leaves on the objects it applies, on shop/checkout-api."""
    deployment = world.kube.get("Deployment", "shop", "checkout-api")
    assert deployment is not None
    deployment["metadata"]["labels"] |= labels
    deployment["metadata"].setdefault("annotations", {}).update(annotations)
    world.kube.put("Deployment", deployment)


def thread_cards(world: World, thread_ts: str) -> list[Any]:
    return [
        m
        for m in world.slack.thread(OPS_CHANNEL, thread_ts)
        if any(b.get("block_id", "").startswith("approval:") for b in m.blocks or [])
    ]


async def test_a_write_to_what_argo_cd_manages_is_refused_before_anything_is_sent(
    world: World,
) -> None:
    tracking = "shop-apps:apps/Deployment:shop/checkout-api"
    mark(world, labels={}, annotations={"argocd.argoproj.io/tracking-id": tracking})
    await world.start_bot()  # kubernetes.gitops defaults to refuse
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "traffic"}
    world.model.reply_tool_calls([("scale_deployment", args)])
    world.model.reply_text("Argo CD owns it; change the replicas in Git.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "scale checkout-api to 5")
    await wait_said(world, mention["ts"], "Argo CD owns it")
    refused = [
        m["content"]
        for m in world.model.requests[-1]["messages"]
        if m["role"] == "tool" and "scale_deployment" in m["content"]
    ]
    assert refused == [
        "Error: scale_deployment cannot be prepared: Deployment shop/checkout-api is managed by "
        "Argo CD "
        "(Application shop-apps), which would revert this change at its next sync; change it "
        "in Git instead (kubernetes.gitops is refuse)."
    ]
    assert thread_cards(world, mention["ts"]) == []
    assert world.kube.writes() == []  # no dry run either: nothing was sent to change anything
    assert replicas(world) == 3


async def test_with_warn_the_card_says_flux_manages_the_target_and_approval_still_writes(
    world: World,
) -> None:
    flux = {
        "kustomize.toolkit.fluxcd.io/name": "shop",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    mark(world, labels=flux, annotations={})
    await world.start_bot({"kubernetes": {"gitops": "warn"}})
    mention, card = await propose_scale(world, then="Scaled checkout-api to 5.")
    text = card_text(card)
    assert "spec.replicas 3 → 5" in text and "Read before approving" in text
    assert (
        "Deployment shop/checkout-api is managed by Flux (Kustomization flux-system/shop): it "
        "may revert this change at its next sync unless the change is also made in Git."
    ) in text.replace("`", "")
    assert real_writes(world) == []  # the preview was a dry run
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled checkout-api to 5.")
    assert replicas(world) == 5
    # The model was told too, with the pending call's result.
    (pending,) = [m["content"] for m in world.model.requests[-1]["messages"] if m["role"] == "tool"]
    assert pending.startswith("Not run yet: waiting for a person's approval")
    assert pending.endswith("unless the change is also made in Git.")
    assert "managed by Flux (Kustomization flux-system/shop)" in pending


@pytest.mark.parametrize(
    ("labels", "annotations", "manager"),
    [
        ({"argocd.argoproj.io/instance": "shop"}, {}, "Argo CD (Application shop)"),
        (
            {"app.kubernetes.io/instance": "shop-prod"},
            {"argocd.argoproj.io/sync-wave": "2"},
            "Argo CD (Application shop-prod)",
        ),
        (
            {"helm.toolkit.fluxcd.io/name": "web", "helm.toolkit.fluxcd.io/namespace": "apps"},
            {},
            "Flux (HelmRelease apps/web)",
        ),
        # Helm charts set app.kubernetes.io/instance too: alone, it is no GitOps mark.
        ({"app.kubernetes.io/instance": "shop-prod"}, {}, None),
    ],
)
async def test_the_marks_argo_cd_and_flux_leave(
    kube: KubeServer,
    clients: KubeClients,
    labels: dict[str, str],
    annotations: dict[str, str],
    manager: str | None,
) -> None:
    kube.add_namespace("shop")
    deployment = kube.add_deployment("shop", "web")
    deployment["metadata"]["labels"] |= labels
    deployment["metadata"]["annotations"] |= annotations
    kube.put("Deployment", deployment)
    restart = {t.name: t for t in write_tools(clients)}["restart_deployment"].write
    assert restart is not None
    if manager is None:
        plan = await restart.prepare({"name": "web"}, CTX)
        assert plan.notes == ()
        return
    mark = len(kube.requests)
    with pytest.raises(ToolFailure) as refused:
        await restart.prepare({"name": "web"}, CTX)
    assert str(refused.value).startswith(f"Deployment shop/web is managed by {manager}, which ")
    # kelpie's own access review and the read of the target; no dry run, no write.
    sent = [(r.method, r.path) for r in kube.requests[mark:]]
    assert sent == [("POST", SSAR_PATH), ("GET", "/apis/apps/v1/namespaces/shop/deployments/web")]
    assert kube.writes() == []
    warned = {t.name: t for t in write_tools(clients, gitops=GitOpsPolicy.WARN)}
    operation = warned["restart_deployment"].write
    assert operation is not None
    plan = await operation.prepare({"name": "web"}, CTX)
    assert plan.notes == (
        f"Deployment shop/web is managed by {manager}: it may revert this change at its next "
        "sync unless the change is also made in Git.",
    )


# --- the real API server (its controller manager makes the ReplicaSets and revisions) --------

REAL_IMAGE = "registry.example.com/web"


def crashed_pod_on_a_node(real: RealBackend, moment: datetime) -> None:
    """What a kubelet would report (the tier has none): a container that restarted after
    an OOM kill, on a node whose MemoryPressure just turned True."""
    node = real.node_name("worker")
    real.node(node)
    pressure = {
        "type": "MemoryPressure",
        "status": "True",
        "reason": "KubeletHasInsufficientMemory",
    }
    pressure["lastTransitionTime"] = stamp(moment - timedelta(minutes=2))
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    ready["lastTransitionTime"] = stamp(moment - timedelta(days=3))
    real.admin.core.patch_node_status(node, {"status": {"conditions": [pressure, ready]}})
    real.pod("crashy", node=node)
    last = {
        "exitCode": 137,
        "reason": "OOMKilled",
        "finishedAt": stamp(moment - timedelta(minutes=1)),
    }
    last["startedAt"] = stamp(moment - timedelta(minutes=9))
    status = {
        "name": "app",
        "image": "registry.example.com/app:1.0",
        "imageID": "",
        "ready": True,
        "restartCount": 1,
        "state": {"running": {"startedAt": stamp(moment)}},
        "lastState": {"terminated": last},
    }
    patch = {"status": {"phase": "Running", "containerStatuses": [status]}}
    real.admin.core.patch_namespaced_pod_status("crashy", real.namespace, patch)


@pytest.mark.realkube
async def test_history_and_timeline_on_the_real_api_server(
    realkube: tuple[RealKube, Admin],
) -> None:
    real = RealBackend(*realkube)
    try:
        start = datetime.now(UTC).replace(microsecond=0)
        real.deployment("web", replicas=1, image=f"{REAL_IMAGE}:1")
        roll(real, "web", f"{REAL_IMAGE}:2", "release 2: new cart", 2)
        roll(real, "web", f"{REAL_IMAGE}:3", "release 3: hotfix", 3)
        configmap = {"metadata": {"name": "web-config"}, "data": {"API_TOKEN": "tok-9f8e7d"}}
        real.admin.core.create_namespaced_config_map(real.namespace, configmap)
        crashed_pod_on_a_node(real, start)
        tools = {t.name: t for t in read_tools(real.clients, clock=lambda: datetime.now(UTC))}
        ctx = ToolContext("prod", real.namespace)

        history = await tools["rollout_history"].handler({"kind": "Deployment", "name": "web"}, ctx)
        lines = history.text.splitlines()
        assert lines[0] == f"Deployment {real.namespace}/web: 3 revisions, current 3"
        assert lines[2].startswith("3 (current)") and lines[2].endswith("release 3: hotfix")
        assert lines[3].startswith("2 ") and lines[3].endswith("release 2: new cart")
        assert lines[4].startswith("1 ") and f"{REAL_IMAGE}:1" in lines[4]
        assert f"-  - image: {REAL_IMAGE}:2" in lines and f"+  - image: {REAL_IMAGE}:3" in lines
        assert "pod-template-hash" not in history.text

        timeline = await tools["what_changed"].handler({"window": "10m"}, ctx)
        rows = [line for line in timeline.text.splitlines() if line[:2] == "20"]
        rollouts = [r for r in rows if "  rollout  " in r]
        assert [r.split("  rollout  ")[1].split(":")[0] for r in rollouts] == [
            "Deployment web revision 3",
            "Deployment web revision 2",
            "Deployment web revision 1",
        ]
        assert any("  scale  " in r and "ScalingReplicaSet" in r for r in rows)
        assert any("  restart  " in r and "after OOMKilled (exit code 137" in r for r in rows)
        assert any("  node  " in r and "MemoryPressure became True" in r for r in rows)
        assert any("  config  " in r and "ConfigMap web-config created" in r for r in rows)
        assert "tok-9f8e7d" not in timeline.text
        stamps = [row.split()[0] for row in rows]
        assert stamps == sorted(stamps, reverse=True)  # newest first (ISO stamps sort as text)

        statefulset = {
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "db", "image": "postgres:15"}]},
                },
            },
        }
        real.admin.apps.create_namespaced_stateful_set(real.namespace, statefulset)
        image = {
            "spec": {"template": {"spec": {"containers": [{"name": "db", "image": "postgres:16"}]}}}
        }
        real.admin.apps.patch_namespaced_stateful_set("db", real.namespace, image)

        def two_revisions() -> bool:
            found = real.admin.json(
                real.admin.apps.list_namespaced_controller_revision, real.namespace
            )
            return len(found["items"]) >= 2

        eventually("the StatefulSet's second ControllerRevision", two_revisions)
        db = await tools["rollout_history"].handler({"kind": "StatefulSet", "name": "db"}, ctx)
        assert db.text.startswith(f"StatefulSet {real.namespace}/db: 2 revisions, current 2")
        assert "-  - image: postgres:15" in db.text and "+  - image: postgres:16" in db.text
    finally:
        real.close()


async def test_hpa_decisions_and_replicas_a_replicaset_was_given(
    kube: KubeServer, tools: dict[str, Tool]
) -> None:
    seed_checkout(kube)
    kube.add_hpa("shop", "checkout", "checkout", scaled=ago(minutes=30), current=3, desired=6)
    rescaled = "New size: 6; reason: cpu resource utilization (percentage of request) above target"
    kube.add_event_at(
        "shop",
        "HorizontalPodAutoscaler",
        "checkout",
        "SuccessfulRescale",
        rescaled,
        type="Normal",
        at=ago(minutes=30),
    )
    # Someone scaled the current ReplicaSet by hand: no event tells it, its managedFields do.
    rs = next(r for r in kube.objects("ReplicaSet") if r["spec"]["replicas"] > 0)
    scaled = {"f:spec": {"f:replicas": {}}}
    rs["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "time": stamp(ago(minutes=10)),
            "fieldsType": "FieldsV1",
            "fieldsV1": scaled,
        },
        {
            "manager": "kubectl-scale",
            "operation": "Update",
            "time": stamp(ago(minutes=8)),
            "fieldsType": "FieldsV1",
            "fieldsV1": scaled,
        },
    ]
    rs["spec"]["replicas"] = 4
    kube.put("ReplicaSet", rs)
    found = await call(tools, "what_changed", workload="Deployment/checkout")
    rows = [line for line in found.text.splitlines() if line.startswith("2030")]
    name = rs["metadata"]["name"]
    assert rows[0] == (
        f"2030-01-15T11:52:00Z  scale    ReplicaSet {name} set to 4 replicas by kubectl-scale "
        f"[ReplicaSet {name} managedFields spec.replicas]"
    )
    assert rows[1].startswith("2030-01-15T11:50:00Z  rollout")
    (hpa,) = [row for row in rows if "  hpa  " in row]
    assert hpa.startswith("2030-01-15T11:30:00Z  hpa      HorizontalPodAutoscaler checkout: ")
    assert "SuccessfulRescale: New size: 6" in hpa  # the event, once: lastScaleTime says the same
