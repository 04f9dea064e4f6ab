"""The generic and usage toolsets against the fake API server: any kind the cluster serves
(built-in or custom, namespaced or not) listed and read; Secrets never requested; ConfigMap
values masked; the role's namespaces and the firewall hold through the pipeline for kinds
resolved at run time; top_pods/top_nodes with and without a metrics API; pod_logs'
previous, since and container.

One server per module (seeded once); tests that change what it serves put it back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from bot.config import FirewallConfig, RoleConfig
from bot.pipeline.decision import CallScope, ToolInvocation
from bot.pipeline.firewall import FirewallStage
from bot.pipeline.flow import Pipeline, RoleGateStage
from bot.pipeline.tail import ExecuteStage
from bot.pipeline.targets import ResolvedTargets
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.discovery import Discovery
from bot.toolsets.kube.generic import FETCH_LIMIT, MAX_ROWS, MAX_YAML_CHARS, generic_tools
from bot.toolsets.kube.read import read_tools
from bot.toolsets.spec import Tool, ToolArgumentError, ToolContext, ToolFailure
from bot.values import ToolOutcome, ToolStatus, WriteOutcome
from tests.peers.kube_server import Demo, KubeServer

pytestmark = pytest.mark.asyncio(loop_scope="module")

CTX = ToolContext(cluster="prod", default_namespace="shop")
SECRET_SPELLINGS = [
    "secrets",
    "Secret",
    "secret",
    "SECRETS",
    "v1/Secret",
    "/v1/secrets",
    "core/v1/Secret",
    "secrets.v1.",
    "Secret.core",
]


class World:
    def __init__(self, kube: KubeServer, clients: KubeClients, demo: Demo) -> None:
        self.kube, self.clients, self.demo = kube, clients, demo
        self.tools = {t.name: t for t in read_tools(clients)}

    async def run(self, name: str, args: dict[str, Any], context: ToolContext = CTX) -> str:
        return (await self.tools[name].handler(args, context)).text

    def requests_since(self, mark: int) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.kube.requests[mark:]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    kube = KubeServer()
    await kube.start()
    demo = kube.seed_demo()
    kube.add_statefulset("shop", "orders-db", replicas=3, ready=2)
    kube.add_cronjob("shop", "nightly-report", schedule="0 3 * * *")
    kube.add_job("shop", "nightly-report-2891", succeeded=1)
    kube.add_configmap("shop", "checkout-config", {"DB_PASSWORD": "hunter2", "LOG_LEVEL": "info"})
    kube.add_secret("shop", "db-credentials", {"password": "hunter2"})
    kube.install_crd("example.com", "Gadget", "gadgets")
    kube.add_custom(
        "example.com",
        "gadgets",
        {"metadata": {"name": "sprocket", "namespace": "shop"}, "spec": {"size": 3}}
        | {"status": {"phase": "Spinning"}},
    )
    kube.install_crd("example.com", "Widget", "widgets", namespaced=False)
    kube.add_custom("example.com", "widgets", {"metadata": {"name": "global-w"}, "spec": {}})
    hpa_spec = {"scaleTargetRef": {"kind": "Deployment", "name": "checkout-api"}}
    hpa_spec |= {"minReplicas": 2, "maxReplicas": 6}
    kube.put(
        "HorizontalPodAutoscaler",
        {"metadata": {"name": "checkout-api", "namespace": "shop"}, "spec": hpa_spec}
        | {"status": {"currentReplicas": 6, "desiredReplicas": 6}},
    )
    rule = {"host": "shop.example.com", "http": {"paths": []}}
    kube.put(
        "Ingress",
        {"metadata": {"name": "shop", "namespace": "shop"}, "spec": {"rules": [rule]}}
        | {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}},
    )
    kube.add_namespace("bulk")
    for i in range(MAX_ROWS + 12):
        kube.add_configmap("bulk", f"cm-{i:03d}", {"k": "v"})
    path = kube.write_kubeconfig(tmp_path_factory.mktemp("generic") / "kubeconfig")
    clients = KubeClients.build([("prod", str(path), None, False)], request_timeout=5)
    yield World(kube, clients, demo)
    clients.close()
    await kube.stop()


# --- any kind, listed and read --------------------------------------------------------


async def test_a_statefulset_listed_and_read(world: World) -> None:
    text = await world.run("list_resources", {"kind": "StatefulSet"})
    assert text.splitlines()[0] == "1 StatefulSet in namespace shop"
    assert text.splitlines()[1].split() == ["NAME", "READY", "AGE"]
    assert text.splitlines()[2].split()[:2] == ["orders-db", "2/3"]
    same = await world.run("list_resources", {"kind": "apps/v1/statefulsets"})
    assert same == text
    yaml_text = await world.run("get_resource", {"kind": "sts", "name": "orders-db"})
    assert yaml_text.startswith("apiVersion: apps/v1\nkind: StatefulSet\n")
    assert "readyReplicas: 2" in yaml_text and "managedFields" not in yaml_text


async def test_a_cronjob_and_a_job(world: World) -> None:
    text = await world.run("list_resources", {"kind": "cronjobs"})
    header, row = text.splitlines()[1:3]
    assert header.split()[:3] == ["NAME", "SCHEDULE", "SUSPEND"]
    assert row.startswith("nightly-report") and "0 3 * * *" in row and "3m ago" in row
    jobs = await world.run("list_resources", {"kind": "batch/v1/Job"})
    assert jobs.splitlines()[2].split()[:2] == ["nightly-report-2891", "Complete"]


async def test_an_hpa_and_an_ingress_show_their_useful_columns(world: World) -> None:
    hpa = (await world.run("list_resources", {"kind": "hpa"})).splitlines()
    assert hpa[1].split()[:5] == ["NAME", "REFERENCE", "MIN", "MAX", "REPLICAS"]
    assert hpa[2].split()[:5] == ["checkout-api", "Deployment/checkout-api", "2", "6", "6"]
    ingress = (await world.run("list_resources", {"kind": "Ingress"})).splitlines()
    assert ingress[2].split()[:3] == ["shop", "shop.example.com", "203.0.113.7"]


async def test_a_custom_resource_listed_and_read(world: World) -> None:
    for spelling in ("Gadget", "gadgets", "gadgets.example.com", "example.com/v1/Gadget"):
        text = await world.run("list_resources", {"kind": spelling})
        assert text.splitlines()[0] == "1 Gadget in namespace shop", spelling
        assert text.splitlines()[2].split()[0] == "sprocket"
    got = await world.run("get_resource", {"kind": "Gadget", "name": "sprocket"})
    assert got.startswith("apiVersion: example.com/v1\nkind: Gadget\n")
    assert "phase: Spinning" in got and "size: 3" in got
    assert "managedFields" not in got and "kubectl-client-side-apply" not in got
    with pytest.raises(ToolFailure, match=r"Cluster prod serves no kind 'example.com/v2/Gadget'"):
        await world.run("list_resources", {"kind": "example.com/v2/Gadget"})


async def test_a_cluster_scoped_kind_ignores_the_namespace(world: World) -> None:
    text = await world.run("list_resources", {"kind": "widgets"})
    assert text.splitlines()[0] == "1 Widget (cluster-scoped)"
    mark = len(world.kube.requests)
    nodes = await world.run("list_resources", {"kind": "Node"})
    assert nodes.splitlines()[0] == "2 Nodes (cluster-scoped)"
    assert "GET /api/v1/nodes" in world.requests_since(mark)
    got = await world.run("get_resource", {"kind": "Widget", "name": "global-w"})
    assert "name: global-w" in got and "namespace" not in got


async def test_listing_across_namespaces_names_them(world: World) -> None:
    text = await world.run("list_resources", {"kind": "deployments", "namespace": "*"})
    assert text.splitlines()[1].split()[:3] == ["NAME", "NAMESPACE", "READY"]
    assert any(line.split()[:2] == ["coredns", "kube-system"] for line in text.splitlines())


async def test_a_long_listing_is_capped_with_a_narrowing_note(world: World) -> None:
    text = await world.run("list_resources", {"kind": "ConfigMap", "namespace": "bulk"})
    lines = text.splitlines()
    assert lines[0] == f"{MAX_ROWS + 12} ConfigMaps in namespace bulk"
    assert len(lines) == 1 + 1 + MAX_ROWS + 1
    assert lines[-1] == (
        "… and 12 more configmaps not shown; narrow your call with a namespace, "
        "label_selector or field_selector."
    )


async def test_env_values_that_look_secret_are_masked(world: World) -> None:
    pod = world.kube.get("Pod", "shop", world.demo.healthy_pods[0])
    assert pod is not None
    env = pod["spec"]["containers"][0]["env"]
    env.append({"name": "DB_PASSWORD", "value": "hunter2"})
    world.kube.put("Pod", pod)
    text = await world.run("get_resource", {"kind": "Pod", "name": world.demo.healthy_pods[0]})
    assert "hunter2" not in text and "value: '[MASKED]'" in text
    assert "value: info" in text and "name: db-credentials" in text  # a reference, not a value


async def test_a_listing_past_one_page_counts_what_the_server_counts(world: World) -> None:
    world.kube.add_namespace("paged")
    for i in range(FETCH_LIMIT + 20):
        world.kube.put(
            "ConfigMap",
            {"metadata": {"name": f"p-{i:04d}", "namespace": "paged", "labels": {"tier": "x"}}},
        )
    lines = (await world.run("list_resources", {"kind": "cm", "namespace": "paged"})).splitlines()
    assert lines[0] == f"{FETCH_LIMIT + 20} ConfigMaps in namespace paged"
    assert lines[-1].startswith(f"… and {FETCH_LIMIT + 20 - MAX_ROWS} more configmaps not shown")
    assert world.kube.requests[-1].query["limit"] == str(FETCH_LIMIT)
    selected = await world.run(
        "list_resources", {"kind": "cm", "namespace": "paged", "label_selector": "tier=x"}
    )
    assert selected.splitlines()[0] == f"more than {FETCH_LIMIT} ConfigMaps in namespace paged"
    assert selected.splitlines()[-1] == (
        f"… and more configmaps beyond the first {MAX_ROWS} (the server did not count them); "
        "narrow your call with a namespace, label_selector or field_selector."
    )


async def test_configmap_values_are_masked(world: World) -> None:
    text = await world.run("get_resource", {"kind": "cm", "name": "checkout-config"})
    assert "hunter2" not in text
    assert "DB_PASSWORD: [MASKED]" in text and "LOG_LEVEL: info" in text
    listed = await world.run("list_resources", {"kind": "configmaps"})
    assert "hunter2" not in listed and "checkout-config  2" in listed


@pytest.mark.parametrize("spelling", SECRET_SPELLINGS)
async def test_secrets_are_refused_before_any_request(world: World, spelling: str) -> None:
    mark = len(world.kube.requests)
    for name, args in (
        ("list_resources", {"kind": spelling}),
        ("list_resources", {"kind": spelling, "namespace": "*"}),
        ("get_resource", {"kind": spelling, "name": "db-credentials"}),
    ):
        with pytest.raises(ToolFailure) as refused:
            await world.run(name, args)
        assert str(refused.value) == (
            "kelpie never reads Secrets, not even their names; ask a person with access."
        )
    assert world.requests_since(mark) == []
    assert not [r for r in world.kube.requests if "secrets" in r.path]


async def test_unreadable_kind_words_are_one_sentence(world: World) -> None:
    with pytest.raises(ToolArgumentError, match="is not a kind such as StatefulSet"):
        await world.run("list_resources", {"kind": "a/b/c/d"})


async def test_discovery_is_cached_per_cluster_until_its_ttl(world: World) -> None:
    now = [1000.0]
    tools = {
        t.name: t for t in generic_tools(world.clients, Discovery(ttl_s=60, clock=lambda: now[0]))
    }

    def discoveries(mark: int) -> int:
        return sum(1 for r in world.requests_since(mark) if r in ("GET /api", "GET /apis"))

    mark = len(world.kube.requests)
    await tools["list_resources"].handler({"kind": "StatefulSet"}, CTX)
    await tools["get_resource"].handler({"kind": "Gadget", "name": "sprocket"}, CTX)
    assert discoveries(mark) == 2  # /api and /apis, once
    now[0] += 61
    await tools["list_resources"].handler({"kind": "StatefulSet"}, CTX)
    assert discoveries(mark) == 4
    # A CRD installed since: a miss in a cache older than refresh_s asks once more.
    world.kube.install_crd("example.org", "Doohickey", "doohickeys")
    doohickey = {"metadata": {"name": "d1", "namespace": "shop"}}
    world.kube.add_custom("example.org", "doohickeys", doohickey)
    with pytest.raises(ToolFailure, match="serves no kind 'Doohickey'"):
        await tools["list_resources"].handler({"kind": "Doohickey"}, CTX)
    assert discoveries(mark) == 4  # the cache is fresh: a typo does not rediscover
    now[0] += 11
    found = await tools["list_resources"].handler({"kind": "Doohickey"}, CTX)
    assert found.summary == "1 Doohickey in namespace shop" and discoveries(mark) == 6


# --- through the pipeline: the role's namespaces and the firewall ------------------------


class _NoWrites:
    async def execute(self, approval: Any) -> WriteOutcome:
        raise AssertionError("no write here")


async def through_pipeline(
    world: World,
    name: str,
    args: dict[str, Any],
    *,
    namespaces: list[str],
    firewall: FirewallConfig | None = None,
    default_namespace: str | None = "shop",
) -> ToolOutcome:
    checks = [RoleGateStage(), FirewallStage(firewall or FirewallConfig())]
    pipeline = Pipeline(checks, [ExecuteStage(_NoWrites(), 10, ResolvedTargets(checks))])
    tool: Tool = world.tools[name]
    scope = CallScope(
        session_id=1,
        session_key="T1:C1:1.0",
        channel_id="C1",
        slack_user="U1",
        role_name="team",
        role=RoleConfig(tools=["read/*"], namespaces=namespaces),
        tool_context=ToolContext("prod", default_namespace),
        offered=frozenset([name]),
    )
    flow = await pipeline.run(ToolInvocation("call-1", tool, args, scope))
    assert flow.outcome is not None
    return flow.outcome


@pytest.mark.parametrize(
    ("name", "args", "reason"),
    [
        (
            "list_resources",
            {"kind": "StatefulSet", "namespace": "team-checkout"},
            "channel role team may not touch namespace team-checkout (allowed: shop)",
        ),
        (
            "get_resource",
            {"kind": "Deployment", "namespace": "team-checkout", "name": "checkout-worker"},
            "channel role team may not touch namespace team-checkout (allowed: shop)",
        ),
        (
            "list_resources",
            {"kind": "Deployment", "namespace": "*"},
            "channel role team may not touch all namespaces (allowed: shop)",
        ),
        # Cluster-scoped: known only after discovery, refused before the request.
        (
            "list_resources",
            {"kind": "Node"},
            "channel role team may not touch cluster-scoped objects (allowed: shop)",
        ),
        (
            "get_resource",
            {"kind": "widgets", "name": "global-w"},
            "channel role team may not touch cluster-scoped objects (allowed: shop)",
        ),
    ],
)
async def test_a_denied_namespace_stays_denied(
    world: World, name: str, args: dict[str, Any], reason: str
) -> None:
    mark = len(world.kube.requests)
    outcome = await through_pipeline(world, name, args, namespaces=["shop"])
    assert outcome.status is ToolStatus.DENIED
    assert outcome.refusal is not None and outcome.refusal.reason == reason
    objects = [r for r in world.requests_since(mark) if not r.startswith("GET /api")]
    assert objects == [], "only discovery may have been asked"
    assert not any(p in r for r in world.requests_since(mark) for p in ("/nodes", "/widgets"))


async def test_the_firewall_zone_holds_for_generic_calls(world: World) -> None:
    outcome = await through_pipeline(
        world,
        "get_resource",
        {"kind": "Deployment", "namespace": "kube-system", "name": "coredns"},
        namespaces=["*"],
    )
    assert outcome.refusal is not None and outcome.refusal.stage == "firewall"
    assert "kube-system is a denied zone" in outcome.refusal.reason
    # The Namespace object of a denied namespace, found only once the kind is resolved.
    walled = await through_pipeline(
        world, "get_resource", {"kind": "ns", "name": "kube-system"}, namespaces=["*"]
    )
    assert walled.refusal is not None and walled.refusal.reason == (
        "namespace kube-system is a denied zone (kube-system) for every channel"
    )
    allowed = await through_pipeline(world, "list_resources", {"kind": "Node"}, namespaces=["*"])
    assert allowed.status is ToolStatus.OK and "2 Nodes (cluster-scoped)" in allowed.content


@pytest.mark.parametrize(
    "spelling", ["Gadget", "gadget", "gadgets", "gadgets.example.com", "example.com/v1/Gadget"]
)
async def test_deny_kinds_holds_a_custom_kind_however_spelt(world: World, spelling: str) -> None:
    firewall = FirewallConfig(deny_kinds=["Secret", "Gadget.example.com"])
    mark = len(world.kube.requests)
    for name, args in (
        ("list_resources", {"kind": spelling}),
        ("get_resource", {"kind": spelling, "name": "sprocket"}),
    ):
        outcome = await through_pipeline(world, name, args, namespaces=["*"], firewall=firewall)
        assert outcome.status is ToolStatus.DENIED
        assert outcome.refusal is not None and outcome.refusal.stage == "firewall"
        assert "Gadget.example.com" in outcome.refusal.reason
    assert not [r for r in world.requests_since(mark) if "/gadgets" in r]
    widgets = await through_pipeline(
        world, "list_resources", {"kind": "Widget"}, namespaces=["*"], firewall=firewall
    )
    assert widgets.status is ToolStatus.OK


async def test_a_plain_denied_kind_holds_in_its_group(world: World) -> None:
    firewall = FirewallConfig(deny_kinds=["Secret", "StatefulSet"])
    outcome = await through_pipeline(
        world, "list_resources", {"kind": "sts"}, namespaces=["*"], firewall=firewall
    )
    assert outcome.refusal is not None
    assert outcome.refusal.reason == (
        "list_resources touches StatefulSet.apps objects, a denied kind for every channel"
    )


async def test_deny_kinds_accepts_kind_dot_group_and_still_catches_typos() -> None:
    assert FirewallConfig(deny_kinds=["Gadget.example.com"]).deny_kinds == ["Gadget.example.com"]
    with pytest.raises(ValueError, match='"Statefulset2" is not a built-in Kubernetes kind'):
        FirewallConfig(deny_kinds=["Statefulset2"])


# --- usage: metrics.k8s.io ---------------------------------------------------------------


async def test_top_without_a_metrics_api_is_one_sentence(world: World) -> None:
    world.kube.drop_metrics()
    sentence = (
        "Cluster prod serves no metrics API (metrics.k8s.io answered 404): install "
        "metrics-server to see cpu and memory usage."
    )
    for name in ("top_pods", "top_nodes"):
        with pytest.raises(ToolFailure) as failure:
            await world.run(name, {})
        assert str(failure.value) == sentence


async def test_top_pods_and_nodes(world: World) -> None:
    crashing, (healthy, other) = world.demo.crashing_pod, world.demo.healthy_pods
    world.kube.set_pod_metrics("shop", crashing, {"app": ("950m", "250Mi")})
    world.kube.set_pod_metrics("shop", healthy, {"app": ("120000000n", "131072Ki")})
    world.kube.set_pod_metrics("shop", other, {"app": ("5m", "300Mi")})
    world.kube.set_pod_metrics("kube-system", "coredns-x", {"coredns": ("3m", "20Mi")})
    world.kube.set_node_metrics("node-a", "1950m", "8Gi")
    world.kube.set_node_metrics("node-b", "390m", "4Gi")
    try:
        text = await world.run("top_pods", {})
        lines = text.splitlines()
        assert lines[0] == "3 pods in namespace shop use 1075m cpu and 678Mi memory"
        assert [line.split() for line in lines[1:]] == [
            ["NAME", "CPU", "MEMORY"],
            [crashing, "950m", "250Mi"],
            [healthy, "120m", "128Mi"],
            [other, "5m", "300Mi"],
        ]
        by_memory = await world.run("top_pods", {"sort_by": "memory"})
        assert by_memory.splitlines()[2].split()[0] == other
        nodes = (await world.run("top_nodes", {})).splitlines()
        assert nodes[0] == "usage of 2 nodes"
        # allocatable: 3900m cpu, 16Gi memory (the fake's nodes)
        assert nodes[2].split() == ["node-a", "1950m", "50%", "8192Mi", "50%"]
        assert nodes[3].split() == ["node-b", "390m", "10%", "4096Mi", "25%"]
    finally:
        world.kube.drop_metrics()


# --- pod_logs: previous, since, container ------------------------------------------------


async def test_pod_logs_previous_since_and_container(world: World) -> None:
    kube = world.kube
    kube.add_pod("shop", "two", containers=("app", "sidecar"), logs="app line\n")
    kube.set_logs("shop", "two", "old\nsidecar recent\n", container="sidecar", seconds_apart=3600)
    kube.set_logs("shop", "two", "sidecar crashed: boom\n", container="sidecar", previous=True)
    recent = await world.run("pod_logs", {"name": "two", "container": "sidecar", "since": "15m"})
    assert recent == "sidecar recent\n"
    assert kube.requests[-1].query["sinceSeconds"] == "900"
    previous = await world.run(
        "pod_logs", {"name": "two", "container": "sidecar", "previous": True}
    )
    assert previous == "sidecar crashed: boom\n"
    with pytest.raises(ToolFailure) as wrong:
        await world.run("pod_logs", {"name": "two", "container": "web"})
    assert str(wrong.value) == "Pod shop/two has no container 'web'; its containers: app, sidecar."
    with pytest.raises(ToolFailure) as never_restarted:
        await world.run("pod_logs", {"name": "two", "container": "app", "previous": True})
    assert str(never_restarted.value) == (
        "Container app of pod shop/two has no previous terminated instance to read (it has "
        "not restarted); read its current logs without previous."
    )
    for bad in ("15", "2 weeks", "8d", "0m"):
        with pytest.raises(ToolArgumentError, match="must be a duration such as"):
            await world.run("pod_logs", {"name": "two", "since": bad})


async def test_without_a_default_namespace_cluster_scoped_kinds_need_none(world: World) -> None:
    """A DM has no namespace: a cluster-scoped kind is read as such; a namespaced kind with
    no namespace would span all of them, which the firewall's zone refuses (resolved)."""
    for name, args in (
        ("list_resources", {"kind": "Node"}),
        ("get_resource", {"kind": "no", "name": "node-a"}),
        ("list_resources", {"kind": "Widget"}),
        ("get_resource", {"kind": "widgets.example.com", "name": "global-w"}),
    ):
        outcome = await through_pipeline(
            world, name, args, namespaces=["*"], default_namespace=None
        )
        assert outcome.status is ToolStatus.OK, (args, outcome.content)
    mark = len(world.kube.requests)
    spanning = await through_pipeline(
        world, "list_resources", {"kind": "StatefulSet"}, namespaces=["*"], default_namespace=None
    )
    assert spanning.refusal is not None and spanning.refusal.stage == "firewall"
    assert spanning.refusal.reason == (
        "list_resources across all namespaces would reach the denied namespace kube-system; "
        "name a namespace"
    )
    assert not [r for r in world.requests_since(mark) if "/statefulsets" in r]


