"""The read tools against a Kubernetes-compatible server, through the official client.

Each test asserts what the tool's text shows and what the server received; a few tests
exercise the server's write paths (dry run, preconditions) for the write tools to rely on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.errors import ConfigError
from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
from bot.toolsets.kube.read import read_tools
from bot.toolsets.spec import Tool, ToolArgumentError, ToolContext, ToolFailure, ToolKind, ToolScope
from tests.peers.kube_server import Demo, KubeServer, RecordedRequest

CTX = ToolContext(cluster="prod", default_namespace="shop")
NO_DEFAULT = ToolContext(cluster="prod", default_namespace=None)


@pytest.fixture
def kubeconfig(kube: KubeServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig", context="test")


@pytest.fixture
def clients(kubeconfig: Path) -> Iterator[KubeClients]:
    built = KubeClients.build([("prod", str(kubeconfig), "test", False)], request_timeout=5)
    yield built
    built.close()


@pytest.fixture
def tools(clients: KubeClients, demo: Demo) -> dict[str, Tool]:
    # The diagnose toolset is composed with the reads; tests/test_kube_diagnose.py has it.
    return {tool.name: tool for tool in read_tools(clients) if tool.kind is ToolKind.READ}


async def run(tools: dict[str, Tool], name: str, args: dict[str, Any], context: ToolContext = CTX):
    return await tools[name].handler(args, context)


def gets(server: KubeServer, path_end: str) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "GET" and r.path.endswith(path_end)]


# --- the tool vocabulary ---------------------------------------------------------------


def test_every_read_tool_is_described_and_closed(tools: dict[str, Tool]) -> None:
    assert set(tools) == {
        "list_namespaces",
        "list_pods",
        "describe_pod",
        "pod_logs",
        "list_deployments",
        "describe_deployment",
        "list_events",
        "list_nodes",
        "list_services",
        "rollout_history",
        "what_changed",
        "list_resources",
        "get_resource",
        "top_pods",
        "top_nodes",
    }
    # The generic tools' kind is an argument: the firewall sees it once resolved.
    generic = {"list_resources", "get_resource"}
    for tool in tools.values():
        assert tool.kind is ToolKind.READ
        assert tool.parameters["type"] == "object"
        assert tool.parameters["additionalProperties"] is False
        assert (tool.name in generic or tool.resource_kinds) and len(tool.description) > 30
        assert "Secret" not in tool.resource_kinds
    assert tools["list_nodes"].scope is ToolScope.CLUSTER
    assert tools["list_namespaces"].scope is ToolScope.CLUSTER
    assert tools["pod_logs"].parameters["required"] == ["name"]


# --- reads ------------------------------------------------------------------------------


async def test_list_namespaces(tools: dict[str, Tool], kube: KubeServer) -> None:
    result = await run(tools, "list_namespaces", {})
    assert result.summary == "5 namespaces"
    assert "team-checkout" in result.text and "Active" in result.text
    assert gets(kube, "/api/v1/namespaces")


async def test_list_pods_summarises_and_shows_the_crashing_pod(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    result = await run(tools, "list_pods", {})
    lines = result.text.splitlines()
    assert lines[0] == "5 pods in namespace shop, 1 not ready" == result.summary
    assert lines[1].split() == ["NAME", "PHASE", "READY", "RESTARTS", "AGE", "NODE"]
    crashing = next(line for line in lines if demo.crashing_pod in line)
    assert "CrashLoopBackOff" in crashing and "0/1" in crashing
    assert "7 (OOMKilled)" in crashing and "node-a" in crashing
    healthy = next(line for line in lines if demo.healthy_pods[1] in line)
    assert "1/1" in healthy and "node-b" in healthy
    assert gets(kube, "/api/v1/namespaces/shop/pods")


async def test_list_pods_sends_the_label_selector(tools: dict[str, Tool], kube: KubeServer) -> None:
    result = await run(tools, "list_pods", {"label_selector": "app=checkout-api"})
    request = gets(kube, "/namespaces/shop/pods")[-1]
    assert request.query == {"labelSelector": "app=checkout-api"}
    assert result.summary.startswith("3 pods")
    assert "frontend" not in result.text

    result = await run(tools, "list_pods", {"label_selector": "app in (frontend),tier!=x"})
    assert result.summary.startswith("2 pods") and "checkout-api" not in result.text


async def test_list_pods_field_selector_and_all_namespaces(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    result = await run(
        tools, "list_pods", {"namespace": "*", "field_selector": "spec.nodeName=node-b"}
    )
    request = gets(kube, "/api/v1/pods")[-1]
    assert request.query == {"fieldSelector": "spec.nodeName=node-b"}
    assert "node-a" not in result.text and "shop/checkout-api-" in result.text
    assert "in all namespaces" in result.summary

    # No namespace and no default namespace: all namespaces too.
    result = await run(tools, "list_pods", {}, NO_DEFAULT)
    assert result.summary == "9 pods in all namespaces, 2 not ready"
    assert "dev-a/sandbox" in result.text and "Pending (Unschedulable)" in result.text


async def test_list_pods_reports_an_unknown_field_selector(tools: dict[str, Tool]) -> None:
    with pytest.raises(ToolFailure, match=r"400 Bad Request.*field label not supported"):
        await run(tools, "list_pods", {"field_selector": "spec.bogus=1"})


async def test_list_pods_caps_long_lists(tools: dict[str, Tool], kube: KubeServer) -> None:
    for i in range(205):
        kube.add_pod("dev-a", f"batch-{i:03d}", labels={"app": "batch"})
    result = await run(tools, "list_pods", {"namespace": "dev-a", "label_selector": "app=batch"})
    lines = result.text.splitlines()
    assert lines[0].startswith("205 pods in namespace dev-a")
    assert len(lines) == 1 + 1 + 200 + 1
    assert lines[-1].startswith("… and 5 more pods")


async def test_describe_pod_shows_states_termination_conditions_and_events(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    result = await run(tools, "describe_pod", {"name": demo.crashing_pod})
    text = result.text
    assert text.startswith(f"Pod shop/{demo.crashing_pod}: Running (CrashLoopBackOff)")
    assert "waiting (CrashLoopBackOff" in text
    assert "last termination: OOMKilled, exit code 137" in text
    assert "Ready=False (ContainersNotReady)" in text
    assert "limits memory=256Mi" in text
    assert "Controlled by: ReplicaSet/checkout-api-" in text
    assert "BackOff" in text and "(x42)" in text
    events = gets(kube, "/namespaces/shop/events")[-1]
    assert events.query["fieldSelector"] == (
        f"involvedObject.kind=Pod,involvedObject.name={demo.crashing_pod}"
    )
    # Env values (and the secret they point at) are never shown nor fetched.
    assert "DB_PASSWORD" not in text and "db-credentials" not in text
    assert not [r for r in kube.requests if "secret" in r.path]


async def test_describe_pod_still_answers_when_events_are_forbidden(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    kube.forbid("GET", r"/events$")
    result = await run(tools, "describe_pod", {"name": demo.crashing_pod})
    assert "Events: unavailable" in result.text and "403" in result.text


async def test_pod_logs_previous_instance(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    result = await run(tools, "pod_logs", {"name": demo.crashing_pod, "previous": True})
    assert "java.lang.OutOfMemoryError: Java heap space" in result.text
    assert result.attachment == result.text
    assert "previous instance" in result.summary and "4 lines" in result.summary
    request = gets(kube, f"/pods/{demo.crashing_pod}/log")[-1]
    assert request.query == {"previous": "true", "tailLines": "200", "limitBytes": "65536"}


async def test_pod_logs_tail_since_and_limit(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    pod = demo.healthy_pods[0]
    result = await run(tools, "pod_logs", {"name": pod, "tail_lines": 1, "since": "10m"})
    assert result.text == "GET /healthz 200\n"
    request = gets(kube, f"/pods/{pod}/log")[-1]
    assert request.query["tailLines"] == "1" and request.query["sinceSeconds"] == "600"

    result = await run(tools, "pod_logs", {"name": pod, "limit_bytes": 10})
    assert result.attachment == "started ch"
    assert "cut at limit_bytes=10" in result.text and "cut at 10 bytes" in result.summary


async def test_pod_logs_of_a_pod_with_two_containers_needs_a_container(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    kube.add_pod("shop", "two", containers=("app", "sidecar"), logs="app says hi\n")
    kube.set_logs("shop", "two", "sidecar says hi\n", container="sidecar")
    several = r"Pod shop/two has several containers \(app, sidecar\): name one with container\."
    with pytest.raises(ToolFailure, match=several):
        await run(tools, "pod_logs", {"name": "two"})
    result = await run(tools, "pod_logs", {"name": "two", "container": "sidecar"})
    assert result.text == "sidecar says hi\n"
    assert gets(kube, "/pods/two/log")[-1].query["container"] == "sidecar"


async def test_pod_logs_without_output(tools: dict[str, Tool], kube: KubeServer) -> None:
    kube.add_pod("shop", "quiet")
    result = await run(tools, "pod_logs", {"name": "quiet"})
    assert result.text == "(no log lines)" and result.attachment == ""


async def test_list_deployments(tools: dict[str, Tool]) -> None:
    result = await run(tools, "list_deployments", {"namespace": "*"})
    assert result.summary == "4 deployments in all namespaces, 1 not fully available"
    row = next(line for line in result.text.splitlines() if "shop/checkout-api" in line)
    assert row.split()[1:4] == ["2/3", "3", "2"]


async def test_describe_deployment_shows_rollout_and_replicasets(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    result = await run(tools, "describe_deployment", {"name": "checkout-api"})
    text = result.text
    assert "Replicas: 3 desired, 3 updated, 2 ready, 2 available, 1 unavailable" in text
    assert "Rollout: Waiting for rollout to finish: 2 of 3 updated replicas are available." in text
    assert "Available=False MinimumReplicasUnavailable" in text
    lines = text.splitlines()
    start = lines.index("ReplicaSets (newest first):")
    assert "revision 2" in lines[start + 1] and "3 desired" in lines[start + 1]
    assert "revision 1" in lines[start + 2] and "app:0.9" in lines[start + 2]
    assert "ScalingReplicaSet" in text
    rs_request = gets(kube, "/namespaces/shop/replicasets")[-1]
    assert rs_request.query == {"labelSelector": "app=checkout-api,tier=backend"}


async def test_describe_deployment_of_a_finished_rollout(tools: dict[str, Tool]) -> None:
    result = await run(tools, "describe_deployment", {"name": "frontend"})
    assert "Rollout: Successfully rolled out." in result.text


async def test_list_events_filters_on_the_server(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    args = {"kind": "Pod", "name": demo.crashing_pod, "warnings_only": True}
    result = await run(tools, "list_events", args)
    request = gets(kube, "/namespaces/shop/events")[-1]
    assert request.query["fieldSelector"] == (
        f"involvedObject.kind=Pod,involvedObject.name={demo.crashing_pod},type=Warning"
    )
    assert "BackOff" in result.text and "Unhealthy" in result.text
    assert "Pulled" not in result.text  # a Normal event
    lines = result.text.splitlines()
    assert "BackOff" in lines[2]  # most recent first

    everything = await run(tools, "list_events", {"namespace": "*"})
    assert "Pod dev-a/sandbox" in everything.text and "FailedScheduling" in everything.text


async def test_events_written_by_a_new_style_recorder_render(
    tools: dict[str, Tool], kube: KubeServer, demo: Demo
) -> None:
    """Newer controllers write events with eventTime and series and no first/last
    timestamps or count; an events.k8s.io-shaped object has note and regarding."""
    repeated = kube.add_event("shop", "Deployment", demo.deployment, "ScalingReplicaSet", "x")
    del repeated["firstTimestamp"], repeated["lastTimestamp"], repeated["count"]
    repeated |= {"eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": ""}
    repeated["series"] = {"count": 4, "lastObservedTime": "2099-01-01T00:00:00.000000Z"}
    repeated["message"] = "Scaled up replica set checkout-api-abc to 3"
    kube.put("Event", repeated)
    shaped = kube.add_event("shop", "Pod", demo.crashing_pod, "Killing", "unused")
    shaped["regarding"] = shaped.pop("involvedObject")
    shaped["note"] = shaped.pop("message")
    kube.put("Event", shaped)
    result = await run(tools, "list_events", {})
    line = next(ln for ln in result.text.splitlines() if "ScalingReplicaSet" in ln)
    assert "(x4) Scaled up replica set checkout-api-abc to 3" in line
    assert f"Deployment {demo.deployment}" in line
    line = next(ln for ln in result.text.splitlines() if "Killing" in ln)
    assert f"Pod {demo.crashing_pod}" in line and "unused" in line


async def test_list_nodes_shows_conditions_capacity_and_taints(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    kube.add_node("node-c", ready=False, unschedulable=True, memory_pressure=True)
    result = await run(tools, "list_nodes", {})
    assert result.summary == "3 nodes, 1 not ready, 1 cordoned"
    node_b = next(line for line in result.text.splitlines() if line.startswith("node-b"))
    assert "dedicated=batch:NoSchedule" in node_b and "3900m/4" in node_b
    assert "16Gi/16Gi" in node_b and "110/110" in node_b
    node_c = next(line for line in result.text.splitlines() if line.startswith("node-c"))
    assert "NotReady,SchedulingDisabled,MemoryPressure" in node_c


async def test_list_services_counts_ready_endpoints(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    kube.add_service("shop", "lonely", selector={"app": "nothing"}, type="LoadBalancer")
    result = await run(tools, "list_services", {})
    assert result.summary == "2 services in namespace shop, 1 without ready endpoints"
    checkout = next(line for line in result.text.splitlines() if line.startswith("checkout-api"))
    assert "10.96.12.34" in checkout and "80->8080/TCP" in checkout
    assert "2 ready, 1 not ready" in checkout
    lonely = next(line for line in result.text.splitlines() if line.startswith("lonely"))
    assert "203.0.113.10" in lonely and "80:30080->8080/TCP" in lonely


# --- failures ---------------------------------------------------------------------------


async def test_not_found_names_what_was_attempted(tools: dict[str, Tool]) -> None:
    with pytest.raises(ToolFailure) as caught:
        await run(tools, "describe_pod", {"name": "nope"})
    message = str(caught.value)
    assert "read pod shop/nope" in message and "not found" in message
    assert isinstance(caught.value, KubeFailure) and caught.value.status == 404


async def test_forbidden_is_a_403_failure(tools: dict[str, Tool], kube: KubeServer) -> None:
    kube.forbid("GET", r"/namespaces/shop/pods$")
    with pytest.raises(ToolFailure) as caught:
        await run(tools, "list_pods", {})
    message = str(caught.value)
    assert message.startswith("Kubernetes refused (403 Forbidden) to list pods in namespace shop")
    assert 'cannot list resource "pods"' in message


async def test_server_errors_and_recovery(tools: dict[str, Tool], kube: KubeServer) -> None:
    kube.fail("GET", r"/api/v1/nodes$", 503, times=1)
    with pytest.raises(ToolFailure, match=r"failed \(503 Service Unavailable\) to list nodes"):
        await run(tools, "list_nodes", {})
    assert (await run(tools, "list_nodes", {})).summary.startswith("2 nodes")


async def test_unreachable_server(tools: dict[str, Tool], kube: KubeServer) -> None:
    url = kube.url
    await kube.stop()
    with pytest.raises(ToolFailure) as caught:
        await run(tools, "list_namespaces", {})
    message = str(caught.value)
    assert f"the Kubernetes API at {url} is unreachable" in message
    assert "list namespaces" in message


async def test_timeout(kube: KubeServer, kubeconfig: Path, demo: Demo) -> None:
    clients = KubeClients.build([("prod", str(kubeconfig), "test", False)], request_timeout=0.3)
    tools = {t.name: t for t in read_tools(clients)}
    kube.delay(r"/api/v1/nodes$", 2.0)
    try:
        with pytest.raises(ToolFailure, match=r"list nodes.*timed out after 0.3s"):
            await run(tools, "list_nodes", {})
    finally:
        clients.close()


async def test_the_event_loop_keeps_running_during_a_slow_call(
    tools: dict[str, Tool], kube: KubeServer
) -> None:
    kube.delay(r"/namespaces/shop/pods$", 0.6)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    result = await run(tools, "list_pods", {})
    elapsed = time.monotonic() - started
    task.cancel()
    assert result.summary.startswith("5 pods")
    assert elapsed >= 0.6
    assert ticks >= 10  # a blocked loop would tick at most once


async def test_unknown_cluster(tools: dict[str, Tool]) -> None:
    with pytest.raises(ToolFailure, match="No Kubernetes cluster named 'staging'"):
        await run(tools, "list_pods", {}, ToolContext(cluster="staging"))


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("list_pods", {"namespace": "Bad_NS"}, "not a valid Kubernetes namespace"),
        ("list_pods", {"labels": "app=x"}, "unknown argument"),
        ("list_pods", {"label_selector": 5}, "label_selector must be a string"),
        ("pod_logs", {"name": "x", "tail_lines": 0}, "tail_lines must be between 1 and 5000"),
        ("pod_logs", {"name": "x", "tail_lines": "10"}, "tail_lines must be an integer"),
        ("pod_logs", {"name": "x", "previous": "yes"}, "previous must be true or false"),
        ("pod_logs", {"tail_lines": 10}, "name is required"),
        ("pod_logs", {"name": "x", "container": "Bad Name"}, "not a valid Kubernetes object"),
        ("describe_pod", {"name": "x"}, "namespace is required"),
        ("describe_deployment", {"name": "x", "namespace": "*"}, "namespace is required"),
        ("list_events", {"kind": "pod!"}, "must be a Kubernetes kind"),
        ("list_nodes", {"namespace": "shop"}, "unknown argument"),
    ],
)
async def test_bad_arguments_go_back_to_the_model(
    tools: dict[str, Tool], kube: KubeServer, name: str, args: dict[str, Any], message: str
) -> None:
    context = NO_DEFAULT if name.startswith("describe") else CTX
    before = len(kube.requests)
    with pytest.raises(ToolArgumentError, match=message):
        await run(tools, name, args, context)
    assert len(kube.requests) == before  # nothing was sent


# --- the client on its own --------------------------------------------------------------


async def test_server_version_and_bearer_token(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    assert await clients["prod"].server_version() == "v1.33.1"
    assert kube.requests[-1].headers["Authorization"] == "Bearer test-token"


def test_a_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        KubeClients.build([("prod", str(tmp_path / "missing"), None, False)])


def test_a_missing_context_is_a_config_error(kubeconfig: Path) -> None:
    with pytest.raises(ConfigError, match="context nowhere"):
        KubeClient.from_kubeconfig(str(kubeconfig), "nowhere", name="prod")


# --- the server's write paths, through the official client --------------------------------


async def test_scale_dry_run_persists_nothing(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    before = kube.get("Deployment", "shop", "checkout-api")
    assert before is not None
    scale: Any = await client.call(
        "scale deployment shop/checkout-api",
        client.apps.patch_namespaced_deployment_scale,
        "checkout-api",
        "shop",
        {"spec": {"replicas": 5}},
        dry_run="All",
    )
    assert scale.spec.replicas == 5 and scale.kind == "Scale"
    assert kube.get("Deployment", "shop", "checkout-api") == before
    (write,) = kube.writes()
    assert write.method == "PATCH" and write.query == {"dryRun": "All"}
    assert write.path == "/apis/apps/v1/namespaces/shop/deployments/checkout-api/scale"
    assert write.content_type == "application/strategic-merge-patch+json"
    assert write.body == {"spec": {"replicas": 5}}

    scaled: Any = await client.call(
        "scale deployment shop/checkout-api",
        client.apps.patch_namespaced_deployment_scale,
        "checkout-api",
        "shop",
        {"spec": {"replicas": 5}},
    )
    assert scaled.spec.replicas == 5
    after = kube.get("Deployment", "shop", "checkout-api")
    assert after is not None and after["spec"]["replicas"] == 5
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])


async def test_invalid_scale_is_rejected(clients: KubeClients, demo: Demo) -> None:
    client = clients["prod"]
    with pytest.raises(KubeFailure, match=r"422.*spec.replicas") as caught:
        await client.call(
            "scale deployment shop/checkout-api",
            client.apps.patch_namespaced_deployment_scale,
            "checkout-api",
            "shop",
            {"spec": {"replicas": -1}},
            dry_run="All",
        )
    assert caught.value.status == 422


async def test_delete_with_a_wrong_uid_is_a_conflict(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    pod = kube.get("Pod", "shop", demo.crashing_pod)
    assert pod is not None
    with pytest.raises(KubeFailure) as caught:
        await client.call(
            f"delete pod shop/{demo.crashing_pod}",
            client.core.delete_namespaced_pod,
            demo.crashing_pod,
            "shop",
            body={"preconditions": {"uid": "not-the-uid"}},
        )
    assert caught.value.status == 409
    assert "409 Conflict to delete pod shop/" in str(caught.value)
    assert "Precondition failed: UID in precondition: not-the-uid" in str(caught.value)
    assert kube.get("Pod", "shop", demo.crashing_pod) is not None

    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    body = {"preconditions": {"uid": uid, "resourceVersion": version}}
    deleted: Any = await client.call(
        "delete pod", client.core.delete_namespaced_pod, demo.crashing_pod, "shop", body=body
    )
    assert deleted.metadata.uid == uid and deleted.metadata.deletion_timestamp is not None
    assert kube.get("Pod", "shop", demo.crashing_pod) is None
    assert [w.body for w in kube.writes()][-1] == body


async def test_delete_dry_run_and_replaced_target(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    pod = kube.get("Pod", "shop", demo.crashing_pod)
    assert pod is not None
    body = {"preconditions": {"uid": pod["metadata"]["uid"]}}
    await client.call(
        "delete pod",
        client.core.delete_namespaced_pod,
        demo.crashing_pod,
        "shop",
        body=body | {"dryRun": ["All"]},
    )
    assert kube.get("Pod", "shop", demo.crashing_pod) == pod

    kube.replace_object("Pod", "shop", demo.crashing_pod)  # same name, new uid
    with pytest.raises(KubeFailure) as caught:
        await client.call(
            "delete pod", client.core.delete_namespaced_pod, demo.crashing_pod, "shop", body=body
        )
    assert caught.value.status == 409


async def test_patch_with_a_stale_resource_version_is_a_conflict(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    patch = {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 4}}
    with pytest.raises(KubeFailure, match="the object has been modified") as caught:
        await client.call(
            "patch deployment",
            client.apps.patch_namespaced_deployment,
            "checkout-api",
            "shop",
            patch,
        )
    assert caught.value.status == 409


async def test_restart_patch_rolls_out_a_new_revision(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    restarted = {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}
    patch = {"spec": {"template": {"metadata": {"annotations": restarted}}}}
    result: Any = await client.call(
        "restart deployment",
        client.apps.patch_namespaced_deployment,
        "checkout-api",
        "shop",
        patch,
        _content_type="application/merge-patch+json",
    )
    assert result.spec.template.metadata.annotations == restarted
    assert result.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    assert kube.writes()[-1].content_type == "application/merge-patch+json"
    revisions = sorted(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
        for rs in kube.objects("ReplicaSet")
        if rs["metadata"]["name"].startswith("checkout-api-")
    )
    assert revisions == ["1", "2", "3"]


async def test_cordon_and_access_reviews(
    clients: KubeClients, kube: KubeServer, demo: Demo
) -> None:
    client = clients["prod"]
    node: Any = await client.call(
        "cordon node node-a", client.core.patch_node, "node-a", {"spec": {"unschedulable": True}}
    )
    assert node.spec.unschedulable is True

    kube.deny_access(verb="delete", resource="pods", namespace="shop")

    async def allowed(verb: str, namespace: str) -> bool:
        review = {"spec": {"resourceAttributes": {"verb": verb, "resource": "pods"}}}
        review["spec"]["resourceAttributes"]["namespace"] = namespace
        answer: Any = await client.call(
            "review access", client.authz.create_self_subject_access_review, review
        )
        return bool(answer.status.allowed)

    assert await allowed("delete", "shop") is False
    assert await allowed("delete", "dev-a") is True
    assert await allowed("get", "shop") is True
    assert [w.path for w in kube.writes()] == ["/api/v1/nodes/node-a"]  # SSARs are not writes
