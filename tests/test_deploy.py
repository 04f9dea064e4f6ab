"""deploy/: each kustomize overlay rendered with `kubectl kustomize`, as an operator applies
it, and checked for what the cluster would run: a hardened pod, probes on kelpie's health
port, tokens from a Secret, a config kelpie accepts, SQLite on a writable volume."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.app import config_problems
from bot.config import Config, parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
OVERLAYS = ["socket-mode", "http", "postgres", "namespaced-rbac"]


def render_text(overlay: str) -> str:
    return subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def render(overlay: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def kelpie_config(docs: list[dict[str, Any]]) -> Config:
    config_map = one(docs, "ConfigMap")
    config = parse_config(yaml.safe_load(config_map["data"]["kelpie.yaml"]))
    assert config_problems(config) == []
    return config


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