async def test_a_large_object_is_cut_with_a_note(world: World) -> None:
    world.kube.add_configmap("dev-a", "huge", {f"line-{i:04d}": "x" * 40 for i in range(600)})
    result = await world.tools["get_resource"].handler(
        {"kind": "ConfigMap", "name": "huge", "namespace": "dev-a"}, CTX
    )
    assert len(result.text) <= MAX_YAML_CHARS + 100
    assert result.text.splitlines()[-1].startswith(f"[cut at {MAX_YAML_CHARS} of ")
    assert result.summary == "ConfigMap dev-a/huge (cut)"


@pytest.mark.parametrize("deny_kinds", [["Secret"], []])
async def test_secrets_stay_unread_through_the_pipeline_whatever_the_firewall(
    world: World, deny_kinds: list[str]
) -> None:
    """With Secret in deny_kinds the firewall refuses first; with it removed by an operator
    the tool itself still refuses. Either way nothing is requested."""
    firewall = FirewallConfig(deny_kinds=deny_kinds)
    mark = len(world.kube.requests)
    for spelling in SECRET_SPELLINGS:
        for name, args in (
            ("list_resources", {"kind": spelling}),
            ("get_resource", {"kind": spelling, "name": "db-credentials"}),
        ):
            outcome = await through_pipeline(world, name, args, namespaces=["*"], firewall=firewall)
            assert outcome.status is not ToolStatus.OK, (spelling, outcome.content)
            assert "Secret" in outcome.content
    assert world.requests_since(mark) == []
