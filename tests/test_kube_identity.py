"""A role's Kubernetes identity: every call of the turn impersonates it, the approved write
too, and the cluster's RBAC for that identity decides (real server: one identity allowed,
another refused, both in sentences)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from bot.config import RoleConfig
from bot.store.approvals import WriteAuditRepository
from bot.store.repositories import ToolAuditRepository
from bot.toolsets.kube.client import KubeClients, KubeFailure
from bot.toolsets.kube.read import read_tools
from bot.toolsets.kube.write import write_tools
from bot.toolsets.spec import KubeIdentity, ToolContext, ToolFailure
from bot.values import WritePlan
from tests.peers.kube_server import Demo, KubeServer
from tests.realkube.backends import CLUSTER, Backend
from tests.realkube.cluster import KELPIE_USER, ROOT, Admin, RealKube, binding, eventually
from tests.test_approvals import card_text, click, propose_scale, wait_said
from tests.world import CAROL, OPS_CHANNEL, World

IMPERSONATE_RBAC = ROOT / "deploy" / "base" / "rbac-impersonate.yaml"
ALICE = KubeIdentity("alice", ("oncall", "team-a"))
BOB = KubeIdentity("bob", ("team-b",))


def _tools(clients: KubeClients) -> dict[str, Any]:
    return {t.name: t for t in [*read_tools(clients), *write_tools(clients)]}


async def test_every_call_of_the_turn_and_the_approved_write_impersonate(
    kube: KubeServer, demo: Demo, tmp_path: Path
) -> None:
    clients = KubeClients.build(
        [("prod", str(kube.write_kubeconfig(tmp_path / "kubeconfig")), None, False)]
    )
    tools = _tools(clients)
    ctx = ToolContext("prod", "shop", ALICE)
    try:
        await tools["list_pods"].handler({}, ctx)
        scale = tools["scale_deployment"].write
        plan = await scale.prepare({"name": demo.deployment, "replicas": 4}, ctx)
        assert plan.description.endswith("(as Kubernetes user alice (groups oncall, team-a))")
        # The approval runs later, in another context: the plan carries the identity.
        stored = json.loads(json.dumps(plan.args))
        rebuilt = WritePlan(
            plan.tool, plan.description, plan.cluster, plan.target, plan.changes, stored
        )
        mark = len(kube.requests)
        result = await scale.execute(rebuilt, ToolContext("prod", "shop"))
        assert result.summary.endswith("(as Kubernetes user alice (groups oncall, team-a))")
        assert kube.requests[mark:], "the approved write was sent"
        assert {r.acting_as for r in kube.requests} == {("alice", ("oncall", "team-a"))}
        await tools["list_pods"].handler({}, ToolContext("prod", "shop"))
        assert kube.requests[-1].acting_as == (None, ())
    finally:
        clients.close()


async def test_a_kubeconfig_as_and_as_groups_are_honoured(
    kube: KubeServer, demo: Demo, tmp_path: Path
) -> None:
    path = kube.write_kubeconfig(tmp_path / "kubeconfig")
    config = json.loads(path.read_text())
    config["users"][0]["user"] |= {"as": "carol", "as-groups": ["sre", "oncall"]}
    path.write_text(json.dumps(config))
    clients = KubeClients.build([("prod", str(path), None, False)])
    try:
        await _tools(clients)["list_pods"].handler({}, ToolContext("prod", "shop"))
        assert kube.requests[-1].acting_as == ("carol", ("sre", "oncall"))
        # A role's identity is more specific than the kubeconfig's.
        await _tools(clients)["list_pods"].handler({}, ToolContext("prod", "shop", BOB))
        assert kube.requests[-1].acting_as == ("bob", ("team-b",))
    finally:
        clients.close()


async def test_discovery_and_the_generic_reads_impersonate_too(
    kube: KubeServer, demo: Demo, tmp_path: Path
) -> None:
    clients = KubeClients.build(
        [("prod", str(kube.write_kubeconfig(tmp_path / "kubeconfig")), None, False)]
    )
    tools = _tools(clients)
    kube.set_pod_metrics("shop", demo.crashing_pod, {"app": ("10m", "64Mi")})
    try:
        ctx = ToolContext("prod", "shop", ALICE)
        await tools["list_resources"].handler({"kind": "Deployment"}, ctx)
        await tools["get_resource"].handler({"kind": "Deployment", "name": demo.deployment}, ctx)
        await tools["top_pods"].handler({}, ctx)
        paths = {r.path for r in kube.requests}
        assert {"/api", "/apis", "/apis/apps/v1/namespaces/shop/deployments"} <= paths
        assert "/apis/metrics.k8s.io/v1beta1/namespaces/shop/pods" in paths
        assert {r.acting_as for r in kube.requests} == {("alice", ("oncall", "team-a"))}
    finally:
        clients.close()


def _grants(backend: Backend) -> None:
    """Group team-a may scale deployments in the test's namespace; kelpie may impersonate
    alice and bob and their groups (what a cluster admin grants for the config's roles)."""
    namespace = backend.namespace
    scaler = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "scaler", "namespace": namespace},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }
    backend.grant(scaler)
    backend.grant(binding(scaler, {"kind": "Group", "name": "team-a"}, namespace))
    impersonate = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"impersonate-{namespace}"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["users"],
                "verbs": ["impersonate"],
                "resourceNames": ["alice", "bob"],
            },
            {
                "apiGroups": [""],
                "resources": ["groups"],
                "verbs": ["impersonate"],
                "resourceNames": ["oncall", "team-a", "team-b"],
            },
        ],
    }
    backend.grant(impersonate)
    backend.grant(binding(impersonate, {"kind": "User", "name": KELPIE_USER}))


