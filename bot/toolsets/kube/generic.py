"""The generic toolset: list and read objects of any kind the cluster serves (read).

Built-in kinds and custom resources alike, found through API discovery (discovery.py).
Secrets are refused from the words alone, before any request leaves kelpie. ConfigMap
values are masked like logs. The kind's real group and scope are known only after
discovery: the handler asks the pipeline's checks again about them (`ToolContext.admit`)
before it sends the request, so a role's namespaces and the firewall hold for every kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import yaml
from pydantic import Field

from bot.model.outbound import mask_text
from bot.toolsets.declare import (
    NAME,
    FieldSelector,
    LabelSelector,
    ListNamespace,
    ObjectNamespace,
    ToolArgs,
    declare,
    limited_text,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.discovery import (
    SECRET_REFUSAL,
    ApiResource,
    Discovery,
    names_secret,
    parse_kind,
)
from bot.toolsets.kube.render import (
    KubeReads,
    Obj,
    age,
    dig,
    items_of,
    pod_phase,
    pod_ready,
    restarts,
    result,
    table,
    where,
)
from bot.toolsets.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
)
from bot.values import plural

# Rows a listing shows; the rest is counted in a "narrow your call" note.
MAX_ROWS = 50
# Objects one listing asks the server for (one page): enough to count what is not shown.
FETCH_LIMIT = 500
# Characters of YAML get_resource answers with at most.
MAX_YAML_CHARS = 12_000
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# --- the sentences of this module ---------------------------------------------------------
_NOT_LISTABLE = "Cluster {cluster} does not offer {verb} on {plural} ({kind})."
_MORE = (
    "… and {more} more {plural} not shown; narrow your call with a namespace, "
    "label_selector or field_selector."
)
_MORE_UNCOUNTED = (
    "… and more {plural} beyond the first {shown} (the server did not count them); narrow "
    "your call with a namespace, label_selector or field_selector."
)
_CUT = "[cut at {limit} of {size} characters]"

KindText = Annotated[
    str,
    limited_text(200, required=True),
    Field(description="Kind, plural or group/version/Kind."),
]


class ResourceList(ToolArgs):
    kind: KindText
    namespace: ListNamespace = None
    label_selector: LabelSelector = None
    field_selector: FieldSelector = None


class ResourceGet(ToolArgs):
    kind: KindText
    name: Annotated[str, NAME]
    namespace: ObjectNamespace = None


Column = tuple[str, Callable[[Obj], str]]


def _replicas(obj: Obj) -> str:
    desired = dig(obj, "spec", "replicas")
    return f"{dig(obj, 'status', 'readyReplicas') or 0}/{1 if desired is None else desired}"


def _job_status(obj: Obj) -> str:
    for condition in dig(obj, "status", "conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return "Suspended" if dig(obj, "spec", "suspend") else "Running"


def _pod_ready(obj: Obj) -> str:
    ready, total = pod_ready(obj)
    return f"{ready}/{total}"


def _hosts(obj: Obj) -> str:
    hosts = [str(r.get("host")) for r in dig(obj, "spec", "rules") or [] if r.get("host")]
    return ",".join(hosts) or "*"


def _address(obj: Obj) -> str:
    found = dig(obj, "status", "loadBalancer", "ingress") or []
    return ",".join(str(i.get("ip") or i.get("hostname")) for i in found) or "-"


def _scale_target(obj: Obj) -> str:
    target = dig(obj, "spec", "scaleTargetRef") or {}
    return f"{target.get('kind')}/{target.get('name')}"


def _keys(obj: Obj) -> str:
    return str(len(obj.get("data") or {}) + len(obj.get("binaryData") or {}))


def _text(*path: str) -> Callable[[Obj], str]:
    def read(obj: Obj) -> str:
        value = dig(obj, *path)
        return "-" if value is None or value == "" else str(value)

    return read


def _ago(*path: str) -> Callable[[Obj], str]:
    return lambda obj: f"{age(dig(obj, *path))} ago" if dig(obj, *path) else "-"


# Useful columns per kind (qualified: Kind.group), kubectl's where it has them.
_COLUMNS: dict[str, tuple[Column, ...]] = {
    "Pod": (("STATUS", pod_phase), ("READY", _pod_ready), ("RESTARTS", restarts)),
    "Deployment.apps": (("READY", _replicas), ("UP-TO-DATE", _text("status", "updatedReplicas"))),
    "StatefulSet.apps": (("READY", _replicas),),
    "ReplicaSet.apps": (("READY", _replicas),),
    "DaemonSet.apps": (
        ("DESIRED", _text("status", "desiredNumberScheduled")),
        ("READY", _text("status", "numberReady")),
    ),
    "Job.batch": (
        ("STATUS", _job_status),
        ("SUCCEEDED", _text("status", "succeeded")),
        ("FAILED", _text("status", "failed")),
    ),
    "CronJob.batch": (
        ("SCHEDULE", _text("spec", "schedule")),
        ("SUSPEND", _text("spec", "suspend")),
        ("LAST SCHEDULE", _ago("status", "lastScheduleTime")),
    ),
    "Ingress.networking.k8s.io": (("HOSTS", _hosts), ("ADDRESS", _address)),
    "HorizontalPodAutoscaler.autoscaling": (
        (
            "REFERENCE",
            _scale_target,
        ),
        ("MIN", _text("spec", "minReplicas")),
        ("MAX", _text("spec", "maxReplicas")),
        ("REPLICAS", _text("status", "currentReplicas")),
    ),
    "PersistentVolumeClaim": (
        ("STATUS", _text("status", "phase")),
        ("VOLUME", _text("spec", "volumeName")),
        ("CAPACITY", _text("status", "capacity", "storage")),
        ("STORAGECLASS", _text("spec", "storageClassName")),
    ),
    "Service": (("TYPE", _text("spec", "type")), ("CLUSTER-IP", _text("spec", "clusterIP"))),
    "ConfigMap": (
        ("DATA", lambda o: str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))),
    ),
    "Namespace": (("STATUS", _text("status", "phase")),),
}


class _Generic(KubeReads):
    def __init__(self, clients: KubeClients, discovery: Discovery) -> None:
        super().__init__(clients)
        self._discovery = discovery

    async def _resource(self, kind: str, verb: str, context: ToolContext) -> ApiResource:
        """The resource `kind` names; Secrets refused before any request is made."""
        query = parse_kind(kind)
        if names_secret(query):
            raise ToolFailure(SECRET_REFUSAL)
        kube = self.kube(context)
        resource = await self._discovery.resolve(kube, query)
        if resource.is_secret:
            raise ToolFailure(SECRET_REFUSAL)
        if resource.verbs and verb not in resource.verbs:
            raise ToolFailure(
                _NOT_LISTABLE.format(
                    cluster=kube.name, verb=verb, plural=resource.plural, kind=resource.kind
                )
            )
        return resource

    async def list_resources(self, args: ResourceList, context: ToolContext) -> ToolResult:
        resource = await self._resource(args.kind, "list", context)
        namespace = (
            resolve_namespace(args.namespace, context, allow_all=True)
            if resource.namespaced
            else ""
        )
        await context.admit(resource.qualified_kind, namespace)
        kube = self.kube(context)
        place = where(namespace) if resource.namespaced else "(cluster-scoped)"
        query = {"labelSelector": args.label_selector, "fieldSelector": args.field_selector}
        listing = await kube.get_path(
            f"list {resource.plural} {place}",
            resource.path(namespace),
            query | {"limit": str(FETCH_LIMIT)},
        )
        items = items_of(listing)
        total, counted = _total(items, listing)
        summary = f"{'' if counted else 'more than '}{plural(total, resource.kind)} {place}"
        if not items:
            return result([f"No {resource.plural} {place} match."], summary)
        across = resource.namespaced and namespace is None
        lines = [summary, *self._table(resource, items[:MAX_ROWS], across)]
        more = _more_note(resource, total - min(total, MAX_ROWS), counted)
        return result([*lines, *([more] if more else [])], summary)

    @staticmethod
    def _table(resource: ApiResource, items: list[Obj], across: bool) -> list[str]:
        columns = _COLUMNS.get(resource.qualified_kind, ())
        header = ["NAME", *(["NAMESPACE"] if across else []), *(c[0] for c in columns), "AGE"]
        rows = []
        for obj in items:
            row = [str(dig(obj, "metadata", "name"))]
            row += [str(dig(obj, "metadata", "namespace"))] if across else []
            row += [read(obj) for _, read in columns]
            rows.append([*row, age(dig(obj, "metadata", "creationTimestamp"))])
        return table(header, rows)

    async def get_resource(self, args: ResourceGet, context: ToolContext) -> ToolResult:
        resource = await self._resource(args.kind, "get", context)
        namespace = (
            resolve_namespace(args.namespace, context, allow_all=False)
            if resource.namespaced
            else ""
        )
        await context.admit(resource.qualified_kind, namespace)
        kube = self.kube(context)
        label = f"{namespace}/{args.name}" if namespace else args.name
        obj = await kube.get_path(
            f"read {resource.singular or resource.kind.lower()} {label}",
            resource.path(namespace, args.name),
        )
        text = _as_yaml(resource, obj if isinstance(obj, dict) else {})
        summary = f"{resource.kind} {label}"
        if len(text) > MAX_YAML_CHARS:
            cut = text[:MAX_YAML_CHARS].rsplit("\n", 1)[0]
            note = _CUT.format(limit=MAX_YAML_CHARS, size=len(text))
            return result([cut, note], f"{summary} (cut)")
        return result([text.rstrip("\n")], summary)


def _total(items: list[Obj], listing: Any) -> tuple[int, bool]:
    """How many objects match, and whether that is an exact count: the server answers one
    page, with what remains counted only when no selector was given."""
    if not dig(listing, "metadata", "continue"):
        return len(items), True
    remaining = dig(listing, "metadata", "remainingItemCount")
    if isinstance(remaining, int):
        return len(items) + remaining, True
    return len(items), False


def _more_note(resource: ApiResource, hidden: int, counted: bool) -> str | None:
    if not counted:
        return _MORE_UNCOUNTED.format(plural=resource.plural, shown=MAX_ROWS)
    return _MORE.format(more=hidden, plural=resource.plural) if hidden else None


def _as_yaml(resource: ApiResource, obj: Obj) -> str:
    """The object as YAML, without what only tools need (managedFields, kubectl's copy of
    the last applied object, which would repeat a ConfigMap's values unmasked)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and _LAST_APPLIED in annotations:
            annotations[_LAST_APPLIED] = "(omitted)"
    if resource.qualified_kind == "ConfigMap" and isinstance(obj.get("binaryData"), dict):
        obj["binaryData"] = {
            k: f"({len(str(v))} base64 characters)" for k, v in obj["binaryData"].items()
        }
    _mask_env(obj)
    # apiVersion and kind first, as kubectl prints them.
    obj = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")} | obj
    text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True)
    # Masked like logs: ConfigMap values, and whatever else looks like a secret.
    text, _ = mask_text(text, resource.qualified_kind)
    return text


