"""Whole-bot scenarios on the real kube-apiserver (`-m realkube`): a person asks in Slack, the
scripted model calls the tools, and kelpie runs them with its least-privilege kubeconfig
(the shipped ClusterRole and the aggregated custom-kinds one) against the real server.

Each scenario asserts what the model server received as tool results and what the person
sees in the thread. The cluster is seeded once for the module with the helpers the
tool-level realkube tests use; the tier has no kubelet, so pod and node statuses are written
through the status subresource.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.realkube.backends import RealBackend
from tests.realkube.cluster import Admin, RealKube, eventually
from tests.realkube.seeding import (
    crash_looping,
    grant_custom_kinds,
    real_node,
    real_pod,
    roll,
    seed_kinds,
)
from tests.world import ALICE, SHOP_CHANNEL, World

pytestmark = pytest.mark.realkube

SECRET_REFUSAL = "kelpie never reads Secrets, not even their names; ask a person with access."
REAL_IMAGE = "registry.example.com/web"
FORBIDDEN = "payments"  # a namespace the shop-only channel may not touch


@dataclass(frozen=True)
class Seeded:
    cluster: RealKube
    admin: Admin
    ns: str
    node: str


def _seed_payments(admin: Admin) -> None:
    try:
        admin.namespace(FORBIDDEN, wait=False)
    except ApiException as exc:
        if exc.status != 409:
            raise
    ledger = {"metadata": {"name": "payments-ledger"}, "data": {"IBAN": "DE89370400440532013000"}}
    try:
        admin.core.create_namespaced_config_map(FORBIDDEN, ledger)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _seed_diagnoses(real: RealBackend, node: str) -> None:
    """A node under memory pressure, two crash-looping pods on it, and a Service selecting
    only them: the endpoints controller lists them as not ready."""
    admin, ns = real.admin, real.namespace
    real_node(admin, node)
    for i, name in enumerate(("api-1", "api-2")):
        real_pod(admin, ns, name, node=node, labels={"app": "api"})
        status = crash_looping(ns, name)
        status["status"]["podIP"] = f"10.244.1.{i + 10}"  # the endpoints controller needs one
        admin.core.patch_namespaced_pod_status(name, ns, status)
    service = {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]}
    admin.core.create_namespaced_service(ns, {"metadata": {"name": "api"}, "spec": service})
    eventually(
        "the endpoints of api",
        lambda: any(
            s.get("notReadyAddresses")
            for s in (admin.json(admin.core.read_namespaced_endpoints, "api", ns) or {}).get(
                "subsets"
            )
            or []
        ),
    )


@pytest.fixture(scope="module")
def seeded(realkube: tuple[RealKube, Admin]) -> Iterator[Seeded]:
    cluster, admin = realkube
    real = RealBackend(cluster, admin)
    node = real.node_name("pressed")
    try:
        seed_kinds(admin, real.namespace)
        grant_custom_kinds(real)
        real.deployment("web", replicas=1, image=f"{REAL_IMAGE}:1")
        roll(real, "web", f"{REAL_IMAGE}:2", "release 2: new cart", 2)
        roll(real, "web", f"{REAL_IMAGE}:3", "release 3: hotfix", 3)
        _seed_diagnoses(real, node)
        _seed_payments(admin)
        yield Seeded(cluster, admin, real.namespace, node)
    finally:
        real.close()
        try:
            admin.core.delete_node(node)
        except ApiException as exc:
            if exc.status != 404:
                raise


def on_the_real_cluster(seeded: Seeded, role: str = "viewer") -> dict[str, Any]:
    """The bot's config pointed at the real server with kelpie's own kubeconfig; the shop
    channel's default namespace is the seeded one, its role `viewer` (every namespace) or
    `shop-only` (that namespace alone)."""
    cluster = {
        "name": "prod",
        "kubeconfig": str(seeded.cluster.kubeconfig("kelpie")),
        "description": "real kube-apiserver",
    }
    return {
        "kubernetes": {"clusters": [cluster]},
        "roles": {
            "shop-only": {
                "tools": ["present/*", "read/*", "diagnose/*"],
                "namespaces": [seeded.ns],
            }
        },
        "channels": [{"match": {"id": SHOP_CHANNEL}, "role": role, "namespace": seeded.ns}],
    }


async def ask(world: World, override: dict[str, Any], question: str) -> list[str]:
    """Start kelpie with `override` and ask in the shop channel; answers the texts of the
    bot's messages in the thread."""
    await world.start_bot(override)
    mention = await world.mention(SHOP_CHANNEL, ALICE, question)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    return [m.text for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]