async def test_the_same_request_is_allowed_for_one_identity_and_refused_for_another(
    backend: Backend,
) -> None:
    _grants(backend)
    backend.deployment("web", replicas=1)
    tools = _tools(backend.clients)
    scale = tools["scale_deployment"].write
    args = {"name": "web", "replicas": 2}
    as_bob = ToolContext(CLUSTER, backend.namespace, BOB)
    with pytest.raises(ToolFailure) as refused:
        await scale.prepare(args, as_bob)
    assert str(refused.value).startswith(
        "Kubernetes user bob (groups team-b) may not patch deployments/scale in "
        f"{backend.namespace}"
    )
    with pytest.raises(KubeFailure) as forbidden:
        await tools["list_pods"].handler({}, as_bob)
    assert str(forbidden.value) == (
        "The cluster's RBAC does not let Kubernetes user bob (groups team-b) list pods "
        f"in namespace {backend.namespace} (403 Forbidden)."
    )
    assert forbidden.value.acting_as == "Kubernetes user bob (groups team-b)"
    # alice is allowed only through team-a, her second group: every group is sent.
    as_alice = ToolContext(CLUSTER, backend.namespace, ALICE)
    plan = await scale.prepare(args, as_alice)
    result = await scale.execute(plan, ToolContext(CLUSTER, backend.namespace))
    assert result.summary.endswith("(as Kubernetes user alice (groups oncall, team-a))")
    deployment = backend.read("Deployment", "web")
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    # An identity kelpie may not impersonate: the API server's message says it is kelpie's
    # own grant that is missing, not carol's, and the operator is told what to grant.
    carol = ToolContext(CLUSTER, backend.namespace, KubeIdentity("carol", ("team-a",)))
    with pytest.raises(KubeFailure) as no_grant:
        await tools["list_pods"].handler({}, carol)
    assert str(no_grant.value) == (
        f"kelpie's service account (Kubernetes user {KELPIE_USER}) may not impersonate user "
        f"carol, so it could not list pods in namespace {backend.namespace}; grant impersonate "
        'on users "carol" to it (as deploy/base/rbac-impersonate.yaml does).'
    )
    # alice is granted, the group team-x is not.
    stranger = ToolContext(CLUSTER, backend.namespace, KubeIdentity("alice", ("team-x",)))
    with pytest.raises(KubeFailure, match=r'may not impersonate group team-x, .*"team-x"'):
        await tools["list_pods"].handler({}, stranger)


@pytest.mark.realkube
async def test_a_kubeconfig_as_user_is_what_the_real_cluster_sees(
    realkube: tuple[RealKube, Admin], tmp_path: Path
) -> None:
    cluster, _ = realkube
    config = yaml.safe_load(cluster.kubeconfig("kelpie").read_text())
    config["users"][0]["user"] |= {"as": "bob", "as-groups": ["team-b"]}
    path = tmp_path / "as-bob.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    clients = KubeClients.build([(CLUSTER, str(path), None, False)])
    try:
        # kelpie may not impersonate bob on this cluster: the refusal names bob.
        with pytest.raises(KubeFailure, match="does not let Kubernetes user bob"):
            await _tools(clients)["list_pods"].handler({}, ToolContext(CLUSTER, "shop"))
    finally:
        clients.close()


async def test_a_roles_identity_from_config_reaches_the_cluster_and_the_audit(
    world: World,
) -> None:
    """roles.operator.kubernetes.impersonate: the turn's reads, the preview, the approved
    write all act as that identity; the card and the write audit name it."""
    await world.start_bot(
        {
            "roles": {
                "operator": {
                    "kubernetes": {"impersonate": {"user": "alice", "groups": ["oncall", "sre"]}}
                }
            }
        }
    )
    mention, card = await propose_scale(world, then="Scaled.")
    assert "as Kubernetes user alice (groups oncall, sre)" in card_text(card)
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    deployment = world.kube.get("Deployment", "shop", "checkout-api")
    assert deployment is not None and deployment["spec"]["replicas"] == 5
    assert world.kube.requests
    assert {r.acting_as for r in world.kube.requests} == {("alice", ("oncall", "sre"))}
    audits = await WriteAuditRepository(world.bots[0].db).all()
    outcome = next(a for a in audits if a.phase == "outcome")
    assert outcome.ok and str(outcome.result).endswith(
        "(as Kubernetes user alice (groups oncall, sre))"
    )