def _mask_env(node: Any) -> None:
    """Container env values written in a spec, masked as `NAME=value` would be in a log:
    the YAML puts the name and the value on separate keys, where no rule sees them together
    (a secretKeyRef names a Secret and is never resolved)."""
    if isinstance(node, list):
        for item in node:
            _mask_env(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "env" and isinstance(value, list):
            for variable in value:
                if isinstance(variable, dict) and isinstance(variable.get("value"), str):
                    masked, _ = mask_text(f"{variable.get('name')}={variable['value']}")
                    variable["value"] = masked.partition("=")[2]
        else:
            _mask_env(value)


# Built-in cluster-scoped kinds as a model names them (kind, plural, short name): a call on
# one lands on cluster-scoped objects whatever the channel's namespace.
_CLUSTER_SCOPED = frozenset(
    "node nodes no namespace namespaces ns persistentvolume persistentvolumes pv storageclass "
    "storageclasses sc clusterrole clusterroles clusterrolebinding clusterrolebindings "
    "customresourcedefinition customresourcedefinitions crd crds ingressclass ingressclasses "
    "priorityclass priorityclasses pc".split()
)


def static_target(args: dict[str, Any], context: ToolContext) -> str | None:
    """Where the checks see a generic call land before discovery: a named namespace ("*":
    all), "" for a built-in cluster-scoped kind, else the channel's default namespace, or ""
    when there is none (a custom kind may be cluster-scoped). The handler asks the checks
    again about the resolved target before any object is requested (ToolContext.admit)."""
    namespace = args.get("namespace")
    if namespace == "*":
        return None
    kind = args.get("kind")
    try:
        name = parse_kind(kind).name.lower() if isinstance(kind, str) else ""
    except ToolArgumentError:
        name = ""
    if name in _CLUSTER_SCOPED:
        return ""
    if isinstance(namespace, str) and namespace:
        return namespace
    return context.default_namespace or ""


def generic_tools(clients: KubeClients, discovery: Discovery | None = None) -> list[Tool]:
    reads = _Generic(clients, discovery or Discovery())
    return [
        declare(
            "list_resources",
            ToolKind.READ,
            "List objects of any kind the cluster serves (custom resources too): a table "
            f"of at most {MAX_ROWS} rows.",
            ResourceList,
            reads.audited(reads.list_resources),
            target=static_target,
        ),
        declare(
            "get_resource",
            ToolKind.READ,
            "Read one object of any kind the cluster serves as YAML, status included.",
            ResourceGet,
            reads.audited(reads.get_resource),
            target=static_target,
        ),
    ]