def script(world: World, calls: list[tuple[str, dict[str, Any]]], answer: str) -> None:
    """One tool call per round (what kelpie accepts of a model without parallel calls),
    then the answer."""
    for call in calls:
        world.model.reply_tool_calls([call])
    world.model.reply_text(answer)


def tool_results(world: World) -> list[str]:
    """The tool results the model server received, in call order (its last request holds
    them all)."""
    last = world.model.requests[-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def kinds_read(ns: str, statefulset: str, cronjobs: str, gadget: str) -> None:
    """A StatefulSet and a custom resource as YAML, the CronJob in a table."""
    assert statefulset.startswith("[E1] apiVersion: apps/v1\nkind: StatefulSet\n")
    assert f"  name: ledger\n  namespace: {ns}\n" in statefulset
    assert "  replicas: 2\n" in statefulset and "  serviceName: ledger\n" in statefulset
    assert "managedFields" not in statefulset
    # v1.20 serves CronJob as batch/v1beta1 only: discovery found it.
    lines = cronjobs.splitlines()
    assert lines[0] == f"[E2] 1 CronJob in namespace {ns}"
    assert lines[2].startswith("cleanup  */10 * * * *  False")
    assert gadget.startswith("[E3] apiVersion: example.com/v1\nkind: Gadget\n")
    assert "  name: sprocket\n" in gadget and gadget.endswith("\nspec:\n  size: 3")


def changes_read(ns: str, history: str, timeline: str) -> None:
    """The rollout's image difference and the timeline of its rollouts."""
    lines = history.splitlines()
    assert lines[0] == f"[E4] Deployment {ns}/web: 3 revisions, current 3"
    assert lines[2].startswith("3 (current)") and lines[2].endswith("release 3: hotfix")
    assert lines[4].startswith("1 ") and f"{REAL_IMAGE}:1" in lines[4]
    assert "Pod template difference, revision 2 → revision 3:" in lines
    assert f"-  - image: {REAL_IMAGE}:2" in lines and f"+  - image: {REAL_IMAGE}:3" in lines
    rows = timeline.splitlines()
    assert rows[0].startswith(f"[E5] What changed in namespace {ns}, ")
    rollouts = [r.split("  rollout  ")[1] for r in rows if "  rollout  " in r]
    web = [r.rsplit(" [", 1) for r in rollouts if r.startswith("Deployment web ")]
    assert [entry for entry, _ in web] == [  # newest first, each with its images and cause
        f"Deployment web revision 3: {REAL_IMAGE}:2 → {REAL_IMAGE}:3 (release 3: hotfix)",
        f"Deployment web revision 2: {REAL_IMAGE}:1 → {REAL_IMAGE}:2 (release 2: new cart)",
        f"Deployment web revision 1: {REAL_IMAGE}:1",
    ]
    assert all(source.startswith(f"ReplicaSet {ns}/web-") for _, source in web)
    assert any(r.startswith("StatefulSet ledger revision 1: ") for r in rollouts)
    assert any("  scale    Deployment web: ScalingReplicaSet" in r for r in rows)


async def test_a_shop_question_reads_every_kind_history_and_timeline(
    world: World, seeded: Seeded
) -> None:
    ns = seeded.ns
    script(
        world,
        [
            ("get_resource", {"kind": "StatefulSet", "name": "ledger"}),
            ("list_resources", {"kind": "CronJob"}),
            ("get_resource", {"kind": "Gadget", "name": "sprocket"}),
            ("rollout_history", {"kind": "Deployment", "name": "web"}),
            ("what_changed", {"window": "1h"}),
        ],
        "ledger runs 2 replicas [E1], cleanup every 10 min [E2], sprocket size 3 [E3]; "
        "web is on image 3 after a hotfix [E4], rolled twice this hour [E5].",
    )
    thread = await ask(world, on_the_real_cluster(seeded), "what changed in the shop?")

    statefulset, cronjobs, gadget, history, timeline = tool_results(world)
    kinds_read(seeded.ns, statefulset, cronjobs, gadget)
    changes_read(seeded.ns, history, timeline)

    progress, answer = thread
    assert (
        f"• `rollout_history` kind=Deployment name=web ✓ Deployment {ns}/web: 3 revisions, "
        "current 3" in progress
    )
    assert "evidence E1, E2, E3, E4, E5" in progress
    assert answer == (
        "ledger runs 2 replicas [E1], cleanup every 10 min [E2], sprocket size 3 [E3]; "
        "web is on image 3 after a hotfix [E4], rolled twice this hour [E5]."
    )


def pod_service_node_diagnosed(
    seeded: Seeded, pod: list[str], service: list[str], pressed: list[str]
) -> None:
    ns, node = seeded.ns, seeded.node
    assert pod[0] == f"[E1] Diagnosis of pod {ns}/api-1: 1 finding (1 critical)."
    assert pod[2:4] == [
        f"1. [critical] CrashLoopBackOff Pod {ns}/api-1: container app keeps crashing: "
        "last exit code 1 (Error), 7 restarts",
        "   evidence: status.containerStatuses[app].state.waiting.reason=CrashLoopBackOff",
    ]
    # No kubelet serves logs in this tier: said as not checked, never guessed.
    assert pod[1].startswith("Not checked: previous logs of app in pod api-1 (")
    assert service[0] == f"[E2] Diagnosis of service {ns}/api: 1 finding (1 critical)."
    assert service[1] == (
        f"1. [critical] NoReadyEndpoints Service {ns}/api: no ready endpoints: 2 pods "
        "selected, 2 not ready"
    )
    assert pressed[0] == f"[E3] Diagnosis of node {node}: 1 finding (1 warning)."
    assert pressed[1:3] == [
        f"1. [warning] MemoryPressure Node {node}: MemoryPressure: kubelet has insufficient "
        "memory available",
        "   evidence: status.conditions[MemoryPressure].status=True",
    ]


def workload_and_namespace_diagnosed(ns: str, web: list[str], scan: list[str]) -> None:
    assert web[0] == f"[E4] Diagnosis of deployment {ns}/web: 3 findings (1 critical, 2 warning)."
    assert f"1. [critical] UnavailableReplicas Deployment {ns}/web: 0/1 replicas available" in web
    assert scan[0] == f"[E5] Diagnosis of namespace {ns}: 8 findings (5 critical, 3 warning)."
    # v1.20 serves no autoscaling/v2: what could not be checked is said, not claimed.
    assert scan[1].startswith(f"Not checked: horizontalpodautoscalers in namespace {ns} (")
    ranked = [line.split(" ", 3)[1:3] for line in scan if line[:1].isdigit()]
    assert ranked == [
        ["[critical]", "CrashLoopBackOff"],
        ["[critical]", "CrashLoopBackOff"],
        ["[critical]", "UnavailableReplicas"],
        ["[critical]", "UnavailableReplicas"],
        ["[critical]", "NoReadyEndpoints"],
        ["[warning]", "NotScheduled"],
        ["[warning]", "NotScheduled"],
        ["[warning]", "NotScheduled"],
    ]


async def test_each_diagnosis_on_the_real_server(world: World, seeded: Seeded) -> None:
    script(
        world,
        [
            ("diagnose_pod", {"name": "api-1"}),
            ("diagnose_service", {"name": "api"}),
            ("diagnose_node", {"name": seeded.node}),
            ("diagnose_workload", {"kind": "Deployment", "name": "web"}),
            ("diagnose_namespace", {}),
        ],
        "api-1 crash-loops [E1], so api has no ready endpoints [E2]; its node is short of "
        "memory [E3]; web has no available replica [E4]; worst first: [E5].",
    )
    thread = await ask(world, on_the_real_cluster(seeded), "what is broken in the shop?")

    node = seeded.node
    pod, service, pressed, web, scan = [r.splitlines() for r in tool_results(world)]
    pod_service_node_diagnosed(seeded, pod, service, pressed)
    workload_and_namespace_diagnosed(seeded.ns, web, scan)

    progress, answer = thread
    assert f"• `diagnose_node` name={node} ✓ Diagnosis of node {node}: 1 finding" in progress
    assert "evidence E1, E2, E3, E4, E5" in progress
    assert answer == (
        "api-1 crash-loops [E1], so api has no ready endpoints [E2]; its node is short of "
        "memory [E3]; web has no available replica [E4]; worst first: [E5]."
    )


def secret_access(seeded: Seeded) -> dict[str, bool]:
    """What the API server says kelpie's own identity may do with Secrets (a
    SelfSubjectAccessReview sent with kelpie's kubeconfig)."""
    api = config.new_client_from_config(
        config_file=str(seeded.cluster.kubeconfig("kelpie")), persist_config=False
    )
    try:
        reviews = client.AuthorizationV1Api(api)
        allowed = {}
        for verb in ("get", "list", "watch"):
            for namespace in (seeded.ns, None):
                attributes = {"verb": verb, "resource": "secrets"}
                attributes |= {"namespace": namespace} if namespace else {}
                review = reviews.create_self_subject_access_review(
                    {"spec": {"resourceAttributes": attributes}}
                )
                allowed[f"{verb} in {namespace or 'all namespaces'}"] = review.status.allowed
        return allowed
    finally:
        api.close()


SECRET_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_resource", {"kind": "Secret", "name": "default-token"}),
    ("list_resources", {"kind": "secrets"}),
    ("list_resources", {"kind": "v1/Secret", "namespace": "*"}),
]


