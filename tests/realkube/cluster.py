"""A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager, v1.20.2)
for the `realkube` test tier: one per test session, started by `start.sh` in a private run
dir, stopped by `stop.sh` (by pid). The build is cached under ~/.cache/realkube (or
$REALKUBE_CACHE): the first start on a machine builds for ~15 minutes, later ones take
seconds. A server that cannot be built or started fails the tier; it is never skipped.

Identities (static bearer tokens): `admin` (system:masters) seeds; `kelpie` runs the tools
with exactly the ClusterRole in deploy/base/rbac-cluster.yaml (bound here to user kelpie);
`viewer` may only read, in namespace `shop`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RBAC_FILE = ROOT / "deploy" / "base" / "rbac-cluster.yaml"
KELPIE_USER = "kelpie"
T = TypeVar("T")
Obj = dict[str, Any]


class RealKubeError(RuntimeError):
    """The real server could not be built, started or seeded."""


def cache_dir() -> Path:
    return Path(os.environ.get("REALKUBE_CACHE") or Path.home() / ".cache" / "realkube")


@dataclass(frozen=True)
class RealKube:
    run: Path
    env: dict[str, str]

    @property
    def server(self) -> str:
        return self.env["REALKUBE_SERVER"]

    def kubeconfig(self, who: str) -> Path:
        """The kubeconfig of `admin`, `kelpie` or `viewer`."""
        return Path(self.env[f"REALKUBE_{who.upper()}_KUBECONFIG"])

    def token(self, who: str) -> str:
        return self.env[f"REALKUBE_{who.upper()}_TOKEN"]


def start(run: Path) -> RealKube:
    """Build (once) and start a control plane whose state lives in `run`."""
    cache = cache_dir()
    if not (cache / "bin" / "kube-apiserver").exists():
        print(f"realkube: building kube-apiserver into {cache} (~15 min the first time)")
    environment = os.environ | {"REALKUBE_RUN": str(run)}
    done = subprocess.run(
        ["bash", str(HERE / "start.sh"), str(cache)],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-25:])
        raise RealKubeError(f"realkube start.sh failed ({done.returncode}):\n{tail}")
    env: dict[str, str] = {}
    for line in (run / "env").read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value.strip('"')
    return RealKube(run, env)


def stop(cluster: RealKube) -> None:
    subprocess.run(
        ["bash", str(HERE / "stop.sh"), str(cache_dir())],
        env=os.environ | {"REALKUBE_RUN": str(cluster.run), "REALKUBE_PURGE": "1"},
        capture_output=True,
        check=False,
        timeout=60,
    )


def eventually(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll `probe` until it answers something truthy (the controllers work on their own)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RealKubeError(f"realkube: {what} did not happen within {timeout:g}s")
        time.sleep(0.1)


def binding(role: Obj, subject: Obj, namespace: str | None = None) -> Obj:
    """A binding of `role` to one subject ({"kind": "User", "name": …}): a RoleBinding in
    `namespace` when one is given, else a ClusterRoleBinding."""
    group = {"apiGroup": "rbac.authorization.k8s.io"}
    name = f"{role['metadata']['name']}-{subject['name']}"
    metadata: Obj = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": metadata,
        "roleRef": group | {"kind": role["kind"], "name": role["metadata"]["name"]},
        "subjects": [(group if subject["kind"] != "ServiceAccount" else {}) | subject],
    }


def shipped_rbac() -> list[Obj]:
    """deploy/base/rbac-cluster.yaml, plus its ClusterRole bound to user kelpie (the static
    token's identity), so the tools run with exactly those rules."""
    documents = [d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    user = {"kind": "User", "name": KELPIE_USER}
    return [*documents, binding(role, user)]


class Admin:
    """The admin identity: seeds and reads back, through the official client."""

    def __init__(self, cluster: RealKube) -> None:
        self.api = config.new_client_from_config(
            config_file=str(cluster.kubeconfig("admin")), persist_config=False
        )
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)

    def json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The object as the server sent it (camelCase), or None for 404."""
        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data or b"null")

    def apply_rbac(self) -> None:
        """Create the shipped RBAC, and bind its ClusterRole to user kelpie as well."""
        self.namespace("kelpie", wait=False)
        for doc in shipped_rbac():
            self.grant(doc)

    def grant(self, doc: Obj) -> None:
        """Create a ServiceAccount or an RBAC object (Role, ClusterRole, their bindings)."""
        namespace = doc["metadata"].get("namespace")
        match doc["kind"]:
            case "ServiceAccount":
                self.core.create_namespaced_service_account(namespace, doc)
            case "ClusterRole":
                self.rbac.create_cluster_role(doc)
            case "ClusterRoleBinding":
                self.rbac.create_cluster_role_binding(doc)
            case "Role":
                self.rbac.create_namespaced_role(namespace, doc)
            case "RoleBinding":
                self.rbac.create_namespaced_role_binding(namespace, doc)
            case kind:
                raise RealKubeError(f"cannot grant a {kind}")

    def namespace(self, name: str | None = None, *, wait: bool = True) -> str:
        """A fresh namespace; with `wait`, once pods may be created in it (default SA token)."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        self.core.create_namespace({"metadata": {"name": name}})
        if wait:
            eventually(
                f"the default ServiceAccount token of namespace {name}",
                lambda: (
                    self.json(self.core.read_namespaced_service_account, "default", name) or {}
                ).get("secrets"),
            )
        return name