@pytest.mark.realkube
async def test_kelpies_service_account_impersonates_through_the_shipped_rbac(
    realkube: tuple[RealKube, Admin], tmp_path: Path
) -> None:
    """deploy/base/rbac-*.yaml as shipped, bound to the ServiceAccount kelpie/kelpie, with that
    ServiceAccount's own token: the config example's identity works, any other is refused
    with the sentence that names the missing grant."""
    cluster, admin = realkube
    for doc in yaml.safe_load_all(IMPERSONATE_RBAC.read_text()):
        admin.grant(doc)
    namespace = admin.namespace()
    reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    }
    admin.grant(reader)
    admin.grant(binding(reader, {"kind": "Group", "name": "sre-oncall"}, namespace))
    pod = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "app", "image": "a:1"}]}}
    admin.core.create_namespaced_pod(namespace, pod)
    clients = KubeClients.build(
        [(CLUSTER, str(_service_account_kubeconfig(cluster, admin, tmp_path)), None, False)]
    )
    list_pods = _tools(clients)["list_pods"]
    try:
        example = KubeIdentity("oncall-operator", ("sre-oncall",))
        listed = await list_pods.handler({}, ToolContext(CLUSTER, namespace, example))
        assert listed.acting_as == "Kubernetes user oncall-operator (groups sre-oncall)"
        assert listed.text.startswith(f"1 pod in namespace {namespace}") and "web" in listed.text
        with pytest.raises(KubeFailure) as refused:
            await list_pods.handler({}, ToolContext(CLUSTER, namespace, KubeIdentity("alice")))
        assert str(refused.value) == (
            "kelpie's service account (Kubernetes user system:serviceaccount:kelpie:kelpie) "
            f"may not impersonate user alice, so it could not list pods in namespace {namespace}; "
            'grant impersonate on users "alice" to it (as deploy/base/rbac-impersonate.yaml does).'
        )
    finally:
        clients.close()


def _service_account_kubeconfig(cluster: RealKube, admin: Admin, tmp_path: Path) -> Path:
    """A kubeconfig with the token of ServiceAccount kelpie/kelpie (made by the controller)."""

    def token() -> str | None:
        account = admin.json(admin.core.read_namespaced_service_account, "kelpie", "kelpie")
        secrets = (account or {}).get("secrets") or []
        if not secrets:
            return None
        secret = admin.json(admin.core.read_namespaced_secret, secrets[0]["name"], "kelpie")
        encoded = ((secret or {}).get("data") or {}).get("token")
        return base64.b64decode(encoded).decode() if encoded else None

    config = yaml.safe_load(cluster.kubeconfig("kelpie").read_text())
    config["users"][0]["user"]["token"] = eventually("kelpie's ServiceAccount token", token)
    path = tmp_path / "service-account.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_reads_are_audited_with_the_identity_the_cluster_saw(world: World) -> None:
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_tool_calls([("list_deployments", {"namespace": "shop"})])
    world.model.reply_text("Listed.")
    bot = await world.start_bot(
        {"roles": {"operator": {"kubernetes": {"impersonate": {"user": "alice"}}}}}
    )
    mention = await world.mention(OPS_CHANNEL, CAROL, "what runs in shop?")
    await wait_said(world, mention["ts"], "Listed.")
    await world.drain()
    reads = [r for r in world.kube.requests if r.method == "GET"]
    assert reads and {r.acting_as for r in reads} == {("alice", ())}
    session = await bot.sessions.find(f"T0TEST:{OPS_CHANNEL}:{mention['ts']}")
    assert session is not None
    audit = await ToolAuditRepository(bot.db).for_session(session.id)
    executed = [(row.tool, row.reason) for row in audit if row.stage == "execute"]
    assert executed == [
        ("read/list_pods", "ok (as Kubernetes user alice)"),
        ("read/list_deployments", "ok (as Kubernetes user alice)"),
    ]


async def test_reads_without_a_role_identity_are_audited_as_kelpies_own(world: World) -> None:
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_text("Listed.")
    bot = await world.start_bot()
    mention = await world.mention(OPS_CHANNEL, CAROL, "pods?")
    await wait_said(world, mention["ts"], "Listed.")
    await world.drain()
    assert {r.acting_as for r in world.kube.requests} == {(None, ())}
    session = await bot.sessions.find(f"T0TEST:{OPS_CHANNEL}:{mention['ts']}")
    assert session is not None
    audit = await ToolAuditRepository(bot.db).for_session(session.id)
    assert [row.reason for row in audit if row.stage == "execute"] == [
        "ok (as kelpie's own Kubernetes identity)"
    ]


def test_an_impersonation_without_a_user_is_a_config_error() -> None:
    with pytest.raises(ValidationError):
        RoleConfig.model_validate({"tools": ["read/*"], "kubernetes": {"impersonate": {}}})
    with pytest.raises(ValidationError):
        RoleConfig.model_validate(
            {"tools": ["read/*"], "kubernetes": {"impersonate": {"user": "a", "group": "x"}}}
        )