async def test_no_secret_is_read_even_with_the_firewalls_kind_rule_removed(
    world: World, seeded: Seeded
) -> None:
    """An operator who empties the firewall's deny lists still gets the tool's own refusal
    sentence, not a 403: the call never reaches the server, where kelpie's identity has no
    Secret RBAC (the server's audit is not available in this tier)."""
    assert set(secret_access(seeded).values()) == {False}
    script(world, SECRET_CALLS, "I cannot read Secrets.")
    firewall_off = {"firewall": {"deny_kinds": [], "deny_namespaces": []}}
    override = on_the_real_cluster(seeded) | firewall_off
    progress, answer = await ask(world, override, "show me the secrets")
    results = tool_results(world)
    assert results == [
        f"Error: get_resource failed: {SECRET_REFUSAL}",
        f"Error: list_resources failed: {SECRET_REFUSAL}",
        f"Error: list_resources failed: {SECRET_REFUSAL}",
    ]
    assert (
        f"• `list_resources` kind=v1/Secret ns=* ✗ list_resources failed: {SECRET_REFUSAL}"
        in progress
    )
    assert "403" not in progress and "evidence" not in progress
    assert answer == "I cannot read Secrets."


async def test_secrets_and_other_namespaces_stay_out_of_reach(world: World, seeded: Seeded) -> None:
    script(
        world,
        [
            ("list_resources", {"kind": "StatefulSet"}),  # its own namespace: read
            *SECRET_CALLS[:2],
            ("list_resources", {"kind": "ConfigMap", "namespace": FORBIDDEN}),
            (
                "get_resource",
                {"kind": "ConfigMap", "name": "payments-ledger", "namespace": FORBIDDEN},
            ),
            ("list_resources", {"kind": "Pod", "namespace": "kube-system"}),
        ],
        "I may not read those.",
    )
    # Six calls and the answer: one round more than a low-tier model gets by default (6).
    override = on_the_real_cluster(seeded, "shop-only") | {"agent": {"max_iterations": 8}}
    thread = await ask(world, override, "show me the secrets and the payments config")

    ns = seeded.ns
    firewall = "Denied by firewall: kind={} names Secret objects, a denied kind for every channel."
    role = "Denied by channel role: channel role shop-only may not touch namespace {} "
    role += f"(allowed: {ns})."
    not_run = " The call was not run."
    own, *denied = tool_results(world)
    assert own.startswith(f"[E1] 1 StatefulSet in namespace {ns}\n") and "\nledger " in own
    assert denied == [
        firewall.format("Secret") + not_run,
        firewall.format("secrets") + not_run,
        role.format(FORBIDDEN) + not_run,
        role.format(FORBIDDEN) + not_run,
        role.format("kube-system") + not_run,
    ]
    # Nothing from payments reached the model in any request (its ConfigMap's value).
    assert "DE89370400440532013000" not in json.dumps(world.model.requests)
    progress, answer = thread
    assert (
        "• `get_resource` kind=ConfigMap name=payments-ledger ns=payments ⛔ denied by channel "
        f"role: channel role shop-only may not touch namespace payments (allowed: {ns})"
    ) in progress
    assert answer == "I may not read those."


