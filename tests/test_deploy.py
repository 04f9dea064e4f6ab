"""deploy/: each kustomize overlay rendered with `kubectl kustomize`, as an operator applies
it, and checked for what the cluster would run: a hardened pod, probes on kelpie's health
port, tokens from a Secret, a config kelpie accepts, SQLite on a writable volume, and each
listener the config enables (Slack's events, the alert webhooks, the MCP server) reachable by
its peer through a Service of its own, at the port the config says."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.app import config_problems
from bot.config import Config, SlackMode, parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
OVERLAYS = ["socket-mode", "http", "postgres", "namespaced-rbac", "alerts", "mcp"]


def render_text(overlay: str | Path) -> str:
    """An overlay of deploy/overlays by name, or any kustomization folder."""
    return subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def render(overlay: str | Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def kelpie_config(docs: list[dict[str, Any]]) -> Config:
    config_map = one(docs, "ConfigMap")
    data = yaml.safe_load(config_map["data"]["kelpie.yaml"])
    assert config_problems(data) == []
    return parse_config(data)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_runs_a_hardened_pod_with_probes_and_secret_tokens(overlay):
    docs = render(overlay)
    assert docs[0]["kind"] == "Namespace"  # applied first, so everything else has a home
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    config = kelpie_config(docs)

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "/" in container["image"] and ":" in container["image"]  # a registry and a tag
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["health"] == config.server.health.port
    assert config.server.health.host == "0.0.0.0"  # the kubelet probes the pod IP
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["envFrom"] == [{"secretRef": {"name": "kelpie-secrets"}}]
    assert all("value" not in env or "TOKEN" not in env["name"] for env in container["env"])
    config_map = one(docs, "ConfigMap")["metadata"]["name"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert volumes[mounts["/config"]["name"]]["configMap"]["name"] == config_map
    assert [cluster.in_cluster for cluster in config.kubernetes.clusters] == [True]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kelpie"


@pytest.mark.parametrize("overlay", ["socket-mode", "http", "namespaced-rbac"])
def test_sqlite_lives_on_a_writable_persistent_volume(overlay):
    docs = render(overlay)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    url = kelpie_config(docs).database.url
    assert url.startswith("sqlite:////")  # absolute: the root filesystem is read-only
    directory = str(Path(url.removeprefix("sqlite:///")).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == directory)
    assert not mount.get("readOnly", False)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert one(docs, "PersistentVolumeClaim")["metadata"]["name"] == claim
    assert one(docs, "Deployment")["spec"]["replicas"] == 1


def test_http_overlay_routes_the_configured_events_path_to_the_listener():
    docs = render("http")
    config = kelpie_config(docs)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    service = one(docs, "Service")
    ingress = one(docs, "Ingress")

    assert config.slack.mode.value == "http"
    assert ports[service["spec"]["ports"][0]["targetPort"]] == config.slack.http.port
    path = ingress["spec"]["rules"][0]["http"]["paths"][0]
    assert path["path"] == config.slack.http.path
    assert path["backend"]["service"]["name"] == service["metadata"]["name"]


# The Service in front of each inbound listener (never the health port: /metrics has no
# auth). Each listener has its own, so the MCP endpoint and the alert webhooks are not
# behind Slack's Service and its Ingress.
SERVICES = {"slack": "kelpie", "alerts": "kelpie-alerts", "mcp": "kelpie-mcp"}
# deploy/components: each adds a listener's port and Service; the overlay of the same name
# is the base with it and the config that enables the listener.
COMPONENTS = ["alerts", "mcp"]


def listeners(config: Config) -> dict[str, tuple[str, int]]:
    """What kelpie listens on with this config (host, port), by the container port name
    deploy/ gives each."""
    server = config.server
    found = {"health": (server.health.host, server.health.port)}
    if config.slack.mode is SlackMode.HTTP:
        found["slack"] = (config.slack.http.host, config.slack.http.port)
    if server.alerts is not None and config.alerts.receivers:
        found["alerts"] = (server.alerts.host, server.alerts.port)
    if server.mcp is not None:
        found["mcp"] = (server.mcp.host, server.mcp.port)
    return found


def reached_port(docs: list[dict[str, Any]], service: str, port: int) -> int:
    """The container port a peer reaches through Service `service` at `port`."""
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == service]
    pod = one(docs, "Deployment")["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (target,) = [p["targetPort"] for p in svc["spec"]["ports"] if p["port"] == port]
    (container,) = pod["spec"]["containers"]
    (reached,) = [p["containerPort"] for p in container["ports"] if p["name"] == target]
    return int(reached)


def assert_each_listener_has_its_service(docs: list[dict[str, Any]]) -> None:
    config = kelpie_config(docs)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    enabled = listeners(config)
    # A port for each listener and none without one: the manifests cannot drift from the config.
    assert ports == {name: port for name, (_, port) in enabled.items()}
    assert {host for host, _ in enabled.values()} == {"0.0.0.0"}  # peers reach the pod IP
    services = {d["metadata"]["name"]: d["spec"]["ports"] for d in docs if d["kind"] == "Service"}
    assert services.keys() == {SERVICES[name] for name in enabled if name != "health"}
    for name in enabled.keys() - {"health"}:
        (port,) = services[SERVICES[name]]
        assert port["targetPort"] == name
        assert reached_port(docs, SERVICES[name], port["port"]) == enabled[name][1]
    for ingress in (d for d in docs if d["kind"] == "Ingress"):
        backends = [p["backend"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]]
        assert {b["service"]["name"] for b in backends} == {SERVICES["slack"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_listener_the_config_enables_has_a_port_and_a_service_of_its_own(overlay):
    assert_each_listener_has_its_service(render(overlay))


def overlay_config(overlay: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        (DEPLOY / "overlays" / overlay / "kelpie.yaml").read_text()
    )
    return config


def test_the_components_add_their_listeners_to_another_overlay(tmp_path):
    """As the README tells an operator: the http overlay with both components, and http's
    config with the sections the alerts and mcp overlays enable them with."""
    config = overlay_config("http")
    for listener in COMPONENTS:
        enabling = overlay_config(listener)
        config[listener] = enabling[listener]
        config["server"][listener] = enabling["server"][listener]
    (tmp_path / "kelpie.yaml").write_text(yaml.safe_dump(config))
    kustomization = {
        "resources": [os.path.relpath(DEPLOY / "overlays" / "http", tmp_path)],
        "components": [os.path.relpath(DEPLOY / "components" / c, tmp_path) for c in COMPONENTS],
        "configMapGenerator": [
            {"name": "kelpie-config", "behavior": "replace", "files": ["kelpie.yaml"]}
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = render(tmp_path)
    assert listeners(kelpie_config(docs)).keys() == {"health", "slack", "alerts", "mcp"}
    assert_each_listener_has_its_service(docs)


@pytest.mark.parametrize(("overlay", "path"), [("alerts", "/alerts/alertmanager"), ("mcp", "/mcp")])
def test_the_readme_urls_peers_use_reach_the_configured_listener(overlay, path):
    """Alertmanager's webhook URL and an in-cluster agent's MCP URL, as the README gives
    them, lead through a Service of the overlay to the port the config listens on."""
    readme = (DEPLOY.parent / "README.md").read_text()
    found = re.search(rf"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc:(\d+){re.escape(path)}\b", readme)
    assert found, f"the README gives the in-cluster URL of {path}"
    service, namespace, port = found.groups()
    docs = render(overlay)
    assert one(docs, "Namespace")["metadata"]["name"] == namespace
    assert reached_port(docs, service, int(port)) == listeners(kelpie_config(docs))[overlay][1]


def test_postgres_overlay_runs_replicas_without_a_volume_claim():
    docs = render("postgres")
    assert [doc for doc in docs if doc["kind"] == "PersistentVolumeClaim"] == []
    assert one(docs, "Deployment")["spec"]["replicas"] > 1
    url = kelpie_config(docs).database.url
    assert url.startswith("postgresql://") and ":" not in url.split("//")[1].split("@")[0]


def test_namespaced_rbac_has_a_role_in_each_allowed_namespace_and_nothing_cluster_wide():
    docs = render("namespaced-rbac")
    # Cluster-wide only the impersonate grant (users and groups are cluster-scoped).
    cluster_wide = [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    assert {d["metadata"]["name"] for d in cluster_wide} == {"kelpie-impersonate"}
    assert {r["verbs"][0] for r in one(docs, "ClusterRole")["rules"]} == {"impersonate"}
    config = kelpie_config(docs)
    allowed = {ns for role in config.roles.values() for ns in role.namespaces}
    roles = {doc["metadata"]["namespace"] for doc in docs if doc["kind"] == "Role"}
    bindings = {doc["metadata"]["namespace"] for doc in docs if doc["kind"] == "RoleBinding"}
    assert "*" not in allowed
    assert allowed == roles == bindings
    for role in (doc for doc in docs if doc["kind"] == "Role"):
        resources = {r for rule in role["rules"] for r in rule["resources"]}
        assert "secrets" not in resources


def _example_identity() -> dict[str, Any]:
    """The `impersonate:` identity config/kelpie.example.yaml shows (a commented example)."""
    example = (DEPLOY.parent / "config" / "kelpie.example.yaml").read_text()
    (line,) = [ln for ln in example.splitlines() if ln.lstrip("# ").startswith("impersonate:")]
    identity: dict[str, Any] = yaml.safe_load(line.lstrip("# "))["impersonate"]
    return identity


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kelpie_may_impersonate_exactly_the_identities_the_config_example_names(overlay):
    docs = render(overlay)
    role = next(d for d in docs if d["metadata"]["name"] == "kelpie-impersonate")
    assert role["kind"] == "ClusterRole"
    granted = {}
    for rule in role["rules"]:
        assert rule["verbs"] == ["impersonate"] and rule["apiGroups"] == [""], rule
        (resource,) = rule["resources"]
        granted[resource] = set(rule["resourceNames"])  # never every user or group
    identity = _example_identity()
    assert granted == {"users": {identity["user"]}, "groups": set(identity["groups"])}
    bound = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "kelpie-impersonate"
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "kelpie"}
    ]


@pytest.mark.realkube
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_a_server_side_dry_run_on_a_real_api_server(realkube, overlay):
    """Every object of the overlay, as `kubectl apply` sends it, accepted by a real
    kube-apiserver's validation and admission (nothing is stored)."""
    cluster, _ = realkube
    rendered = render_text(overlay)
    kubeconfig = str(cluster.kubeconfig("admin"))
    applied = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-"],
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert applied.returncode == 0, applied.stderr
    lines = applied.stdout.splitlines()
    assert len(lines) == len([doc for doc in yaml.safe_load_all(rendered) if doc])
    assert all(line.endswith("(server dry run)") for line in lines), lines


AGGREGATE_LABEL = "kelpie.dev/aggregate-to-reader"


@pytest.mark.parametrize("overlay", ["socket-mode", "http", "postgres"])
def test_custom_kinds_come_from_an_aggregated_cluster_role_operators_extend(overlay):
    docs = render(overlay)
    role = next(d for d in docs if d["metadata"]["name"] == "kelpie-custom-kinds")
    assert role["kind"] == "ClusterRole" and role["rules"] == []
    selectors = role["aggregationRule"]["clusterRoleSelectors"]
    assert selectors == [{"matchLabels": {AGGREGATE_LABEL: "true"}}]
    bound = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "kelpie-custom-kinds"
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "kelpie"}
    ]
    readme = (DEPLOY.parent / "README.md").read_text()
    assert f'{AGGREGATE_LABEL}: "true"' in readme, "the README documents the label"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_shipped_role_grants_secrets_or_wildcards(overlay):
    for doc in render(overlay):
        for rule in doc.get("rules") or [] if doc["kind"] in ("Role", "ClusterRole") else []:
            assert "secrets" not in rule.get("resources", []), doc["metadata"]["name"]
            assert "*" not in rule.get("resources", []) + rule.get("apiGroups", [])
