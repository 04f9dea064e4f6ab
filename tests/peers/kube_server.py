"""A Kubernetes-compatible API server on 127.0.0.1 for tests, written with aiohttp.

It speaks the REST paths and JSON shapes of the real API server for the objects kelpie's
tools touch (namespaces, pods and their logs, deployments and their scale subresource,
replicasets, services, endpoints, nodes, core/v1 events) and SelfSubjectAccessReviews, so
the official `kubernetes` client can talk to it through an ordinary kubeconfig.

Objects live in memory with a uid, a monotonic resourceVersion and a creationTimestamp.
Writes honour `dryRun=All` (validate, answer, persist nothing), delete preconditions and
resourceVersion/uid preconditions in PATCH bodies (409 Conflict, like the real server).
PATCHes keep managedFields per field manager, and a server-side apply conflicts (409) with
another manager's fields unless forced (kube_fields.py).
Every request is recorded so tests can assert what the cluster received; faults (403,
any status, delays) can be injected per method and path.

Deliberately absent: watch, authentication, TLS, admission, and controllers, except one
shortcut: with `auto_reconcile` (the default) a changed Deployment reports its rollout as
finished at once (status follows spec; a new pod template gets a new ReplicaSet).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import re
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.eval.apiserver import field_matcher, label_matcher, merge_patch
from tests.peers.kube_fields import ApplyConflicts, FieldOwners, manager_of

Obj = dict[str, Any]

_BODY: web.RequestKey[Any] = web.RequestKey(
    "kube_body", object
)  # the decoded request body, parsed once
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
_REJECTED = "the server rejected our request due to an error in our request"
SERVICE_ACCOUNT = "system:serviceaccount:kelpie:kelpie"
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    api_version: str
    namespaced: bool
    also_served: tuple[str, ...] = ()

    def served_as(self, version: str) -> bool:
        return version == self.api_version or version in self.also_served

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def qualified(self) -> str:
        """How the real server names the resource in messages: `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES = {
    r.plural: r
    for r in (
        Resource("namespaces", "Namespace", "v1", False),
        Resource("nodes", "Node", "v1", False),
        Resource("pods", "Pod", "v1", True),
        Resource("services", "Service", "v1", True),
        Resource("endpoints", "Endpoints", "v1", True),
        Resource("events", "Event", "v1", True),
        Resource("deployments", "Deployment", "apps/v1", True),
        Resource("replicasets", "ReplicaSet", "apps/v1", True),
        # the diagnose toolset (bot/toolsets/kube/diagnose.py): workloads, HPAs and claims;
        # the changes family (rollout_history, what_changed): ControllerRevisions and
        # ConfigMaps (listed as metadata only); the generic toolset (list_resources,
        # get_resource): more built-in kinds, Secrets among them only so tests can prove no
        # tool ever asks for one. HPAs are served as autoscaling/v2 and, as the real server
        # does, as autoscaling/v1 too (the fake keeps one shape for both; the fields read
        # through v1 — replicas, lastScaleTime — are the same in both).
        Resource("configmaps", "ConfigMap", "v1", True),
        Resource("secrets", "Secret", "v1", True),
        Resource("persistentvolumeclaims", "PersistentVolumeClaim", "v1", True),
        Resource("statefulsets", "StatefulSet", "apps/v1", True),
        Resource("daemonsets", "DaemonSet", "apps/v1", True),
        Resource("controllerrevisions", "ControllerRevision", "apps/v1", True),
        Resource("jobs", "Job", "batch/v1", True),
        Resource("cronjobs", "CronJob", "batch/v1", True),
        Resource("ingresses", "Ingress", "networking.k8s.io/v1", True),
        Resource(
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            "autoscaling/v2",
            True,
            also_served=("autoscaling/v1",),
        ),
        Resource(
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "apiextensions.k8s.io/v1",
            False,
        ),
    )
}
KIND_TO_PLURAL = {r.kind: r.plural for r in RESOURCES.values()}


@dataclass(frozen=True)
class Demo:
    """Names in the `seed_demo` world (namespace shop, deployment checkout-api)."""

    crashing_pod: str
    healthy_pods: tuple[str, str]
    namespace: str = "shop"
    deployment: str = "checkout-api"


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any | None
    content_type: str | None
    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None  # filled in once answered
    # Impersonate-User and every Impersonate-Group header, as the real server reads them.
    acting_as: tuple[str | None, tuple[str, ...]] = (None, ())


@dataclass
class _Fault:
    method: str  # "*" matches any
    pattern: re.Pattern[str]
    status: int
    remaining: int | None

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method) and self.pattern.search(path) is not None


class _StatusError(Exception):
    """Answered as a `kind: Status` failure body, the way the real server reports errors."""

    def __init__(self, code: int, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


@dataclass(frozen=True)
class _Target:
    resource: Resource
    namespace: str | None
    name: str | None
    sub: str | None


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _status_body(code: int, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body |= {"message": message, "reason": _REASONS.get(code, "Unknown"), "code": code}
    if details:
        body["details"] = details
    return body


def _group_version(parts: list[str]) -> tuple[str, list[str]] | None:
    """The API version a path names and the rest of it: /api/v1/… or /apis/<group>/<v>/…
    for any group RESOURCES serves."""
    if parts[:2] == ["api", "v1"]:
        return "v1", parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        version = f"{parts[1]}/{parts[2]}"
        if any(r.served_as(version) for r in RESOURCES.values()):
            return version, parts[3:]
    return None


def _loggable(pod: Obj) -> list[str]:
    """The containers whose logs the real server serves: init containers too."""
    spec = pod["spec"]
    return [c["name"] for c in [*(spec.get("initContainers") or []), *spec["containers"]]]


def _parse_path(path: str) -> _Target | None:
    parts = path.strip("/").split("/")
    found = _group_version(parts)
    if found is None:
        return None
    version, rest = found
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = RESOURCES.get(rest[0]) if 1 <= len(rest) <= 3 else None
    if resource is None or not resource.served_as(version):
        return None
    name = rest[1] if len(rest) > 1 else None
    if resource.namespaced and namespace is None and name is not None:
        return None
    if not resource.namespaced and namespace is not None:
        return None
    return _Target(resource, namespace, name, rest[2] if len(rest) > 2 else None)


@dataclass(frozen=True)
class Attributes:
    """What RBAC sees in a request: verb, API group, resource[/subresource], namespace, name."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None


def request_attributes(method: str, path: str) -> Attributes | None:
    """The RBAC attributes of a resource request (None for /version and unknown paths)."""
    if path == SSAR_PATH:
        return Attributes("create", "authorization.k8s.io", "selfsubjectaccessreviews", None, None)
    target = _parse_path(path)
    if target is None:
        return _served_attributes(method, path)
    verb = {"GET": "get" if target.name else "list", "PATCH": "patch", "PUT": "update"}.get(
        method, "delete" if method == "DELETE" else "create"
    )
    res = target.resource
    resource = f"{res.plural}/{target.sub}" if target.sub else res.plural
    return Attributes(verb, res.group, resource, target.namespace, target.name)


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    try:
        return label_matcher(selector)(labels)
    except ValueError as exc:
        raise _StatusError(400, str(exc)) from exc


def field_selector_matches(plural: str, selector: str, obj: Obj) -> bool:
    try:
        return field_matcher(plural, selector)(obj)
    except ValueError as exc:
        raise _StatusError(400, str(exc)) from exc


def json_patch(target: Obj, operations: Any) -> Obj:
    """Apply an RFC 6902 JSON patch (add, remove, replace, test); any failure is the real
    server's bare 422."""
    if not isinstance(operations, list):
        raise _StatusError(400, "a JSON patch must be a list of operations")
    result = copy.deepcopy(target)
    for operation in operations:
        try:
            _json_patch_one(result, operation)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise _StatusError(422, _REJECTED) from exc
    return result


def _json_patch_one(doc: Obj, operation: Obj) -> None:
    op, path = operation["op"], str(operation["path"])
    keys = [k.replace("~1", "/").replace("~0", "~") for k in path.split("/")[1:]]
    parent: Any = doc
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last = keys[-1]
    index = (len(parent) if last == "-" else int(last)) if isinstance(parent, list) else None
    if op == "test":
        here = parent[index] if index is not None else parent[last]
        if here != operation["value"]:
            raise ValueError("test failed")
    elif op == "remove":
        del parent[index if index is not None else last]
    elif op in ("add", "replace"):
        if op == "replace":
            _ = parent[index] if index is not None else parent[last]  # must exist
        if index is not None and op == "add":
            parent.insert(index, copy.deepcopy(operation["value"]))
        elif index is not None:
            parent[index] = copy.deepcopy(operation["value"])
        else:
            parent[last] = copy.deepcopy(operation["value"])
    else:
        raise ValueError(f"unsupported op {op}")


def _diff_as_merge(before: Any, after: Any) -> Any:
    """The merge patch that turns `before` into `after` (null for removed keys)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return copy.deepcopy(after)
    patch: Obj = {key: None for key in before if key not in after}
    for key, value in after.items():
        if before.get(key) != value:
            patch[key] = _diff_as_merge(before.get(key), value)
    return patch


def _template_hash(namespace: str, name: str, template: Any) -> str:
    digest = hashlib.sha256(json.dumps([namespace, name, template], sort_keys=True).encode())
    return digest.hexdigest()[:10]


def _managed(manager: str, at: datetime, fields: Obj) -> Obj:
    """One managedFields entry, as an Update by `manager` at `at`."""
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": _stamp(at)}
    return entry | {"fieldsType": "FieldsV1", "fieldsV1": fields}


def _owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()


_ANYONE = Identity("system:unsecured", ("system:masters",))  # no authentication configured
_WHO: web.RequestKey[Identity] = web.RequestKey("kube_who", Identity)
_RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
_READ = ["get", "list", "watch"]
# The built-in ClusterRole `view` (the parts of it this server serves).
VIEW_ROLE: Obj = {
    "kind": "ClusterRole",
    "metadata": {"name": "view"},
    "rules": [
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/log", "services", "endpoints", "events"],
            "verbs": _READ,
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments", "deployments/scale", "replicasets"],
            "verbs": _READ,
        },
    ],
}


def _rule_allows(rule: Obj, seen: Attributes) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    return (
        has("verbs", seen.verb)
        and has("apiGroups", seen.group)
        and has("resources", seen.resource)
        and (not names or seen.name in names)
    )


def _subject_matches(subject: Obj, who: Identity) -> bool:
    match subject.get("kind"):
        case "User":
            return bool(subject.get("name") == who.user)
        case "Group":
            return subject.get("name") in who.groups
        case "ServiceAccount":
            name = f"system:serviceaccount:{subject.get('namespace')}:{subject.get('name')}"
            return name == who.user
    return False


def _forbidden(who: Identity, seen: Attributes) -> _StatusError:
    """403 with the real server's message and details."""
    resource = seen.resource.partition("/")[0]
    qualified = f"{resource}.{seen.group}" if seen.group else resource
    subject = f'{qualified} "{seen.name}"' if seen.name else qualified
    where = f'in the namespace "{seen.namespace}"' if seen.namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{who.user}" cannot {seen.verb} resource '
        f'"{seen.resource}" in API group "{seen.group}" {where}'
    )
    details: Obj = {"group": seen.group, "kind": resource}
    if seen.name:
        details["name"] = seen.name
    return _StatusError(403, message, details)


class KubeServer:
    """The fake API server. Seed it, `await start()`, point a kubeconfig at it."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.auto_reconcile = True
        # Verification watches (#28 item 7): with `stall_rollouts`, a changed Deployment
        # starts its rollout (a new pod template gets its revision and ReplicaSet) but no new
        # pod becomes available; with `stall_deadline` the controller has also given up
        # (Progressing: ProgressDeadlineExceeded). `finish_rollout` completes one later.
        self.stall_rollouts = False
        self.stall_deadline = True
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {p: {} for p in RESOURCES}
        self._logs: dict[tuple[str, str, str, bool], list[tuple[datetime, str]]] = {}
        self._rv = 100
        self._ips = 10
        self._faults: list[_Fault] = []
        self._delays: list[tuple[re.Pattern[str], float]] = []
        self._response_delays: list[tuple[re.Pattern[str], float]] = []
        self._holds: list[tuple[re.Pattern[str], asyncio.Event]] = []
        self._deny_rules: list[dict[str, str]] = []
        # Bearer token -> identity; empty: no authentication, everything allowed.
        self._tokens: dict[str, Identity] = {}
        self._rbac: list[Obj] = [VIEW_ROLE]
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._init_generic()

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # A short shutdown timeout: stop() must not wait on requests held by `delay`.
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        assert self._port is not None, "start() the server first"
        return f"http://127.0.0.1:{self._port}"

    def write_kubeconfig(
        self, path: str | Path, context: str = "test", *, token: str = "test-token"
    ) -> Path:
        """Write a kubeconfig (JSON is YAML) whose `context` points at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": f"{context}-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": f"{context}-user", "user": {"token": token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": f"{context}-cluster", "user": f"{context}-user"},
                }
            ],
            "current-context": context,
        }
        target = Path(path)
        target.write_text(json.dumps(config, indent=2))
        return target

    # --- fault injection and inspection --------------------------------------------

    def forbid(self, method: str, path_regex: str) -> None:
        """Answer 403 Forbidden (with an RBAC-style message) to matching requests.

        `method` is an HTTP method or "*"; `path_regex` is searched in the request path.
        """
        self._faults.append(_Fault(method.upper(), re.compile(path_regex), 403, None))

    def fail(self, method: str, path_regex: str, status: int, times: int | None = None) -> None:
        """Answer `status` to the next `times` matching requests (None: all of them)."""
        self._faults.append(_Fault(method.upper(), re.compile(path_regex), status, times))

    def delay(self, path_regex: str, seconds: float) -> None:
        self._delays.append((re.compile(path_regex), seconds))

    def hold(self, path_regex: str) -> asyncio.Event:
        """Keep matching requests waiting until the returned event is set (a tool that runs
        exactly as long as a test needs, whatever the machine's load)."""
        released = asyncio.Event()
        self._holds.append((re.compile(path_regex), released))
        return released

    def delay_response(self, path_regex: str, seconds: float) -> None:
        """Apply matching requests at once but answer them `seconds` later (a slow network
        after the server committed: the change is in, the client does not know yet)."""
        self._response_delays.append((re.compile(path_regex), seconds))

    def deny_access(
        self, *, verb: str | None = None, resource: str | None = None, namespace: str | None = None
    ) -> None:
        """Make SelfSubjectAccessReviews matching every given field answer allowed: false."""
        rule = {"verb": verb, "resource": resource, "namespace": namespace}
        self._deny_rules.append({k: v for k, v in rule.items() if v is not None})

    def authenticate(self, tokens: dict[str, Identity]) -> None:
        """From now on, answer 401 without one of these bearer tokens, and authorize every
        request (impersonation included) by the RBAC objects given to `add_rbac`."""
        self._tokens = dict(tokens)

    def add_rbac(self, obj: Obj) -> None:
        """A Role, ClusterRole, RoleBinding or ClusterRoleBinding (as YAML would give it)."""
        if obj.get("kind") not in _RBAC_KINDS:
            raise ValueError(f"not an RBAC object: {obj.get('kind')}")
        self._rbac.append(copy.deepcopy(obj))

    def allows(self, who: Identity, seen: Attributes) -> bool:
        """What the RBAC authorizer decides (system:masters may do anything)."""
        if "system:masters" in who.groups:
            return True
        if seen.resource == "selfsubjectaccessreviews" and seen.verb == "create":
            return True  # system:basic-user, bound to every authenticated identity
        for binding in self._rbac:
            if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            scope = binding["metadata"].get("namespace")
            if binding["kind"] == "RoleBinding" and scope != seen.namespace:
                continue
            if not any(_subject_matches(s, who) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            for role in self._rbac:
                if role["kind"] != ref["kind"] or role["metadata"]["name"] != ref["name"]:
                    continue
                if role["kind"] == "Role" and role["metadata"].get("namespace") != scope:
                    continue
                if any(_rule_allows(rule, seen) for rule in self._rules_of(role)):
                    return True
        return False

    def clear_faults(self) -> None:
        self._faults.clear()
        self._delays.clear()
        self._response_delays.clear()
        for _, released in self._holds:
            released.set()
        self._holds.clear()
        self._deny_rules.clear()

    def writes(self) -> list[RecordedRequest]:
        """Write attempts received (dry runs and refused ones included), SSARs excluded."""
        return [r for r in self.requests if r.method in WRITE_METHODS and r.path != SSAR_PATH]

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A copy of a stored object (namespace "" for cluster-scoped kinds), or None."""
        obj = self._objects[KIND_TO_PLURAL[kind]].get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str) -> list[Obj]:
        return [copy.deepcopy(o) for _, o in sorted(self._objects[KIND_TO_PLURAL[kind]].items())]

    # --- seeding ---------------------------------------------------------------------

    def put(self, kind: str, obj: Obj, *, age: float = 0.0) -> Obj:
        """Store (create or replace) an object, filling in the server-owned metadata.

        Like every seeding helper it answers a copy: changing it does not change the world.
        """
        return copy.deepcopy(self._store(kind, copy.deepcopy(obj), age=age))

    def _store(self, kind: str, obj: Obj, *, age: float = 0.0) -> Obj:
        resource = RESOURCES[KIND_TO_PLURAL[kind]]
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        old = self._objects[resource.plural].get((namespace, meta["name"]))
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _stamp(_now() - timedelta(seconds=age)))
        meta["resourceVersion"] = self._next_rv()
        if resource.namespaced:
            meta["namespace"] = namespace
        self._objects[resource.plural][(namespace, meta["name"])] = obj
        return obj

    def add_namespace(self, name: str, *, labels: dict[str, str] | None = None) -> Obj:
        labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
        obj = {"metadata": {"name": name, "labels": labels}, "spec": {"finalizers": ["kubernetes"]}}
        return self.put("Namespace", obj | {"status": {"phase": "Active"}}, age=86400 * 30)

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
        ready: bool = True,
        restarts: int = 0,
        node: str | None = "node-a",
        logs: str = "",
        previous_logs: str | None = None,
        waiting_reason: str | None = None,
        last_termination_reason: str | None = None,
        containers: Iterable[str] = ("app",),
        image: str = "registry.example.com/app:1.0",
        owner: Obj | None = None,
        age: float = 3600.0,
    ) -> Obj:
        """A pod; `ready`, restarts and reasons apply to each of its containers."""
        start = _stamp(_now() - timedelta(seconds=age))
        names = list(containers)
        running = phase == "Running" and waiting_reason is None
        ready = ready and running
        statuses = []
        for container in names:
            state: Obj
            if waiting_reason is not None:
                message = {
                    "CrashLoopBackOff": "back-off 5m0s restarting failed "
                    f"container={container} pod={name}",
                    "ImagePullBackOff": f'Back-off pulling image "{image}"',
                }.get(waiting_reason)
                state = {"waiting": {"reason": waiting_reason}}
                if message:
                    state["waiting"]["message"] = message
            elif phase == "Running":
                state = {"running": {"startedAt": start}}
            elif phase in ("Succeeded", "Failed"):
                exit_code = 0 if phase == "Succeeded" else 1
                reason = "Completed" if phase == "Succeeded" else "Error"
                finished = {"startedAt": start, "finishedAt": _stamp(_now())}
                state = {"terminated": {"exitCode": exit_code, "reason": reason, **finished}}
            else:
                state = {"waiting": {"reason": "ContainerCreating"}}
            last: Obj = {}
            if last_termination_reason is not None:
                code = 137 if last_termination_reason == "OOMKilled" else 1
                when = {"startedAt": start, "finishedAt": _stamp(_now() - timedelta(seconds=40))}
                last = {"terminated": {"exitCode": code, "reason": last_termination_reason, **when}}
            statuses.append(
                {
                    "name": container,
                    "image": image,
                    "imageID": f"{image}@sha256:{'0' * 64}",
                    "ready": ready,
                    "started": running,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": last,
                }
            )
        spec_containers = [
            {
                "name": container,
                "image": image,
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "256Mi"},
                },
                # A secret reference: tools must never resolve it.
                "env": [
                    {"name": "LOG_LEVEL", "value": "info"},
                    {
                        "name": "DB_PASSWORD",
                        "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "pw"}},
                    },
                ],
            }
            for container in names
        ]

        def condition(kind: str, ok: bool) -> Obj:
            cond = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": start}
            return cond if ok else cond | {"reason": "ContainersNotReady"}

        scheduled = node is not None
        self._ips += 1
        status: Obj = {
            "phase": phase,
            "conditions": [
                condition("PodScheduled", scheduled),
                condition("Initialized", scheduled),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ],
            "startTime": start,
            "qosClass": "Burstable",
        }
        if scheduled:
            status |= {"containerStatuses": statuses, "hostIP": "192.168.1.10"}
            status["podIP"] = f"10.244.{self._ips // 250}.{self._ips % 250}"
        else:
            status["conditions"][0] |= {
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 Insufficient memory.",
            }
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner is not None:
            meta["ownerReferences"] = [_owner_ref(owner)]
        spec: Obj = {"containers": spec_containers, "restartPolicy": "Always"}
        spec |= {"serviceAccountName": "default", "schedulerName": "default-scheduler"}
        if node is not None:
            spec["nodeName"] = node
        pod = self.put("Pod", {"metadata": meta, "spec": spec, "status": status}, age=age)
        self.set_logs(namespace, name, logs, container=names[0])
        if previous_logs is not None:
            self.set_logs(namespace, name, previous_logs, container=names[0], previous=True)
        return pod

    def set_logs(
        self,
        namespace: str,
        pod: str,
        text: str,
        *,
        container: str = "app",
        previous: bool = False,
        seconds_apart: float = 1.0,
    ) -> None:
        """Set a container's log; the last line is stamped now, earlier ones further back."""
        lines = text.splitlines(keepends=True)
        now = datetime.now(UTC)
        stamped = [
            (now - timedelta(seconds=seconds_apart * (len(lines) - 1 - i)), line)
            for i, line in enumerate(lines)
        ]
        self._logs[(namespace, pod, container, previous)] = stamped

    def add_deployment(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int = 1,
        ready: int | None = None,
        labels: dict[str, str] | None = None,
        image: str = "registry.example.com/app:1.0",
        revision: int = 1,
        pods: bool = False,
        age: float = 86400.0,
    ) -> Obj:
        """A deployment and its current ReplicaSet (with the revision annotation).

        With `pods`, also `replicas` pods owned by the ReplicaSet, the first `ready` ready.
        """
        ready = replicas if ready is None else ready
        labels = labels or {"app": name}
        container: Obj = {"name": "app", "image": image, "ports": [{"containerPort": 8080}]}
        container["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
        template = {"metadata": {"labels": dict(labels)}, "spec": {"containers": [container]}}
        spec = {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": template,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        }
        meta = {"name": name, "namespace": namespace, "labels": dict(labels), "generation": 1}
        meta["annotations"] = {"deployment.kubernetes.io/revision": str(revision)}
        deployment = self._store("Deployment", {"metadata": meta, "spec": spec}, age=age)
        self._set_deployment_status(deployment, ready=ready)
        deployment = copy.deepcopy(deployment)
        rs = self._add_replicaset(deployment, revision, replicas, ready, age=age)
        if pods:
            pod_labels = rs["spec"]["selector"]["matchLabels"]
            for i in range(replicas):
                pod_name = f"{rs['metadata']['name']}-{uuid.uuid4().hex[:5]}"
                ok = i < ready
                self.add_pod(
                    namespace,
                    pod_name,
                    labels=pod_labels,
                    ready=ok,
                    restarts=0 if ok else 5,
                    waiting_reason=None if ok else "CrashLoopBackOff",
                    image=image,
                    owner=rs,
                    node=("node-a", "node-b")[i % 2],
                    logs=f"{name} started\nlistening on :8080\n",
                    age=age,
                )
        return deployment

    def add_service(
        self,
        namespace: str,
        name: str,
        *,
        selector: dict[str, str] | None = None,
        ports: Iterable[tuple[int, int]] = ((80, 8080),),
        type: str = "ClusterIP",
        cluster_ip: str = "10.96.0.10",
    ) -> Obj:
        port_specs: list[Obj] = [
            {"name": f"p{port}", "port": port, "targetPort": target, "protocol": "TCP"}
            for port, target in ports
        ]
        if type in ("NodePort", "LoadBalancer"):
            for offset, spec in enumerate(port_specs):
                spec["nodePort"] = 30080 + offset
        spec = {"type": type, "clusterIP": cluster_ip, "clusterIPs": [cluster_ip]}
        spec |= {"ports": port_specs, "selector": dict(selector or {"app": name})}
        status: Obj = {"loadBalancer": {}}
        if type == "LoadBalancer":
            status = {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        obj = {"metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}
        return self.put("Service", obj, age=86400)

    def add_endpoints(
        self,
        namespace: str,
        name: str,
        *,
        ready: Iterable[tuple[str, str]] = (),
        not_ready: Iterable[tuple[str, str]] = (),
        port: int = 8080,
    ) -> Obj:
        """Endpoints for a service; addresses are (ip, pod name) pairs."""

        def address(ip: str, pod: str) -> Obj:
            return {"ip": ip, "targetRef": {"kind": "Pod", "name": pod, "namespace": namespace}}

        subset: Obj = {"ports": [{"name": f"p{port}", "port": port, "protocol": "TCP"}]}
        if ready_list := [address(ip, pod) for ip, pod in ready]:
            subset["addresses"] = ready_list
        if not_ready_list := [address(ip, pod) for ip, pod in not_ready]:
            subset["notReadyAddresses"] = not_ready_list
        obj = {"metadata": {"name": name, "namespace": namespace}, "subsets": [subset]}
        return self.put("Endpoints", obj)

    def add_node(
        self,
        name: str,
        *,
        ready: bool = True,
        memory_pressure: bool = False,
        disk_pressure: bool = False,
        unschedulable: bool = False,
        taints: Iterable[Obj] = (),
        cpu: str = "4",
        memory: str = "16Gi",
        pods: str = "110",
    ) -> Obj:
        def condition(kind: str, on: bool, reason: str) -> Obj:
            stamp = _stamp(_now() - timedelta(seconds=30))
            return {"type": kind, "status": "True" if on else "False", "reason": reason} | {
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }

        status = {
            "conditions": [
                condition("MemoryPressure", memory_pressure, "KubeletHasSufficientMemory"),
                condition("DiskPressure", disk_pressure, "KubeletHasNoDiskPressure"),
                condition("PIDPressure", False, "KubeletHasSufficientPID"),
                condition("Ready", ready, "KubeletReady" if ready else "NodeStatusUnknown"),
            ],
            "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
            "allocatable": {"cpu": f"{int(cpu) * 1000 - 100}m", "memory": memory, "pods": pods},
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {
                key: "x"
                for key in ("bootID", "machineID", "systemUUID", "kernelVersion", "osImage")
            }
            | {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "",
            },
        }
        spec: Obj = {"podCIDR": "10.244.0.0/24"}
        if unschedulable:
            spec["unschedulable"] = True
        if taints := list(taints):
            spec["taints"] = taints
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        obj = {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}
        return self.put("Node", obj, age=86400 * 10)

    def add_event(
        self,
        namespace: str,
        kind: str,
        name: str,
        reason: str,
        message: str,
        *,
        type: str = "Warning",
        count: int = 1,
        age: float = 60.0,
        component: str = "kubelet",
    ) -> Obj:
        """A core/v1 event about an object (its uid is filled in when the object exists)."""
        involved: Obj = {"kind": kind, "name": name, "namespace": namespace}
        plural = KIND_TO_PLURAL.get(kind)
        target = self._objects[plural].get((namespace, name)) if plural else None
        if target is None and plural:
            target = self._objects[plural].get(("", name))
        if target is not None:
            involved["uid"] = target["metadata"]["uid"]
            involved["apiVersion"] = target["apiVersion"]
        last = _now() - timedelta(seconds=age)
        obj = {
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type,
            "count": count,
            "firstTimestamp": _stamp(last - timedelta(minutes=count)),
            "lastTimestamp": _stamp(last),
            "source": {"component": component},
            "reportingComponent": component,
        }
        return self.put("Event", obj, age=age)

    def replace_object(self, kind: str, namespace: str, name: str) -> Obj:
        """Recreate an object under the same name: new uid, new resourceVersion."""
        key = (namespace if RESOURCES[KIND_TO_PLURAL[kind]].namespaced else "", name)
        obj = copy.deepcopy(self._objects[KIND_TO_PLURAL[kind]][key])
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["metadata"]["creationTimestamp"] = _stamp(_now())
        return self.put(kind, obj)

    def seed_demo(self) -> Demo:
        """A small realistic world: a shop whose checkout-api has one pod crash-looping.

        Answers the generated names tests need (pod names carry a pod-template-hash).
        """
        for namespace in ("default", "kube-system", "shop", "team-checkout", "dev-a"):
            self.add_namespace(namespace)
        self.add_node("node-a")
        self.add_node("node-b", taints=[{"key": "dedicated", "value": "batch"} | _NO_SCHEDULE])
        labels = {"app": "checkout-api", "tier": "backend"}
        deployment = self.add_deployment(
            "shop", "checkout-api", replicas=3, ready=2, labels=labels, revision=2
        )
        old_template = copy.deepcopy(deployment["spec"]["template"])
        old_template["spec"]["containers"][0]["image"] = "registry.example.com/app:0.9"
        self._add_replicaset(deployment, 1, 0, 0, template=old_template, age=86400 * 3)
        rs = self.get("ReplicaSet", "shop", self._rs_name(deployment))
        assert rs is not None
        pod_labels = rs["spec"]["selector"]["matchLabels"]
        base = rs["metadata"]["name"]
        good_logs = "started checkout-api\nlistening on :8080\nGET /healthz 200\n"
        for suffix, node in (("x2x9q", "node-a"), ("b7kfm", "node-b")):
            self.add_pod("shop", f"{base}-{suffix}", labels=pod_labels, node=node, owner=rs)
            self.set_logs("shop", f"{base}-{suffix}", good_logs)
        crashing = f"{base}-m4n8p"
        self.add_pod(
            "shop",
            crashing,
            labels=pod_labels,
            ready=False,
            restarts=7,
            node="node-a",
            owner=rs,
            waiting_reason="CrashLoopBackOff",
            last_termination_reason="OOMKilled",
            logs="starting checkout-api\nloading catalog cache\n",
            previous_logs="starting checkout-api\nloading catalog cache\n"
            "java.lang.OutOfMemoryError: Java heap space\n"
            "\tat com.shop.checkout.Cache.load(Cache.java:88)\n",
        )
        self.add_deployment("shop", "frontend", replicas=2, pods=True)
        self.add_service("shop", "checkout-api", selector=labels, cluster_ip="10.96.12.34")
        self.add_endpoints(
            "shop",
            "checkout-api",
            ready=[("10.244.0.11", f"{base}-x2x9q"), ("10.244.0.12", f"{base}-b7kfm")],
            not_ready=[("10.244.0.13", crashing)],
        )
        back_off = f"Back-off restarting failed container app in pod {crashing}_shop"
        self.add_event("shop", "Pod", crashing, "BackOff", back_off, count=42, age=20)
        self.add_event(
            "shop",
            "Pod",
            crashing,
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            count=12,
            age=90,
        )
        pulled = "Container image already present on machine"
        self.add_event("shop", "Pod", crashing, "Pulled", pulled, type="Normal", count=8)
        self.add_event(
            "shop",
            "Deployment",
            "checkout-api",
            "ScalingReplicaSet",
            f"Scaled up replica set {base} to 3",
            type="Normal",
            age=3000,
            component="deployment-controller",
        )
        self.add_deployment(
            "kube-system", "coredns", replicas=2, pods=True, labels={"k8s-app": "kube-dns"}
        )
        self.add_deployment("team-checkout", "checkout-worker", replicas=1, pods=True)
        self.add_pod("dev-a", "sandbox", phase="Pending", ready=False, node=None, age=600)
        self.add_event(
            "dev-a",
            "Pod",
            "sandbox",
            "FailedScheduling",
            "0/2 nodes are available: 2 Insufficient memory.",
            count=9,
            component="default-scheduler",
        )
        return Demo(crashing_pod=crashing, healthy_pods=(f"{base}-x2x9q", f"{base}-b7kfm"))

    # --- seeding: the changes family (rollout_history, what_changed), at given times --------

    def add_deployment_history(
        self,
        namespace: str,
        name: str,
        revisions: Iterable[tuple[str, datetime, str]],
        *,
        env: Iterable[tuple[str, str]] = (),
    ) -> Obj:
        """A deployment and one ReplicaSet per (image, created at, change-cause) revision,
        numbered from 1; the last is current, and only its container has `env`."""
        history = list(revisions)
        image = history[-1][0]
        deployment = self.add_deployment(namespace, name, image=image, revision=len(history))
        self._objects["replicasets"].pop((namespace, self._rs_name(deployment)))
        for number, (image, at, cause) in enumerate(history, start=1):
            template = copy.deepcopy(deployment["spec"]["template"])
            (container,) = template["spec"]["containers"]
            container["image"] = image
            if env and number == len(history):
                container["env"] = [{"name": k, "value": v} for k, v in env]
            replicas = deployment["spec"]["replicas"] if number == len(history) else 0
            rs = self._add_replicaset(deployment, number, replicas, replicas, template=template)
            stored = self._objects["replicasets"][(namespace, rs["metadata"]["name"])]
            stored["metadata"]["creationTimestamp"] = _stamp(at)
            if cause:
                stored["metadata"]["annotations"]["kubernetes.io/change-cause"] = cause
            if number == len(history):
                deployment["spec"]["template"] = copy.deepcopy(template)
        return self.put("Deployment", deployment)

    def add_revisioned(
        self,
        kind: str,
        namespace: str,
        name: str,
        revisions: Iterable[tuple[str, datetime, str]],
    ) -> Obj:
        """A StatefulSet or DaemonSet and one ControllerRevision per (image, created at,
        change-cause), numbered from 1, its data the template patch its controller stores."""
        history = list(revisions)
        labels = {"app": name}

        def template(image: str) -> Obj:
            container = {"name": "app", "image": image}
            return {"metadata": {"labels": dict(labels)}, "spec": {"containers": [container]}}

        spec: Obj = {
            "selector": {"matchLabels": dict(labels)},
            "template": template(history[-1][0]),
        }
        if kind == "StatefulSet":
            spec |= {"replicas": 1, "serviceName": name}
        meta = {"name": name, "namespace": namespace, "labels": dict(labels), "generation": 1}
        workload = self.put(kind, {"metadata": meta, "spec": spec}, age=86400)
        names = []
        for number, (image, at, cause) in enumerate(history, start=1):
            names.append(f"{name}-{_template_hash(namespace, name, template(image))}")
            revision_meta: Obj = {"name": names[-1], "namespace": namespace}
            revision_meta |= {"labels": dict(labels), "ownerReferences": [_owner_ref(workload)]}
            revision_meta["creationTimestamp"] = _stamp(at)
            if cause:
                revision_meta["annotations"] = {"kubernetes.io/change-cause": cause}
            data = {"spec": {"template": template(image) | {"$patch": "replace"}}}
            self.put(
                "ControllerRevision",
                {"metadata": revision_meta} | {"data": data} | {"revision": number},
            )
        if kind == "StatefulSet":
            workload["status"] = {"currentRevision": names[-1], "updateRevision": names[-1]}
            workload = self.put(kind, workload)
        return workload

    def add_configmap(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        created: datetime | None = None,
        changed: datetime | None = None,
        manager: str = "kubectl-edit",
    ) -> Obj:
        """A ConfigMap created by kubectl (an hour ago unless `created`), last written by
        `manager` at `changed`."""
        created = created or _now() - timedelta(hours=1)
        managed = [_managed("kubectl-create", created, {"f:data": {}})]
        if changed is not None:
            managed.append(_managed(manager, changed, {"f:data": {}}))
        meta = {"name": name, "namespace": namespace, "creationTimestamp": _stamp(created)}
        return self.put(
            "ConfigMap", {"metadata": meta | {"managedFields": managed}, "data": dict(data)}
        )

    def add_hpa(
        self,
        namespace: str,
        name: str,
        target: str,
        *,
        scaled: datetime,
        current: int,
        desired: int,
    ) -> Obj:
        """An autoscaling/v1 HPA of deployment `target` that last scaled at `scaled`."""
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
        spec = {"scaleTargetRef": ref, "minReplicas": 1, "maxReplicas": 10}
        status = {"lastScaleTime": _stamp(scaled), "currentReplicas": current}
        status["desiredReplicas"] = desired
        meta = {"name": name, "namespace": namespace}
        return self.put(
            "HorizontalPodAutoscaler", {"metadata": meta, "spec": spec, "status": status}
        )

    def add_event_at(
        self,
        namespace: str,
        kind: str,
        name: str,
        reason: str,
        message: str,
        *,
        at: datetime,
        type: str = "Warning",
    ) -> Obj:
        """A core/v1 event last seen at `at`."""
        event = self.add_event(namespace, kind, name, reason, message, type=type)
        event |= {"firstTimestamp": _stamp(at), "lastTimestamp": _stamp(at)}
        event["metadata"]["creationTimestamp"] = _stamp(at)
        return self.put("Event", event)

    def set_last_termination(
        self, namespace: str, pod: str, *, at: datetime, reason: str = "Error", exit_code: int = 1
    ) -> Obj:
        """The pod's containers last terminated at `at` (and restarted once more since)."""
        obj = self._objects["pods"][(namespace, pod)]
        for status in obj["status"].get("containerStatuses") or []:
            started = _stamp(at - timedelta(minutes=5))
            last = {"exitCode": exit_code, "reason": reason, "startedAt": started}
            status["lastState"] = {"terminated": last | {"finishedAt": _stamp(at)}}
            status["restartCount"] = int(status.get("restartCount") or 0) + 1
        return self.put("Pod", obj)

    def set_node_condition(
        self, name: str, kind: str, status: str, reason: str, *, at: datetime
    ) -> Obj:
        """One condition of a node, transitioned at `at`."""
        node = self._objects["nodes"][("", name)]
        for condition in node["status"]["conditions"]:
            if condition["type"] == kind:
                condition |= {"status": status, "reason": reason}
                condition["lastTransitionTime"] = _stamp(at)
        return self.put("Node", node)

    # --- internals: objects ----------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @staticmethod
    def _rs_name(deployment: Obj) -> str:
        meta = deployment["metadata"]
        template = deployment["spec"]["template"]
        return f"{meta['name']}-{_template_hash(meta['namespace'], meta['name'], template)}"

    def _add_replicaset(
        self,
        deployment: Obj,
        revision: int,
        replicas: int,
        ready: int,
        *,
        template: Obj | None = None,
        age: float = 0.0,
    ) -> Obj:
        meta = deployment["metadata"]
        template = copy.deepcopy(template or deployment["spec"]["template"])
        hash_ = _template_hash(meta["namespace"], meta["name"], template)
        template["metadata"].setdefault("labels", {})["pod-template-hash"] = hash_
        labels = dict(template["metadata"]["labels"])
        annotations = {"deployment.kubernetes.io/revision": str(revision)}
        annotations["deployment.kubernetes.io/desired-replicas"] = str(replicas)
        rs_meta = {"name": f"{meta['name']}-{hash_}", "namespace": meta["namespace"]}
        rs_meta |= {"labels": labels, "annotations": annotations, "generation": 1}
        rs_meta["ownerReferences"] = [_owner_ref(deployment)]
        status = {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}
        status |= {"fullyLabeledReplicas": replicas, "observedGeneration": 1}
        spec = {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}
        return self.put(
            "ReplicaSet", {"metadata": rs_meta, "spec": spec, "status": status}, age=age
        )

    def _set_deployment_status(self, deployment: Obj, *, ready: int) -> None:
        replicas = deployment["spec"]["replicas"]
        stamp = _stamp(_now())
        available = ready >= replicas - replicas // 4  # maxUnavailable 25%, rounded down
        name = self._rs_name(deployment)
        deployment["status"] = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable"
                    if available
                    else "MinimumReplicasUnavailable",
                    "message": "Deployment has minimum availability."
                    if available
                    else "Deployment does not have minimum availability.",
                    "lastUpdateTime": stamp,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable",
                    "message": f'ReplicaSet "{name}" has successfully progressed.',
                    "lastUpdateTime": stamp,
                    "lastTransitionTime": stamp,
                },
            ],
        }
        if replicas > ready:
            deployment["status"]["unavailableReplicas"] = replicas - ready

    def _reconcile_deployment(self, before: Obj, after: Obj) -> None:
        """Stand in for the deployment controller: the rollout finishes at once."""
        replicas = after["spec"]["replicas"]
        self._set_deployment_status(after, ready=replicas)
        namespace = after["metadata"]["namespace"]
        if before["spec"]["template"] != after["spec"]["template"]:
            annotations = after["metadata"].setdefault("annotations", {})
            revision = int(annotations.get("deployment.kubernetes.io/revision", "1")) + 1
            annotations["deployment.kubernetes.io/revision"] = str(revision)
            for rs in self._owned_replicasets(after):
                rs["spec"]["replicas"] = 0
                rs["status"] |= {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
                self._store("ReplicaSet", rs)
            self._add_replicaset(after, revision, replicas, replicas)
        elif current := self._objects["replicasets"].get((namespace, self._rs_name(after))):
            current["spec"]["replicas"] = replicas
            current["status"] |= {"replicas": replicas, "readyReplicas": replicas}
            self._store("ReplicaSet", current)

    # --- verification watches: rollouts that stall ---------------------------------------

    def _stall_deployment(self, before: Obj, after: Obj) -> None:
        """The controller starts the rollout (revision, ReplicaSet) but nothing new becomes
        available: status says so, as a real controller's would."""
        available = 0
        if before["spec"]["template"] == after["spec"]["template"]:
            available = int(before.get("status", {}).get("availableReplicas", 0))
        self._reconcile_deployment(before, after)
        replicas = after["spec"]["replicas"]
        available = min(available, replicas)
        status = after["status"]
        status |= {"readyReplicas": available, "availableReplicas": available}
        status["unavailableReplicas"] = replicas - available
        stamp = _stamp(_now())
        progressing = {"type": "Progressing", "lastUpdateTime": stamp, "lastTransitionTime": stamp}
        if self.stall_deadline:
            message = f'ReplicaSet "{self._rs_name(after)}" has timed out progressing.'
            progressing |= {"status": "False", "reason": "ProgressDeadlineExceeded"}
        else:
            message = f'ReplicaSet "{self._rs_name(after)}" is progressing.'
            progressing |= {"status": "True", "reason": "ReplicaSetUpdated"}
        status["conditions"] = [progressing | {"message": message}]

    def finish_rollout(self, namespace: str, name: str) -> None:
        """A stalled rollout completes: every replica available."""
        deployment = copy.deepcopy(self._objects["deployments"][(namespace, name)])
        self._set_deployment_status(deployment, ready=deployment["spec"]["replicas"])
        self._store("Deployment", deployment)

    def _owned_replicasets(self, deployment: Obj) -> list[Obj]:
        uid = deployment["metadata"]["uid"]
        return [
            rs
            for rs in self._objects["replicasets"].values()
            if any(ref["uid"] == uid for ref in rs["metadata"].get("ownerReferences", []))
        ]

    # --- internals: HTTP -------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        record = RecordedRequest(
            request.method,
            request.path,
            dict(request.query),
            body,
            request.headers.get("Content-Type"),
            headers,
            acting_as=(
                request.headers.get("Impersonate-User"),
                tuple(request.headers.getall("Impersonate-Group", [])),
            ),
        )
        self.requests.append(record)
        request[_BODY] = body
        for pattern, seconds in self._delays:
            if pattern.search(request.path):
                await asyncio.sleep(seconds)
                break
        for pattern, released in self._holds:
            if pattern.search(request.path):
                await released.wait()
        response = self._fault_response(request)
        if response is None:
            try:
                request[_WHO] = self._authorize(request)
                response = await handler(request)
            except _StatusError as exc:
                response = web.json_response(
                    _status_body(exc.code, exc.message, exc.details), status=exc.code
                )
        record.status = response.status
        for pattern, seconds in self._response_delays:
            if pattern.search(request.path):
                await asyncio.sleep(seconds)
                break
        return response

    def _authorize(self, request: web.Request) -> Identity:
        """Authenticate the bearer token, apply impersonation, authorize by RBAC."""
        if not self._tokens:
            return _ANYONE
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        who = self._tokens.get(token) if scheme == "Bearer" else None
        if who is None:
            raise _StatusError(401, "Unauthorized")
        if user := request.headers.get("Impersonate-User"):
            groups = tuple(request.headers.getall("Impersonate-Group", []))
            asked = [Attributes("impersonate", "", "users", None, user)]
            asked += [Attributes("impersonate", "", "groups", None, g) for g in groups]
            for seen in asked:
                if not self.allows(who, seen):
                    raise _forbidden(who, seen)
            who = Identity(user, (*groups, "system:authenticated"))
        seen = request_attributes(request.method, request.path)
        if seen is not None and not self.allows(who, seen):
            raise _forbidden(who, seen)
        return who

    def _fault_response(self, request: web.Request) -> web.Response | None:
        for fault in self._faults:
            if not fault.matches(request.method, request.path):
                continue
            if fault.remaining is not None:
                if fault.remaining <= 0:
                    continue
                fault.remaining -= 1
            if fault.status == 403:
                message = self._forbidden_message(request)
            else:
                message = f"injected failure {fault.status} for {request.method} {request.path}"
            headers = {"Retry-After": "1"} if fault.status == 429 else None
            return web.json_response(
                _status_body(fault.status, message), status=fault.status, headers=headers
            )
        return None

    @staticmethod
    def _forbidden_message(request: web.Request) -> str:
        target = _parse_path(request.path)
        seen = request_attributes(request.method, request.path)
        if target is None or seen is None:
            return f'User "{SERVICE_ACCOUNT}" cannot {request.method.lower()} path "{request.path}"'
        res = target.resource
        subject = f'{res.qualified} "{target.name}"' if target.name else res.qualified
        where = f'in the namespace "{target.namespace}"' if target.namespace else ""
        where = where or "at the cluster scope"
        return (
            f'{subject} is forbidden: User "{SERVICE_ACCOUNT}" cannot {seen.verb} resource '
            f'"{seen.resource}" in API group "{res.group}" {where}'
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path
        if path.rstrip("/") == "/version" and method == "GET":
            return web.json_response(_VERSION)
        if path == SSAR_PATH and method == "POST":
            review = self._access_review(request[_BODY] or {}, request[_WHO])
            return web.json_response(review, status=201)
        if (served := self._serve_generic(request)) is not None:
            return served
        target = _parse_path(path)
        if target is None:
            raise _StatusError(404, "the server could not find the requested resource")
        body = request[_BODY]
        if target.sub == "log" and target.resource.plural == "pods" and method == "GET":
            return self._log(request, target)
        if target.sub == "scale" and target.resource.plural == "deployments":
            if method == "GET":
                return web.json_response(self._scale(self._require(target)))
            if method in ("PATCH", "PUT"):
                return web.json_response(self._patch_scale(request, target, body))
        if target.sub is not None:
            raise _StatusError(404, "the server could not find the requested resource")
        if target.name is None and method == "GET":
            return web.json_response(self._listing(request, target))
        if target.name is not None and method == "GET":
            return web.json_response(self._require(target))
        if target.name is not None and method == "PATCH":
            return web.json_response(self._patch(request, target, body))
        if target.name is not None and method == "DELETE":
            return web.json_response(self._delete(request, target, body))
        raise _StatusError(405, f"{method} is not supported on {path} by this test server")

    def _require(self, target: _Target) -> Obj:
        assert target.name is not None
        key = (target.namespace or "", target.name)
        obj = self._objects[target.resource.plural].get(key)
        if obj is None:
            details = {"name": target.name, "group": target.resource.group}
            details["kind"] = target.resource.plural
            raise _StatusError(
                404, f'{target.resource.qualified} "{target.name}" not found', details
            )
        return copy.deepcopy(obj)

    def _listing(self, request: web.Request, target: _Target) -> Obj:
        """A list, or (Accept: ...;as=PartialObjectMetadataList) its items' metadata only,
        as the real server answers a metadata-only client."""
        listing = self._list(request, target)
        if "as=PartialObjectMetadataList" not in request.headers.get("Accept", ""):
            return listing
        partial = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1"}
        items = [
            {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
            | {"metadata": item["metadata"]}
            for item in listing["items"]
        ]
        return partial | {"metadata": listing["metadata"], "items": items}

    def _list(self, request: web.Request, target: _Target) -> Obj:
        res = target.resource
        labels = request.query.get("labelSelector", "")
        fields = request.query.get("fieldSelector", "")
        items = [
            copy.deepcopy(obj)
            for (namespace, _), obj in sorted(self._objects[res.plural].items())
            if target.namespace is None or namespace == target.namespace
        ]
        items = [
            obj
            for obj in items
            if label_selector_matches(labels, obj["metadata"].get("labels") or {})
            and field_selector_matches(res.plural, fields, obj)
        ]
        meta: Obj = {"resourceVersion": str(self._rv)}
        offset = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or 0)
        if limit:
            rest = items[offset + limit :]
            items = items[offset : offset + limit]
            if rest:
                meta["continue"] = str(offset + limit)
                if not labels and not fields:  # the real server counts only unfiltered lists
                    meta["remainingItemCount"] = len(rest)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta} | {
            "items": items
        }

    def _log(self, request: web.Request, target: _Target) -> web.Response:
        pod = self._require(target)
        node = self._objects["nodes"].get(("", pod["spec"].get("nodeName") or ""))
        if node is not None and not (node.get("status") or {}).get("addresses"):
            # The API server proxies logs from the node's kubelet, and cannot reach this one.
            body = _status_body(500, "no preferred addresses found; known addresses: []")
            del body["reason"]
            return web.json_response(body, status=500)
        names = [c["name"] for c in pod["spec"]["containers"]]
        container = request.query.get("container")
        if container is None:
            if len(names) > 1:
                choices = " ".join(names)
                message = f"a container name must be specified for pod {target.name}, "
                raise _StatusError(400, message + f"choose one of: [{choices}]")
            container = names[0]
        if container not in _loggable(pod):
            raise _StatusError(400, f"container {container} is not valid for pod {target.name}")
        previous = request.query.get("previous") == "true"
        key = (target.namespace or "", target.name or "", container, previous)
        if previous and key not in self._logs:
            message = f'previous terminated container "{container}" in pod "{target.name}" '
            raise _StatusError(400, message + "not found")
        lines = self._logs.get(key, [])
        if since := request.query.get("sinceSeconds"):
            cutoff = datetime.now(UTC) - timedelta(seconds=int(since))
            lines = [entry for entry in lines if entry[0] >= cutoff]
        if request.query.get("timestamps") == "true":
            text_lines = [f"{stamp.isoformat().replace('+00:00', 'Z')} {ln}" for stamp, ln in lines]
        else:
            text_lines = [line for _, line in lines]
        if tail := request.query.get("tailLines"):
            text_lines = text_lines[-int(tail) :] if int(tail) > 0 else []
        data = "".join(text_lines).encode()
        if limit := request.query.get("limitBytes"):
            data = data[: int(limit)]
        return web.Response(body=data, content_type="text/plain", charset="utf-8")

    @staticmethod
    def _dry_run(request: web.Request, body: Any = None) -> bool:
        # Like the real API server: a DELETE that carries a body (DeleteOptions) takes its
        # options, dryRun included, from the body alone and ignores the query string.
        values = request.query.getall("dryRun", [])
        if isinstance(body, dict) and body:
            values = body.get("dryRun") or []
            if not isinstance(values, list):
                raise _StatusError(400, "dryRun in DeleteOptions must be a list")
        for value in values:
            if value != "All":
                raise _StatusError(400, f'Invalid dryRun value "{value}": supported is "All"')
        return bool(values)

    @staticmethod
    def _check_preconditions(target: _Target, current: Obj, uid: Any, version: Any) -> None:
        meta = current["metadata"]
        if uid is not None and uid != meta["uid"]:
            message = f"Precondition failed: UID in precondition: {uid}, "
            raise _StatusError(409, message + f"UID in object meta: {meta['uid']}")
        if version is not None and version != meta["resourceVersion"]:
            raise _StatusError(
                409,
                f'Operation cannot be fulfilled on {target.resource.qualified} "{target.name}": '
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )

    def _patch(self, request: web.Request, target: _Target, body: Any) -> Obj:
        kind = request.content_type
        if kind not in (STRATEGIC, MERGE, JSON_PATCH, APPLY):
            message = f"the body of the request was in an unknown format - {kind}"
            raise _StatusError(415, message)
        if kind == APPLY and not request.query.get("fieldManager"):
            raise _StatusError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        dry_run = self._dry_run(request)
        current = self._require(target)
        if kind == JSON_PATCH:
            # Applied to the object as stored; then checked like any other change.
            body = _diff_as_merge(current, json_patch(current, body))
        if not isinstance(body, dict):
            raise _StatusError(400, "the patch body must be a JSON object")
        patch_meta = body.get("metadata") or {}
        uid = patch_meta.get("uid")
        if uid is not None and uid != current["metadata"]["uid"]:
            # A uid in a PATCH body is a change to an immutable field, not a precondition
            # (the scale subresource and DELETE treat it as one: 409 there).
            res = target.resource
            kind = f"{res.kind}.{res.group}" if res.group else res.kind
            message = f'{kind} "{target.name}" is invalid: metadata.uid: Invalid value: '
            raise _StatusError(422, message + f'"{uid}": field is immutable')
        self._check_preconditions(target, current, None, patch_meta.get("resourceVersion"))
        # Server-side apply merges like a strategic patch; field ownership: kube_fields.py.
        merged = merge_patch(current, body, strategic=kind in (STRATEGIC, APPLY))
        merged["metadata"] = current["metadata"] | {
            k: v for k, v in merged["metadata"].items() if k in ("labels", "annotations")
        }
        merged["metadata"]["managedFields"] = self._owners(request, target, current, merged, body)
        return self._commit(target, current, merged, dry_run)

    @staticmethod
    def _owners(
        request: web.Request, target: _Target, current: Obj, merged: Obj, body: Obj
    ) -> list[Obj]:
        """The object's managedFields after this PATCH (409 for an unforced apply conflict)."""
        owners = FieldOwners(current, target.resource.api_version)
        query = request.query
        manager = manager_of(query.get("fieldManager"), request.headers.get("User-Agent", ""))
        if request.content_type != APPLY:
            return owners.update(manager, current, merged)
        try:
            return owners.apply(manager, body, current, force=query.get("force") == "true")
        except ApplyConflicts as exc:
            raise _StatusError(409, exc.message, {"causes": exc.causes}) from exc

    def _commit(self, target: _Target, current: Obj, merged: Obj, dry_run: bool) -> Obj:
        """Validate and (unless dry run) store a changed object; answer the result."""
        kind = target.resource.kind
        self._validate(target, merged)
        if kind == "Deployment" and merged["spec"] != current["spec"]:
            merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            if self.stall_rollouts and not dry_run:
                self._stall_deployment(current, merged)
            elif self.auto_reconcile and not dry_run:
                self._reconcile_deployment(current, merged)
        if dry_run:
            return merged
        return self.put(kind, merged)

    @staticmethod
    def _validate(target: _Target, obj: Obj) -> None:
        def invalid(field_path: str, value: Any, why: str) -> _StatusError:
            res = target.resource
            kind = f"{res.kind}.{res.group}" if res.group else res.kind
            message = f'{kind} "{target.name}" is invalid: {field_path}: Invalid value: '
            return _StatusError(422, message + f"{json.dumps(value)}: {why}")

        spec = obj.get("spec") or {}
        if target.resource.kind == "Deployment":
            replicas = spec.get("replicas")
            if isinstance(replicas, bool) or not isinstance(replicas, int):
                raise invalid("spec.replicas", replicas, "must be an integer")
            if replicas < 0:
                raise invalid("spec.replicas", replicas, "must be greater than or equal to 0")
        if target.resource.kind == "Node" and not isinstance(
            spec.get("unschedulable", False), bool
        ):
            raise invalid("spec.unschedulable", spec["unschedulable"], "must be a boolean")

    def _scale(self, deployment: Obj) -> Obj:
        meta = deployment["metadata"]
        keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        selector = ",".join(
            f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
        )
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in keep if k in meta},
            "spec": {"replicas": deployment["spec"]["replicas"]},
            "status": {"replicas": deployment["status"]["replicas"], "selector": selector},
        }

    def _patch_scale(self, request: web.Request, target: _Target, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise _StatusError(400, "the scale body must be a JSON object")
        if request.method == "PATCH" and request.content_type not in (STRATEGIC, MERGE):
            message = f"the body of the request was in an unknown format - {request.content_type}"
            raise _StatusError(415, message)
        dry_run = self._dry_run(request)
        current = self._require(target)
        meta = body.get("metadata") or {}
        self._check_preconditions(target, current, meta.get("uid"), meta.get("resourceVersion"))
        replicas = (body.get("spec") or {}).get("replicas", current["spec"]["replicas"])
        merged = copy.deepcopy(current)
        merged["spec"]["replicas"] = replicas
        result = self._commit(target, current, merged, dry_run)
        return self._scale(result)

    def _delete(self, request: web.Request, target: _Target, body: Any) -> Obj:
        dry_run = self._dry_run(request, body)
        current = self._require(target)
        options = body if isinstance(body, dict) else {}
        pre = options.get("preconditions") or {}
        if pre.get("uid") is not None and pre["uid"] != current["metadata"]["uid"]:
            message = f"Precondition failed: UID in precondition: {pre['uid']}, "
            raise _StatusError(409, message + f"UID in object meta: {current['metadata']['uid']}")
        version = pre.get("resourceVersion")
        if version is not None and version != current["metadata"]["resourceVersion"]:
            message = f"Precondition failed: ResourceVersion in precondition: {version}, "
            actual = current["metadata"]["resourceVersion"]
            raise _StatusError(409, message + f"ResourceVersion in object meta: {actual}")
        if not dry_run:
            key = (target.namespace or "", target.name or "")
            del self._objects[target.resource.plural][key]
            self._next_rv()
        if target.resource.kind == "Pod":
            grace = options.get("gracePeriodSeconds", 30)
            current["metadata"] |= {"deletionTimestamp": _stamp(_now())}
            current["metadata"]["deletionGracePeriodSeconds"] = grace
            return current
        details = {"name": target.name, "group": target.resource.group}
        details |= {"kind": target.resource.plural, "uid": current["metadata"]["uid"]}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"} | {
            "details": details
        }

    def _access_review(self, review: Obj, who: Identity) -> Obj:
        attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
        denied = any(
            all(attributes.get(key) == value for key, value in rule.items())
            for rule in self._deny_rules
        )
        status: Obj = {"allowed": not denied}
        if denied:
            status |= {"denied": True, "reason": "denied by a test rule"}
            return review | {"metadata": {}, "status": status}
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource += f"/{attributes['subresource']}"
        seen = Attributes(
            attributes.get("verb", ""),
            attributes.get("group", ""),
            resource,
            attributes.get("namespace") or None,
            attributes.get("name") or None,
        )
        # Like RBAC's answer: a denial is just allowed: false, with no reason.
        return review | {"metadata": {}, "status": {"allowed": self.allows(who, seen)}}

    # --- the generic toolset: discovery, custom resources, metrics.k8s.io ---------------
    # (list_resources, get_resource, top_pods, top_nodes). Kept apart so merges stay easy.

    def _init_generic(self) -> None:
        # plural.group -> a custom resource served because its CRD is installed
        self._custom: dict[str, Resource] = {}
        self._custom_objects: dict[str, dict[tuple[str, str], Obj]] = {}
        # None: no metrics-server (the group is not served at all, like a bare cluster)
        self._pod_metrics: dict[tuple[str, str], Obj] | None = None
        self._node_metrics: dict[str, Obj] | None = None

    def install_crd(
        self, group: str, kind: str, plural: str, *, namespaced: bool = True, version: str = "v1"
    ) -> Obj:
        """A CustomResourceDefinition; its resource is served (and discovered) at once."""
        resource = Resource(plural, kind, f"{group}/{version}", namespaced)
        self._custom[f"{plural}.{group}"] = resource
        self._custom_objects.setdefault(f"{plural}.{group}", {})
        schema = {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        }
        spec = {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()}
            | {"listKind": f"{kind}List"},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {"name": version, "served": True, "storage": True, "schema": schema}
                | {"subresources": {"status": {}}}
            ],
        }
        crd = {"metadata": {"name": f"{plural}.{group}"}, "spec": spec}
        crd["status"] = {"acceptedNames": spec["names"], "storedVersions": [version]}
        return self.put("CustomResourceDefinition", crd)

    def add_custom(self, group: str, plural: str, obj: Obj, *, age: float = 0.0) -> Obj:
        """Store a custom resource of an installed CRD (namespace "" when cluster-scoped)."""
        resource = self._custom[f"{plural}.{group}"]
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        stored["kind"], stored["apiVersion"] = resource.kind, resource.api_version
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _stamp(_now() - timedelta(seconds=age)))
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("generation", 1)
        meta["managedFields"] = [
            {"manager": "kubectl-client-side-apply", "operation": "Update"}
            | {"apiVersion": resource.api_version, "fieldsType": "FieldsV1"}
            | {"fieldsV1": {"f:spec": {}}, "time": meta["creationTimestamp"]}
        ]
        self._custom_objects[f"{plural}.{group}"][(namespace, meta["name"])] = stored
        return copy.deepcopy(stored)

    def set_pod_metrics(self, namespace: str, pod: str, usage: dict[str, tuple[str, str]]) -> None:
        """Serve metrics.k8s.io from now on; `usage` is container -> (cpu, memory)."""
        self._pod_metrics = {} if self._pod_metrics is None else self._pod_metrics
        self._node_metrics = {} if self._node_metrics is None else self._node_metrics
        found = self._objects["pods"].get((namespace, pod))
        labels = dict((found or {}).get("metadata", {}).get("labels") or {})
        containers = [
            {"name": name, "usage": {"cpu": cpu, "memory": memory}}
            for name, (cpu, memory) in usage.items()
        ]
        meta = {"name": pod, "namespace": namespace, "labels": labels}
        meta["creationTimestamp"] = _stamp(_now())
        self._pod_metrics[(namespace, pod)] = {
            "metadata": meta,
            "timestamp": _stamp(_now() - timedelta(seconds=10)),
            "window": "10.033s",
            "containers": containers,
        }

    def set_node_metrics(self, node: str, cpu: str, memory: str) -> None:
        """Serve metrics.k8s.io from now on, with this node's usage."""
        self._pod_metrics = {} if self._pod_metrics is None else self._pod_metrics
        self._node_metrics = {} if self._node_metrics is None else self._node_metrics
        labels = dict(
            self._objects["nodes"].get(("", node), {}).get("metadata", {}).get("labels") or {}
        )
        meta = {"name": node, "labels": labels, "creationTimestamp": _stamp(_now())}
        self._node_metrics[node] = {
            "metadata": meta,
            "timestamp": _stamp(_now() - timedelta(seconds=15)),
            "window": "20.027s",
            "usage": {"cpu": cpu, "memory": memory},
        }

    def _rules_of(self, role: Obj) -> list[Obj]:
        """A role's rules; an aggregated ClusterRole's are those of every ClusterRole its
        selectors match (what the control plane's aggregation controller writes into it)."""
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors")
        if not selectors:
            return list(role.get("rules") or [])
        rules: list[Obj] = []
        for other in self._rbac:
            labels = other["metadata"].get("labels") or {}
            if other["kind"] == "ClusterRole" and any(
                all(labels.get(k) == v for k, v in (s.get("matchLabels") or {}).items())
                for s in selectors
            ):
                rules += other.get("rules") or []
        return rules

    def drop_metrics(self) -> None:
        """Stop serving metrics.k8s.io (a cluster without metrics-server)."""
        self._pod_metrics = self._node_metrics = None

    def add_secret(self, namespace: str, name: str, data: dict[str, str]) -> Obj:
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        obj = {"metadata": {"name": name, "namespace": namespace}, "type": "Opaque"}
        return self.put("Secret", obj | {"data": encoded}, age=3600)

    def add_statefulset(
        self, namespace: str, name: str, *, replicas: int = 3, ready: int | None = None
    ) -> Obj:
        ready = replicas if ready is None else ready
        labels = {"app": name}
        container = {"name": name, "image": f"registry.example.com/{name}:1.0"}
        spec = {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "podManagementPolicy": "OrderedReady",
        }
        status = {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready}
        status |= {"currentReplicas": replicas, "updatedReplicas": replicas}
        status |= {"availableReplicas": ready, "currentRevision": f"{name}-6d4cf56db6"}
        meta = {"name": name, "namespace": namespace, "labels": labels, "generation": 1}
        return self.put("StatefulSet", {"metadata": meta, "spec": spec, "status": status}, age=7200)

    def add_cronjob(
        self, namespace: str, name: str, *, schedule: str = "*/5 * * * *", suspend: bool = False
    ) -> Obj:
        container = {"name": name, "image": "registry.example.com/batch:1.0"}
        template = {"spec": {"containers": [container], "restartPolicy": "OnFailure"}}
        spec = {
            "schedule": schedule,
            "suspend": suspend,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"backoffLimit": 2, "template": template}},
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
        }
        status = {
            "lastScheduleTime": _stamp(_now() - timedelta(minutes=3)),
            "lastSuccessfulTime": _stamp(_now() - timedelta(minutes=2)),
        }
        meta = {"name": name, "namespace": namespace, "generation": 1}
        return self.put("CronJob", {"metadata": meta, "spec": spec, "status": status}, age=86400)

    def add_job(self, namespace: str, name: str, *, succeeded: int = 1, failed: int = 0) -> Obj:
        container = {"name": name, "image": "registry.example.com/batch:1.0"}
        spec = {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": 2,
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        }
        status: Obj = {"startTime": _stamp(_now() - timedelta(minutes=5))}
        status |= {"succeeded": succeeded} if succeeded else {}
        status |= {"failed": failed} if failed else {}
        kind = "Complete" if succeeded else "Failed"
        status["conditions"] = [{"type": kind, "status": "True"}] if succeeded or failed else []
        meta = {"name": name, "namespace": namespace, "generation": 1}
        return self.put("Job", {"metadata": meta, "spec": spec, "status": status}, age=600)

    def _generic_resources(self) -> list[Resource]:
        return [*RESOURCES.values(), *self._custom.values()]

    def _serve_generic(self, request: web.Request) -> web.StreamResponse | None:
        """Discovery, custom resources and metrics.k8s.io; None for everything else."""
        parts = request.path.strip("/").split("/")
        if request.method != "GET" and not (parts[0] == "apis" and len(parts) > 3):
            return None
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["api", "v1"]:
            return web.json_response(self._resource_list("v1"))
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        if parts[0] != "apis" or len(parts) < 3:
            return None
        group_version = f"{parts[1]}/{parts[2]}"
        if group_version == METRICS_API and self._pod_metrics is not None:
            return self._metrics(request, parts[3:])
        if len(parts) == 3:
            if not any(r.api_version == group_version for r in self._resource_versions()):
                raise _StatusError(404, "the server could not find the requested resource")
            return web.json_response(self._resource_list(group_version))
        return self._custom_request(request, group_version, parts[3:])

    def _resource_versions(self) -> list[Resource]:
        served = self._generic_resources()
        if self._pod_metrics is not None:
            served += [Resource(p, k, METRICS_API, p == "pods") for p, k in _METRICS_KINDS]
        return served

    def _resource_list(self, group_version: str) -> Obj:
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update"]
        verbs.append("watch")
        resources = []
        for res in self._resource_versions():
            if res.api_version != group_version:
                continue
            entry = {"name": res.plural, "singularName": res.kind.lower(), "kind": res.kind}
            if res.api_version != METRICS_API and res.plural in _SHORT_NAMES:
                entry["shortNames"] = list(_SHORT_NAMES[res.plural])
            resources.append(
                entry | {"namespaced": res.namespaced, "verbs": ["get", "list"]}
                if res.api_version == METRICS_API
                else entry | {"namespaced": res.namespaced, "verbs": verbs}
            )
            for sub, kind, sub_verbs in _SUBRESOURCES.get((res.api_version, res.plural), ()):
                resources.append({"name": f"{res.plural}/{sub}", "singularName": ""})
                resources[-1] |= {"namespaced": True, "kind": kind, "verbs": list(sub_verbs)}
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version} | {
            "resources": resources
        }

    def _group_list(self) -> Obj:
        groups: dict[str, list[str]] = {}
        for res in self._resource_versions():
            if res.group:
                versions = groups.setdefault(res.group, [])
                if res.api_version not in versions:
                    versions.append(res.api_version)
        listed = []
        for name, versions in groups.items():
            entries = [{"groupVersion": gv, "version": gv.rpartition("/")[2]} for gv in versions]
            listed.append({"name": name, "versions": entries, "preferredVersion": entries[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}

    def _custom_request(
        self, request: web.Request, group_version: str, rest: list[str]
    ) -> web.StreamResponse | None:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        found = [
            (key, r)
            for key, r in self._custom.items()
            if r.api_version == group_version and rest and r.plural == rest[0]
        ]
        if not found:
            return None  # a built-in resource (or nothing): the ordinary paths answer
        key, res = found[0]
        if len(rest) > 2 or (namespace is not None and not res.namespaced):
            raise _StatusError(404, "the server could not find the requested resource")
        if request.method != "GET":
            raise _StatusError(405, f"{request.method} is not supported on custom resources here")
        objects = self._custom_objects[key]
        if len(rest) == 2:
            obj = objects.get((namespace or "", rest[1]))
            if obj is None:
                details = {"name": rest[1], "group": res.group, "kind": res.plural}
                raise _StatusError(404, f'{res.qualified} "{rest[1]}" not found', details)
            return web.json_response(copy.deepcopy(obj))
        labels = request.query.get("labelSelector", "")
        fields = request.query.get("fieldSelector", "")
        items = [
            copy.deepcopy(obj)
            for (ns, _), obj in sorted(objects.items())
            if (namespace is None or ns == namespace)
            and label_selector_matches(labels, obj["metadata"].get("labels") or {})
            and field_selector_matches(res.plural, fields, obj)
        ]
        meta = {"resourceVersion": str(self._rv)}
        return web.json_response(
            {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta}
            | {"items": items}
        )

    def _metrics(self, request: web.Request, rest: list[str]) -> web.StreamResponse:
        assert self._pod_metrics is not None and self._node_metrics is not None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        labels = request.query.get("labelSelector", "")
        if rest[:1] == ["pods"] and len(rest) <= 2:
            items = [
                copy.deepcopy(m)
                for (ns, name), m in sorted(self._pod_metrics.items())
                if (namespace is None or ns == namespace)
                and (len(rest) == 1 or name == rest[1])
                and label_selector_matches(labels, m["metadata"]["labels"])
            ]
            kind = "PodMetrics"
        elif rest[:1] == ["nodes"] and len(rest) <= 2 and namespace is None:
            items = [
                copy.deepcopy(m)
                for name, m in sorted(self._node_metrics.items())
                if (len(rest) == 1 or name == rest[1])
                and label_selector_matches(labels, m["metadata"]["labels"])
            ]
            kind = "NodeMetrics"
        else:
            raise _StatusError(404, "the server could not find the requested resource")
        if len(rest) == 2:
            if not items:
                raise _StatusError(404, f'{rest[0]}.metrics.k8s.io "{rest[1]}" not found')
            return web.json_response({"kind": kind, "apiVersion": METRICS_API} | items[0])
        meta = {"resourceVersion": ""}
        return web.json_response(
            {"kind": f"{kind}List", "apiVersion": METRICS_API, "metadata": meta, "items": items}
        )


METRICS_API = "metrics.k8s.io/v1beta1"
# The subresources this server serves, as discovery lists them.
_SUBRESOURCES = {
    ("v1", "pods"): (("log", "Pod", ("get",)),),
    ("apps/v1", "deployments"): (("scale", "Scale", ("get", "patch", "update")),),
}
# The short names the real server's discovery lists (kubectl api-resources).
_SHORT_NAMES = {
    "namespaces": ("ns",),
    "nodes": ("no",),
    "pods": ("po",),
    "services": ("svc",),
    "endpoints": ("ep",),
    "events": ("ev",),
    "configmaps": ("cm",),
    "persistentvolumeclaims": ("pvc",),
    "deployments": ("deploy",),
    "replicasets": ("rs",),
    "statefulsets": ("sts",),
    "daemonsets": ("ds",),
    "cronjobs": ("cj",),
    "ingresses": ("ing",),
    "horizontalpodautoscalers": ("hpa",),
    "customresourcedefinitions": ("crd", "crds"),
}
_METRICS_KINDS = (("pods", "PodMetrics"), ("nodes", "NodeMetrics"))
_GENERIC_PATH = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?/?$"
)


def _served_attributes(method: str, path: str) -> Attributes | None:
    """The RBAC attributes of a request for a resource outside RESOURCES (a custom
    resource, metrics.k8s.io), parsed as the real server parses any API path."""
    found = _GENERIC_PATH.match(path)
    if found is None:
        return None
    name = found["name"]
    verb = {"GET": "get" if name else "list", "PATCH": "patch", "PUT": "update"}.get(
        method, "delete" if method == "DELETE" else "create"
    )
    resource = f"{found['plural']}/{found['sub']}" if found["sub"] else found["plural"]
    return Attributes(verb, found["group"], resource, found["namespace"], name)


_NO_SCHEDULE = {"effect": "NoSchedule"}
_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.1",
    "gitCommit": "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828",
    "gitTreeState": "clean",
    "buildDate": "2025-05-15T08:19:08Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