async def test_a_custom_kind_the_firewall_denies_is_denied_in_every_spelling(
    world: World, seeded: Seeded
) -> None:
    """`deny_kinds: [Gadget.example.com]`: kelpie's RBAC may read gadgets, the firewall
    keeps them out of every channel, whatever the spelling."""
    script(
        world,
        [
            ("get_resource", {"kind": "Gadget", "name": "sprocket"}),
            ("list_resources", {"kind": "example.com/v1/Gadget"}),
        ],
        "Gadgets are off limits here.",
    )
    firewall = {"firewall": {"deny_kinds": ["Secret", "Gadget.example.com"]}}
    progress, answer = await ask(world, on_the_real_cluster(seeded) | firewall, "any gadgets?")
    denied = "a denied kind for every channel. The call was not run."
    assert tool_results(world) == [
        f"Denied by firewall: get_resource touches Gadget.example.com objects, {denied}",
        "Denied by firewall: kind=example.com/v1/Gadget names Gadget.example.com objects, "
        + denied,
    ]
    assert (
        "• `get_resource` kind=Gadget name=sprocket ⛔ denied by firewall: get_resource "
        "touches Gadget.example.com objects, a denied kind for every channel"
    ) in progress
    assert "size: 3" not in json.dumps(world.model.requests)
    assert answer == "Gadgets are off limits here."
