"""The generic and usage tools on both Kubernetes backends (the fake and a real
kube-apiserver, `-m realkube`), with kelpie's least-privilege identity: the shipped
ClusterRole, plus the aggregated `kelpie-custom-kinds` extended by an operator's labelled
ClusterRole for one CRD, which the test installs.

Kubernetes v1.20 (the real tier) serves CronJob only as batch/v1beta1 and fills in
managedFields: the tools must find the one and drop the other.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import FirewallConfig, RoleConfig
from bot.pipeline.decision import CallScope, ToolInvocation
from bot.pipeline.firewall import FirewallStage
from bot.pipeline.flow import Pipeline, RoleGateStage
from bot.pipeline.tail import ExecuteStage
from bot.pipeline.targets import ResolvedTargets
from bot.toolsets.kube.read import read_tools
from bot.toolsets.spec import Tool, ToolContext, ToolFailure
from bot.values import ToolOutcome, ToolStatus, WriteOutcome
from tests.realkube.backends import CLUSTER, Backend, FakeBackend, RealBackend
from tests.realkube.seeding import grant_custom_kinds, seed_kinds


def _seed(backend: Backend) -> None:
    ns = backend.namespace
    if isinstance(backend, FakeBackend):
        backend.kube.add_statefulset(ns, "ledger", replicas=2, ready=0)
        backend.kube.add_cronjob(ns, "cleanup", schedule="*/10 * * * *")
        backend.kube.install_crd("example.com", "Gadget", "gadgets")
        gadget = {"metadata": {"name": "sprocket", "namespace": ns}, "spec": {"size": 3}}
        backend.kube.add_custom("example.com", "gadgets", gadget)
        return
    assert isinstance(backend, RealBackend)
    seed_kinds(backend.admin, ns)


async def test_a_statefulset_a_cronjob_and_a_custom_resource_with_least_privilege(
    backend: Backend,
) -> None:
    _seed(backend)
    grant_custom_kinds(backend)
    tools: dict[str, Tool] = {t.name: t for t in read_tools(backend.clients)}
    ctx = ToolContext(cluster=CLUSTER, default_namespace=backend.namespace)

    async def run(name: str, args: dict[str, Any]) -> list[str]:
        return (await tools[name].handler(args, ctx)).text.splitlines()

    lines = await run("list_resources", {"kind": "StatefulSet"})
    assert lines[0] == f"1 StatefulSet in namespace {backend.namespace}"
    assert lines[2].split()[:2] == ["ledger", "0/2"]
    got = "\n".join(await run("get_resource", {"kind": "statefulsets", "name": "ledger"}))
    assert "kind: StatefulSet" in got and "replicas: 2" in got and "serviceName: ledger" in got
    assert "managedFields" not in got

    lines = await run("list_resources", {"kind": "CronJob"})
    assert lines[0] == f"1 CronJob in namespace {backend.namespace}"
    assert lines[2].startswith("cleanup") and "*/10 * * * *" in lines[2]
    got = "\n".join(await run("get_resource", {"kind": "cronjob", "name": "cleanup"}))
    assert "kind: CronJob" in got and "*/10 * * * *" in got and "managedFields" not in got

    for spelling in ("Gadget", "gadgets.example.com", "example.com/v1/Gadget"):
        lines = await run("list_resources", {"kind": spelling})
        assert lines[0] == f"1 Gadget in namespace {backend.namespace}", spelling
        assert lines[2].split()[0] == "sprocket"
    got = "\n".join(await run("get_resource", {"kind": "Gadget", "name": "sprocket"}))
    assert got.startswith("apiVersion: example.com/v1\nkind: Gadget\n")
    assert "size: 3" in got and "managedFields" not in got

    # Cluster-scoped: the CRD itself, whatever the channel's namespace.
    lines = await run("list_resources", {"kind": "crd"})
    assert lines[0].endswith("(cluster-scoped)")
    assert any(line.split()[0] == "gadgets.example.com" for line in lines[2:])

    for name, args in (
        ("list_resources", {"kind": "v1/Secret"}),
        ("get_resource", {"kind": "secrets", "name": "anything"}),
    ):
        with pytest.raises(ToolFailure, match="kelpie never reads Secrets"):
            await run(name, args)
    for usage in ("top_pods", "top_nodes"):
        with pytest.raises(ToolFailure, match=r"serves no metrics API \(metrics.k8s.io answered"):
            await run(usage, {})


class _NoWrites:
    async def execute(self, approval: Any) -> WriteOutcome:
        raise AssertionError("no write here")


async def _through_pipeline(
    tool: Tool, args: dict[str, Any], namespace: str, allowed: list[str]
) -> ToolOutcome:
    checks = [RoleGateStage(), FirewallStage(FirewallConfig())]
    pipeline = Pipeline(checks, [ExecuteStage(_NoWrites(), 30, ResolvedTargets(checks))])
    scope = CallScope(
        session_id=1,
        session_key="T1:C1:1.0",
        channel_id="C1",
        slack_user="U1",
        role_name="team",
        role=RoleConfig(tools=["read/*"], namespaces=allowed),
        tool_context=ToolContext(CLUSTER, namespace),
        offered=frozenset([tool.name]),
    )
    flow = await pipeline.run(ToolInvocation("call-1", tool, args, scope))
    assert flow.outcome is not None
    return flow.outcome


async def test_a_role_confined_to_its_namespace_stays_there(backend: Backend) -> None:
    _seed(backend)
    tools: dict[str, Tool] = {t.name: t for t in read_tools(backend.clients)}
    ns = backend.namespace
    mine = await _through_pipeline(
        tools["list_resources"], {"kind": "StatefulSet"}, ns, allowed=[ns]
    )
    assert mine.status is ToolStatus.OK and "ledger" in mine.content
    for name, args, where in (
        ("list_resources", {"kind": "StatefulSet", "namespace": "default"}, "namespace default"),
        (
            "get_resource",
            {"kind": "StatefulSet", "name": "x", "namespace": "default"},
            "namespace default",
        ),
        ("list_resources", {"kind": "StatefulSet", "namespace": "*"}, "all namespaces"),
        ("list_resources", {"kind": "Node"}, "cluster-scoped objects"),
        ("get_resource", {"kind": "crd", "name": "gadgets.example.com"}, "cluster-scoped objects"),
    ):
        outcome = await _through_pipeline(tools[name], args, ns, allowed=[ns])
        assert outcome.status is ToolStatus.DENIED, (args, outcome.content)
        assert outcome.refusal is not None
        assert outcome.refusal.reason == f"channel role team may not touch {where} (allowed: {ns})"
