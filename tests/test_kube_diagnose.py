"""The diagnose toolset: deterministic findings, each resting on one field, as the model
reads them.

Fake tier: one server for the module, a namespace per scenario, the tools built by
`read_tools` and called through their declared handlers (arguments validated as for the
model). Each analyzer gets a scenario asserting the finding line, its severity and the
evidence line the model receives; a healthy namespace has none. The realkube tier writes pod
and node statuses through the status subresource (that server runs no kubelet).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from bot.config import RoleConfig
from bot.pipeline.roles import offered_tools
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.diagnose_analyzers import (
    analyze_claims,
    analyze_hpa,
    analyze_node,
    analyze_pod,
    analyze_service,
    analyze_workload,
)
from bot.toolsets.kube.read import read_tools
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult, ToolScope
from tests.peers.kube_server import KubeServer
from tests.realkube.backends import RealBackend
from tests.realkube.cluster import Admin, RealKube, eventually
from tests.realkube.seeding import crash_looping, real_node, real_pod
from tests.world import ALICE, SHOP_CHANNEL, World

pytestmark = pytest.mark.asyncio(loop_scope="module")

Obj = dict[str, Any]
DIAGNOSE = {
    "diagnose_pod",
    "diagnose_workload",
    "diagnose_service",
    "diagnose_node",
    "diagnose_namespace",
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kube() -> AsyncIterator[KubeServer]:
    server = KubeServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
def clients(kube: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeClients]:
    path = kube.write_kubeconfig(tmp_path_factory.mktemp("diagnose") / "kubeconfig")
    built = KubeClients.build([("prod", str(path), None, False)], request_timeout=5)
    yield built
    built.close()


@pytest.fixture(scope="module")
def tools(clients: KubeClients) -> dict[str, Tool]:
    return {t.name: t for t in read_tools(clients) if t.kind is ToolKind.DIAGNOSE}


@pytest.fixture
def ns(kube: KubeServer) -> str:
    name = f"d-{uuid.uuid4().hex[:8]}"
    kube.add_namespace(name)
    return name


async def diagnose(tools: dict[str, Tool], tool: str, ns: str, **args: Any) -> ToolResult:
    return await tools[tool].handler(args, ToolContext(cluster="prod", default_namespace=ns))


def finding(result: ToolResult, code: str) -> list[str]:
    """The finding line with `code`, its evidence line and its next-step line."""
    lines = result.text.splitlines()
    for index, line in enumerate(lines):
        if line.split(" ", 3)[2:3] == [code]:
            return lines[index : index + 3]
    raise AssertionError(f"no {code} finding in:\n{result.text}")


def codes(result: ToolResult) -> list[str]:
    return [
        line.split(" ", 3)[2]
        for line in result.text.splitlines()
        if line[:1].isdigit() and ". [" in line
    ]


def ready_endpoints(kube: KubeServer, ns: str, service: str) -> list[Obj]:
    """Endpoints of `service` listing its pods (label app=<service>) as ready; answers them."""
    pods = [
        p
        for p in kube.objects("Pod")
        if p["metadata"]["namespace"] == ns and p["metadata"]["labels"].get("app") == service
    ]
    ready = [(p["status"]["podIP"], p["metadata"]["name"]) for p in pods]
    kube.add_endpoints(ns, service, ready=ready)
    return pods


def node_name(base: str) -> str:
    return f"{base}-{uuid.uuid4().hex[:6]}"


# --- the vocabulary ---------------------------------------------------------------------


async def test_the_diagnose_tools_are_declared_as_diagnose_kind(tools: dict[str, Tool]) -> None:
    assert set(tools) == DIAGNOSE
    for tool in tools.values():
        assert tool.pattern_name == f"diagnose/{tool.name}"
        assert tool.parameters["additionalProperties"] is False
        assert "Secret" not in tool.resource_kinds and "\n" not in tool.description
    assert tools["diagnose_node"].scope is ToolScope.CLUSTER
    kinds = tools["diagnose_workload"].parameters["properties"]["kind"]
    assert kinds["enum"] == ["Deployment", "StatefulSet", "DaemonSet", "Job"]


async def test_roles_select_them_with_diagnose_patterns(clients: KubeClients) -> None:
    every = read_tools(clients)
    viewer = RoleConfig(tools=["present/*", "read/*", "diagnose/*"], namespaces=["*"])
    reader = RoleConfig(tools=["read/*"], namespaces=["*"])
    one = RoleConfig(tools=["read/list_pods", "diagnose/diagnose_pod"], namespaces=["*"])
    assert DIAGNOSE <= {t.name for t in offered_tools(viewer, every)}
    assert not DIAGNOSE & {t.name for t in offered_tools(reader, every)}
    assert {t.name for t in offered_tools(one, every)} == {"list_pods", "diagnose_pod"}


@pytest.mark.parametrize("sparse", [{}, {"metadata": {"name": "x"}, "spec": {}, "status": {}}])
async def test_the_analyzers_read_sparse_objects_without_failing(sparse: Obj) -> None:
    # What a real server holds a moment after creation: no status yet. Nothing is claimed
    # but what the fields say (a Deployment's replicas default to 1, none available).
    assert analyze_pod(sparse, []) == analyze_claims(sparse, []) == []
    assert analyze_hpa(sparse) == analyze_service(sparse, None, []) == []
    assert [f.code for f in analyze_workload(sparse, "Deployment")] == ["UnavailableReplicas"]
    assert analyze_workload(sparse, "DaemonSet") == analyze_workload(sparse, "Job") == []
    (node,) = analyze_node(sparse, 0)
    assert (node.code, node.evidence.value) == ("NodeNotReady", "missing")


# --- pods ---------------------------------------------------------------------------------


async def test_crash_loop_shows_exit_code_and_the_masked_previous_logs(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    early = "".join(f"boot step {i}\n" for i in range(30))
    crash = "connecting with password=hunter2\nfatal: cannot reach db:5432\n"
    kube.add_pod(
        ns,
        "api-1",
        waiting_reason="CrashLoopBackOff",
        last_termination_reason="Error",
        restarts=7,
        previous_logs=early + crash,
    )
    result = await diagnose(tools, "diagnose_pod", ns, name="api-1")
    assert result.summary == f"Diagnosis of pod {ns}/api-1: 1 finding (1 critical)"
    assert finding(result, "CrashLoopBackOff") == [
        f"1. [critical] CrashLoopBackOff Pod {ns}/api-1: container app keeps crashing: "
        "last exit code 1 (Error), 7 restarts",
        "   evidence: status.containerStatuses[app].state.waiting.reason=CrashLoopBackOff",
        "   next: Read why it exits in the previous logs; a restart will not fix it.",
    ]
    lines = result.text.splitlines()
    assert "   previous logs of app (last 20 lines, masked):" in lines
    logged = [line for line in lines if line.startswith("   | ")]
    assert len(logged) == 20 and logged[-1] == "   | fatal: cannot reach db:5432"
    assert "   | connecting with password=[MASKED]" in lines
    assert "hunter2" not in result.text and "boot step 11\n" not in result.text


async def test_oom_killed_names_the_memory_limit(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "worker-1", last_termination_reason="OOMKilled", restarts=3)
    result = await diagnose(tools, "diagnose_pod", ns, name="worker-1")
    assert finding(result, "OOMKilled") == [
        f"1. [critical] OOMKilled Pod {ns}/worker-1: container app was OOMKilled "
        "(exit code 137) at its memory limit 256Mi",
        "   evidence: status.containerStatuses[app].lastState.terminated.reason=OOMKilled",
        "   next: Raise the memory limit (set_container_resources) or find what grows.",
    ]


async def test_a_container_running_again_after_restarts_is_info(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "flappy-1", last_termination_reason="Error", restarts=2)
    result = await diagnose(tools, "diagnose_pod", ns, name="flappy-1")
    assert result.summary == f"Diagnosis of pod {ns}/flappy-1: 1 finding (1 info)"
    assert finding(result, "Restarted") == [
        f"1. [info] Restarted Pod {ns}/flappy-1: container app restarted 2 times; last exit "
        "code 1 (Error)",
        "   evidence: status.containerStatuses[app].restartCount=2",
        "   next: If the restarts are recent, read its previous logs (pod_logs previous=true).",
    ]


async def test_image_pull_quotes_the_registrys_answer(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    image = "registry.example.com/app:nope"
    kube.add_pod(ns, "web-1", waiting_reason="ImagePullBackOff", image=image)
    answer = (
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull '
        f'and unpack image "{image}": not found'
    )
    event = kube.add_event(ns, "Pod", "web-1", "Failed", answer, count=4, age=60)
    # The kubelet's later "Failed" events carry only the reason, not the registry's answer.
    kube.add_event(ns, "Pod", "web-1", "Failed", "Error: ImagePullBackOff", count=9, age=5)
    result = await diagnose(tools, "diagnose_pod", ns, name="web-1")
    line, evidence, step = finding(result, "ImagePullBackOff")
    assert line == (
        f"1. [critical] ImagePullBackOff Pod {ns}/web-1: container app cannot pull image "
        f"{image} (ImagePullBackOff): {answer}"
    )
    # The evidence quotes the field's value, clipped (the finding line has it whole).
    clipped = answer[:159] + "…"
    assert evidence == f"   evidence: Event {ns}/{event['metadata']['name']} message={clipped}"
    assert step.endswith("Check the image name and tag, and the registry's credentials and reach.")


async def test_pending_for_want_of_memory_cites_the_scheduler(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "big-1", node=None, phase="Pending", ready=False)
    result = await diagnose(tools, "diagnose_pod", ns, name="big-1")
    message = "0/2 nodes are available: 2 Insufficient memory."
    assert finding(result, "Unschedulable") == [
        f"1. [critical] Unschedulable Pod {ns}/big-1: Pending, unschedulable: insufficient "
        f"memory on the nodes ({message})",
        f"   evidence: status.conditions[PodScheduled].message={message}",
        "   next: Lower the pod's requests, free capacity, or add nodes.",
    ]


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (
            "0/3 nodes are available: 3 node(s) had taint {dedicated: batch}, that the pod "
            "didn't tolerate.",
            "the nodes have taints it does not tolerate",
        ),
        (
            "0/3 nodes are available: 3 node(s) didn't match node selector.",
            "no node matches its node selector or affinity",
        ),
        (
            "0/3 nodes are available: 3 Insufficient cpu.",
            "insufficient cpu on the nodes",
        ),
    ],
)
async def test_pending_from_a_failed_scheduling_event(
    tools: dict[str, Tool], kube: KubeServer, ns: str, message: str, why: str
) -> None:
    pod = kube.add_pod(ns, "p-1", node=None, phase="Pending", ready=False)
    pod["status"]["conditions"] = []  # the reason only in the scheduler's event
    kube.put("Pod", pod)
    event = kube.add_event(ns, "Pod", "p-1", "FailedScheduling", message, component="scheduler")
    result = await diagnose(tools, "diagnose_pod", ns, name="p-1")
    line, evidence, _ = finding(result, "Unschedulable")
    assert line.endswith(f"Pending, unschedulable: {why} ({message})")
    assert evidence == f"   evidence: Event {ns}/{event['metadata']['name']} message={message}"


async def test_pending_on_an_unbound_claim_cites_the_claim(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    pod = kube.add_pod(ns, "db-0", node=None, phase="Pending", ready=False)
    message = "pod has unbound immediate PersistentVolumeClaims (repeated 2 times)"
    pod["status"]["conditions"][0]["message"] = message
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    kube.put("Pod", pod)
    claim = {"metadata": {"name": "data", "namespace": ns}, "spec": {"storageClassName": "fast"}}
    kube.put("PersistentVolumeClaim", claim | {"status": {"phase": "Pending"}})
    result = await diagnose(tools, "diagnose_pod", ns, name="db-0")
    assert codes(result) == ["UnboundClaim", "Unschedulable"]
    assert finding(result, "UnboundClaim")[:2] == [
        f"1. [critical] UnboundClaim Pod {ns}/db-0: its PersistentVolumeClaim data is "
        "Pending, not Bound (fast)",
        f"   evidence: PersistentVolumeClaim {ns}/data status.phase=Pending",
    ]
    assert "its PersistentVolumeClaim is not bound" in finding(result, "Unschedulable")[0]
    # Claims that cannot be read are not claimed missing.
    kube.forbid("GET", f"/namespaces/{ns}/persistentvolumeclaims")
    try:
        unread = await diagnose(tools, "diagnose_pod", ns, name="db-0")
    finally:
        kube.clear_faults()
    assert codes(unread) == ["Unschedulable"]
    assert unread.text.splitlines()[1].startswith("Not checked: persistentvolumeclaims in ")


async def test_failing_probes_from_unhealthy_events(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "web-1", ready=False)
    ready = "Readiness probe failed: HTTP probe failed with statuscode: 503"
    live = "Liveness probe failed: Get http://10.244.0.9:8080/healthz: context deadline exceeded"
    kube.add_event(ns, "Pod", "web-1", "Unhealthy", ready, count=12, age=30)
    kube.add_event(ns, "Pod", "web-1", "Unhealthy", live, count=3, age=90)
    result = await diagnose(tools, "diagnose_pod", ns, name="web-1")
    assert codes(result) == ["LivenessProbeFailing", "ReadinessProbeFailing"]
    line, evidence, step = finding(result, "LivenessProbeFailing")
    assert line.startswith(f"1. [critical] LivenessProbeFailing Pod {ns}/web-1: liveness ")
    assert line.endswith(f": {live}") and re.search(r"\(3x, last 9\ds ago\)", line)
    assert evidence.startswith(f"   evidence: Event {ns}/web-1.") and evidence.endswith(live)
    assert (
        step == "   next: The kubelet restarts it: check the probe's endpoint, port and timeouts."
    )
    line, _, _ = finding(result, "ReadinessProbeFailing")
    assert line.startswith("2. [warning] ReadinessProbeFailing") and re.search(
        r"\(12x, last 3\ds ago\)", line
    )


async def test_a_failing_init_container_with_its_logs(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    pod = kube.add_pod(ns, "app-1", phase="Pending", ready=False)
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "registry.example.com/m:1"}]
    failed = {"exitCode": 2, "reason": "Error"}
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "migrate",
            "ready": False,
            "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": failed},
        }
    ]
    kube.put("Pod", pod)
    kube.set_logs(
        ns, "app-1", "migration 0042 failed: relation exists\n", container="migrate", previous=True
    )
    result = await diagnose(tools, "diagnose_pod", ns, name="app-1")
    line, evidence, step = finding(result, "InitContainerFailing")
    assert line == (
        f"1. [critical] InitContainerFailing Pod {ns}/app-1: init container migrate keeps "
        "crashing: last exit code 2 (Error), 4 restarts; the pod's containers cannot start "
        "until it succeeds"
    )
    assert evidence == (
        "   evidence: status.initContainerStatuses[migrate].state.waiting.reason=CrashLoopBackOff"
    )
    assert step == "   next: Read the init container's previous logs; the pod waits on it."
    assert "   | migration 0042 failed: relation exists" in result.text.splitlines()


# --- workloads ----------------------------------------------------------------------------


async def test_a_rollout_past_its_deadline_and_unavailable_replicas(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    deployment = kube.add_deployment(ns, "checkout", replicas=3, ready=1)
    progressing = deployment["status"]["conditions"][1]
    progressing |= {
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "checkout-7d9f" has timed out progressing.',
    }
    kube.put("Deployment", deployment)
    result = await diagnose(tools, "diagnose_workload", ns, kind="Deployment", name="checkout")
    assert codes(result) == ["ProgressDeadlineExceeded", "UnavailableReplicas"]
    assert finding(result, "ProgressDeadlineExceeded")[:2] == [
        f"1. [critical] ProgressDeadlineExceeded Deployment {ns}/checkout: rollout is past its "
        'progress deadline (600s): ReplicaSet "checkout-7d9f" has timed out progressing.',
        "   evidence: status.conditions[Progressing].reason=ProgressDeadlineExceeded",
    ]
    assert finding(result, "UnavailableReplicas")[:2] == [
        f"2. [warning] UnavailableReplicas Deployment {ns}/checkout: 1/3 replicas available",
        "   evidence: status.availableReplicas=1",
    ]


async def test_statefulset_daemonset_and_job_failures(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    selector = {"matchLabels": {"app": "db"}}
    kube.put(
        "StatefulSet",
        {
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"replicas": 3, "selector": selector},
            "status": {"replicas": 3, "readyReplicas": 0},
        },
    )
    kube.put(
        "DaemonSet",
        {
            "metadata": {"name": "agent", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}},
            "status": {"desiredNumberScheduled": 4, "numberReady": 3, "numberAvailable": 3},
        },
    )
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    failed["message"] = "Job has reached the specified backoff limit"
    kube.put(
        "Job",
        {
            "metadata": {"name": "nightly", "namespace": ns},
            "spec": {"backoffLimit": 2, "selector": {"matchLabels": {"job-name": "nightly"}}},
            "status": {"failed": 3, "conditions": [failed]},
        },
    )
    db = await diagnose(tools, "diagnose_workload", ns, kind="StatefulSet", name="db")
    assert finding(db, "UnavailableReplicas")[:2] == [
        f"1. [critical] UnavailableReplicas StatefulSet {ns}/db: 0/3 replicas ready",
        "   evidence: status.readyReplicas=0",
    ]
    agent = await diagnose(tools, "diagnose_workload", ns, kind="DaemonSet", name="agent")
    assert finding(agent, "UnavailableReplicas")[:2] == [
        f"1. [warning] UnavailableReplicas DaemonSet {ns}/agent: 3/4 scheduled pods available",
        "   evidence: status.numberAvailable=3",
    ]
    job = await diagnose(tools, "diagnose_workload", ns, kind="Job", name="nightly")
    assert finding(job, "JobFailed")[:2] == [
        f"1. [critical] JobFailed Job {ns}/nightly: job failed (BackoffLimitExceeded): "
        "Job has reached the specified backoff limit",
        "   evidence: status.conditions[Failed].reason=BackoffLimitExceeded",
    ]


def _hpa(ns: str, target: str, *, current: int, maximum: int) -> Obj:
    cpu = {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    now = {"name": "cpu", "current": {"averageUtilization": 95, "averageValue": "950m"}}
    return {
        "metadata": {"name": target, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 2,
            "maxReplicas": maximum,
            "metrics": [{"type": "Resource", "resource": cpu}],
        },
        "status": {
            "currentReplicas": current,
            "desiredReplicas": maximum,
            "currentMetrics": [{"type": "Resource", "resource": now}],
        },
    }


async def test_an_hpa_at_its_maximum_with_its_metric(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_deployment(ns, "web", replicas=5, pods=False)
    kube.put("HorizontalPodAutoscaler", _hpa(ns, "web", current=5, maximum=5))
    result = await diagnose(tools, "diagnose_workload", ns, kind="Deployment", name="web")
    assert finding(result, "HPAAtMaximum") == [
        f"1. [warning] HPAAtMaximum HorizontalPodAutoscaler {ns}/web: at its maximum of 5 "
        "replicas for Deployment web (cpu 95% of target 70%)",
        "   evidence: status.currentReplicas=5",
        "   next: Raise maxReplicas if the load is real, or find why usage is high.",
    ]
    below = _hpa(ns, "web", current=3, maximum=5)
    kube.put("HorizontalPodAutoscaler", below)
    result = await diagnose(tools, "diagnose_workload", ns, kind="Deployment", name="web")
    assert codes(result) == []


# --- services -------------------------------------------------------------------------------


async def test_a_service_whose_selector_matches_no_pod(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "web-1", labels={"app": "web"})
    kube.add_service(ns, "web", selector={"app": "wbe"})
    result = await diagnose(tools, "diagnose_service", ns, name="web")
    assert finding(result, "SelectorMatchesNoPod") == [
        f"1. [critical] SelectorMatchesNoPod Service {ns}/web: its selector app=wbe matches "
        "no running pod",
        "   evidence: spec.selector=app=wbe",
        "   next: Compare the selector with the pods' labels (list_pods).",
    ]


async def test_a_service_without_ready_endpoints(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "web-1", labels={"app": "web"}, ready=False)
    kube.add_pod(ns, "web-2", labels={"app": "web"}, ready=False)
    kube.add_service(ns, "web")
    kube.add_endpoints(ns, "web", not_ready=[("10.0.0.1", "web-1"), ("10.0.0.2", "web-2")])
    result = await diagnose(tools, "diagnose_service", ns, name="web")
    assert finding(result, "NoReadyEndpoints")[:2] == [
        f"1. [critical] NoReadyEndpoints Service {ns}/web: no ready endpoints: 2 pods "
        "selected, 2 not ready",
        f"   evidence: Endpoints {ns}/web subsets[].addresses=0 ready, 2 not ready",
    ]


async def test_a_service_target_port_no_container_declares(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_pod(ns, "web-1", labels={"app": "web"})
    service = kube.add_service(ns, "web", ports=[(80, 9090)])
    service["spec"]["ports"].append({"name": "metrics", "port": 9100, "targetPort": "metrics"})
    kube.put("Service", service)
    kube.add_endpoints(ns, "web", ready=[("10.0.0.1", "web-1")])
    result = await diagnose(tools, "diagnose_service", ns, name="web")
    assert codes(result) == ["TargetPortMismatch", "TargetPortMismatch"]
    lines = result.text.splitlines()
    assert lines[1:3] == [
        f"1. [critical] TargetPortMismatch Service {ns}/web: targetPort metrics of port 9100 "
        "names no container port of its pods (named: none)",
        "   evidence: spec.ports[metrics].targetPort=metrics",
    ]
    assert lines[4:6] == [
        f"2. [warning] TargetPortMismatch Service {ns}/web: targetPort 9090 of port 80 "
        "matches no container port of its pods (they declare 8080)",
        "   evidence: spec.ports[p80].targetPort=9090",
    ]


async def test_what_could_not_be_read_is_not_claimed(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_service(ns, "web")  # no pod, no Endpoints object
    kube.forbid("GET", f"/namespaces/{ns}/pods$")
    try:
        no_pods = await diagnose(tools, "diagnose_service", ns, name="web")
    finally:
        kube.clear_faults()
    # The pods could not be listed: no "matches no pod", but the endpoints still say enough.
    assert codes(no_pods) == ["NoReadyEndpoints"]
    assert finding(no_pods, "NoReadyEndpoints")[:2] == [
        f"1. [critical] NoReadyEndpoints Service {ns}/web: no ready endpoints: 0 not ready",
        f"   evidence: Endpoints {ns}/web subsets=absent (no Endpoints object)",
    ]
    assert no_pods.text.splitlines()[1].startswith(f"Not checked: pods in namespace {ns} (")
    kube.add_pod(ns, "web-1", labels={"app": "web"}, ready=False)
    kube.forbid("GET", f"/namespaces/{ns}/endpoints")
    try:
        no_endpoints = await diagnose(tools, "diagnose_service", ns, name="web")
        scan = await diagnose(tools, "diagnose_namespace", ns)
    finally:
        kube.clear_faults()
    assert no_endpoints.summary.endswith("no problems found")
    assert no_endpoints.text.splitlines()[1].startswith("Not checked: endpoints (")
    assert "NoReadyEndpoints" not in codes(scan)


# --- nodes ----------------------------------------------------------------------------------


async def test_a_node_not_ready_and_under_pressure(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    name = node_name("sick")
    node = kube.add_node(name, ready=False, memory_pressure=True, disk_pressure=True)
    node["status"]["conditions"][2] |= {"status": "True", "message": "too many pids"}
    kube.put("Node", node)
    result = await diagnose(tools, "diagnose_node", "", name=name)
    assert codes(result) == ["NodeNotReady", "DiskPressure", "MemoryPressure", "PIDPressure"]
    assert finding(result, "NodeNotReady")[:2] == [
        f"1. [critical] NodeNotReady Node {name}: not Ready (Ready=False): NodeStatusUnknown",
        "   evidence: status.conditions[Ready].status=False",
    ]
    assert finding(result, "MemoryPressure") == [
        f"3. [warning] MemoryPressure Node {name}: MemoryPressure: KubeletHasSufficientMemory",
        "   evidence: status.conditions[MemoryPressure].status=True",
        "   next: The kubelet evicts pods: find what uses memory, or add capacity.",
    ]
    assert finding(result, "PIDPressure")[0].endswith(": PIDPressure: too many pids")


async def test_a_cordoned_node_with_pods_still_on_it(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    name = node_name("drain")
    kube.add_node(name, unschedulable=True)
    kube.add_pod(ns, "web-1", node=name)
    kube.add_pod(ns, "web-2", node=name)
    agent = kube.add_pod(ns, "agent-1", node=name)
    agent["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent"}]
    kube.put("Pod", agent)
    result = await diagnose(tools, "diagnose_node", "", name=name)
    assert finding(result, "CordonedWithPods") == [
        f"1. [warning] CordonedWithPods Node {name}: cordoned with 2 pods still running on it",
        "   evidence: spec.unschedulable=true",
        "   next: Drain it if maintenance is meant, else uncordon_node.",
    ]
    empty = node_name("empty")
    kube.add_node(empty, unschedulable=True)
    assert codes(await diagnose(tools, "diagnose_node", "", name=empty)) == []


# --- namespaces -----------------------------------------------------------------------------


async def test_a_namespace_ranks_critical_and_widespread_first_and_bounds_the_rest(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    for name in ("api-1", "api-2", "api-3"):
        kube.add_pod(
            ns,
            name,
            labels={"app": "api"},
            waiting_reason="CrashLoopBackOff",
            last_termination_reason="Error",
            restarts=5,
        )
    kube.add_pod(ns, "big-1", labels={"app": "big"}, node=None, phase="Pending", ready=False)
    kube.add_service(ns, "ghost", selector={"app": "ghost"})
    kube.add_deployment(ns, "web", replicas=2, pods=True)
    kube.add_service(ns, "web")
    ready_endpoints(kube, ns, "web")
    kube.put("HorizontalPodAutoscaler", _hpa(ns, "web", current=2, maximum=2))
    result = await diagnose(tools, "diagnose_namespace", ns, max_findings=4)
    assert result.summary == (f"Diagnosis of namespace {ns}: 6 findings (5 critical, 1 warning)")
    assert codes(result) == ["CrashLoopBackOff"] * 3 + ["SelectorMatchesNoPod"]
    assert result.text.splitlines()[-1] == (
        "… and 2 more findings (1 critical, 1 warning) not shown; raise max_findings or "
        "diagnose one pod, workload or service."
    )
    # Without previous logs in a namespace scan, the next step says where they are.
    assert finding(result, "CrashLoopBackOff")[2] == (
        "   next: Read its previous logs (pod_logs previous=true) for why it exits."
    )
    # A next step is given once for the findings in a row that share it.
    nexts = [line for line in result.text.splitlines() if line.startswith("   next: ")]
    assert len(nexts) == 2
    every = await diagnose(tools, "diagnose_namespace", ns)
    assert codes(every) == ["CrashLoopBackOff"] * 3 + [
        "SelectorMatchesNoPod",
        "Unschedulable",
        "HPAAtMaximum",
    ]


async def test_a_healthy_namespace_has_no_findings(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_deployment(ns, "web", replicas=2, pods=True)
    kube.add_service(ns, "web")
    pods = ready_endpoints(kube, ns, "web")
    kube.add_event(ns, "Pod", pods[0]["metadata"]["name"], "Pulled", "pulled", type="Normal")
    result = await diagnose(tools, "diagnose_namespace", ns)
    assert result.text == (
        f"Diagnosis of namespace {ns}: no problems found (checked its pods, workloads, "
        "autoscalers and Services)."
    )
    service = await diagnose(tools, "diagnose_service", ns, name="web")
    assert service.summary == f"Diagnosis of service {ns}/web: no problems found"
    workload = await diagnose(tools, "diagnose_workload", ns, kind="Deployment", name="web")
    assert workload.summary == f"Diagnosis of deployment {ns}/web: no problems found"


async def test_a_supporting_read_refused_is_a_not_checked_line(
    tools: dict[str, Tool], kube: KubeServer, ns: str
) -> None:
    kube.add_deployment(ns, "web", replicas=1, pods=True)
    kube.forbid("GET", f"/namespaces/{ns}/horizontalpodautoscalers")
    try:
        result = await diagnose(tools, "diagnose_namespace", ns)
    finally:
        kube.clear_faults()
    (line,) = [line for line in result.text.splitlines() if line.startswith("Not checked:")]
    assert line.startswith(f"Not checked: horizontalpodautoscalers in namespace {ns} (")
    assert "403" in line and result.summary.endswith("no problems found")


# --- the real API server (no kubelet: statuses written through the status subresource) -----


@pytest.mark.realkube
async def test_diagnoses_on_the_real_api_server(realkube: tuple[RealKube, Admin]) -> None:
    cluster, admin = realkube
    real = RealBackend(cluster, admin)  # kelpie's identity: exactly the shipped ClusterRole
    ns = real.namespace
    tools = {t.name: t for t in read_tools(real.clients) if t.kind is ToolKind.DIAGNOSE}
    node = node_name("pressed")
    real_node(admin, node)
    for name in ("api-1", "api-2"):
        real_pod(admin, ns, name, node=node, labels={"app": "api"})
        admin.core.patch_namespaced_pod_status(name, ns, crash_looping(ns, name))
    real_pod(admin, ns, "big-1", node=None, labels={"app": "big"})
    message = "0/1 nodes are available: 1 Insufficient memory."
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    admin.core.patch_namespaced_pod_status(
        "big-1", ns, {"status": {"conditions": [unschedulable | {"message": message}]}}
    )
    real_pod(admin, ns, "web-1", node=node, labels={"app": "web"})
    admin.core.patch_namespaced_pod_status(
        "web-1", ns, {"status": {"phase": "Running", "podIP": "10.244.1.5"}}
    )
    service = {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    admin.core.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": service})
    # The endpoints controller lists the not-ready pod under notReadyAddresses.
    eventually(
        "the endpoints of web",
        lambda: any(
            s.get("notReadyAddresses")
            for s in (admin.json(admin.core.read_namespaced_endpoints, "web", ns) or {}).get(
                "subsets"
            )
            or []
        ),
    )
    try:
        pod = await diagnose(tools, "diagnose_pod", ns, name="api-1")
        assert finding(pod, "CrashLoopBackOff")[:2] == [
            f"1. [critical] CrashLoopBackOff Pod {ns}/api-1: container app keeps crashing: "
            "last exit code 1 (Error), 7 restarts",
            "   evidence: status.containerStatuses[app].state.waiting.reason=CrashLoopBackOff",
        ]
        # No kubelet serves logs here: the finding stands, the logs are a "Not checked" line.
        assert pod.text.splitlines()[1].startswith("Not checked: previous logs of app in pod")

        pending = await diagnose(tools, "diagnose_pod", ns, name="big-1")
        assert finding(pending, "Unschedulable")[:2] == [
            f"1. [critical] Unschedulable Pod {ns}/big-1: Pending, unschedulable: insufficient "
            f"memory on the nodes ({message})",
            f"   evidence: status.conditions[PodScheduled].message={message}",
        ]

        web = await diagnose(tools, "diagnose_service", ns, name="web")
        assert finding(web, "NoReadyEndpoints")[:2] == [
            f"1. [critical] NoReadyEndpoints Service {ns}/web: no ready endpoints: 1 pod "
            "selected, 1 not ready",
            f"   evidence: Endpoints {ns}/web subsets[].addresses=0 ready, 1 not ready",
        ]

        pressed = await diagnose(tools, "diagnose_node", "", name=node)
        assert finding(pressed, "MemoryPressure")[:2] == [
            f"1. [warning] MemoryPressure Node {node}: MemoryPressure: kubelet has insufficient "
            "memory available",
            "   evidence: status.conditions[MemoryPressure].status=True",
        ]

        scan = await diagnose(tools, "diagnose_namespace", ns)
        assert codes(scan) == [
            "CrashLoopBackOff",
            "CrashLoopBackOff",
            "NoReadyEndpoints",
            "Unschedulable",
        ]
        assert scan.summary == f"Diagnosis of namespace {ns}: 4 findings (4 critical)"
        # v1.20 serves no autoscaling/v2: the scan says what it could not check.
        note = scan.text.splitlines()[1]
        assert note.startswith(f"Not checked: horizontalpodautoscalers in namespace {ns} (")
        assert "404" in note

        # A real Deployment: the controller made its pods, no scheduler places them.
        real.deployment("shop", replicas=2)
        eventually(
            "the pods of shop",
            lambda: (
                len(
                    admin.json(admin.core.list_namespaced_pod, ns, label_selector="app=shop")[
                        "items"
                    ]
                )
                == 2
            ),
        )
        shop = await diagnose(tools, "diagnose_workload", ns, kind="Deployment", name="shop")
        assert codes(shop) == ["UnavailableReplicas", "NotScheduled", "NotScheduled"]
        assert finding(shop, "UnavailableReplicas")[:2] == [
            f"1. [critical] UnavailableReplicas Deployment {ns}/shop: 0/2 replicas available",
            "   evidence: status.availableReplicas=0",
        ]
    finally:
        admin.core.delete_node(node)


# --- through the agent: the result is evidence the ledger labels and checks ------------------


@pytest.mark.asyncio(loop_scope="function")
async def test_the_model_reads_a_diagnosis_as_cited_evidence(world: World) -> None:
    (crashing,) = [
        p["metadata"]["name"]
        for p in world.kube.objects("Pod")
        if p["metadata"]["namespace"] == "shop"
        and p["status"]["containerStatuses"][0]["restartCount"] == 7
    ]
    world.model.reply_tool_calls([("diagnose_pod", {"namespace": "shop", "name": crashing})])
    world.model.reply_text("It is OOMKilled at 256Mi [E1], not [E7].")
    await world.start_bot({"slack": {"streaming": "update"}})
    mention = await world.mention(SHOP_CHANNEL, ALICE, "why does checkout-api crash?")
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()

    _, second = world.model.requests
    (result,) = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    lines = result.splitlines()
    assert lines[0] == f"[E1] Diagnosis of pod shop/{crashing}: 3 findings (2 critical, 1 warning)."
    evidence = "   evidence: status.containerStatuses[app].lastState.terminated.reason=OOMKilled"
    assert evidence in lines
    assert "   | java.lang.OutOfMemoryError: Java heap space" in lines
    ledger = json.dumps(second["messages"])
    assert f'[E1] diagnose_pod {{\\"name\\":\\"{crashing}\\",\\"namespace\\":\\"shop\\"}}' in ledger
    replies = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot]
    assert "It is OOMKilled at 256Mi [E1], not." in replies[-1].text
