"""The changes toolset: a workload's rollout history and what changed in a namespace (read).

`rollout_history` lists a Deployment's revisions (its ReplicaSets and their revision
annotation) or a StatefulSet's / DaemonSet's (its ControllerRevisions), with change-cause,
images and creation time, and shows the pod-template difference between two revisions as a
compact unified diff (pod-template-hash left out; env values that look like secrets masked).

`what_changed` is a timeline, newest first, of what the cluster recorded over a window:
rollouts, scaling, container restarts, Warning events, ConfigMap changes (metadata only:
kelpie lists ConfigMaps as PartialObjectMetadata, so their values never even reach it), HPA
decisions and node condition transitions. Each line names the object and field it rests on,
so a claim cited with the result's evidence label points at something checkable.

Time comes from the clock the toolset is built with, never from the handlers.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from bot.model.outbound import mask_text
from bot.toolsets.declare import (
    NAME,
    ObjectNamespace,
    ToolArgs,
    checked,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClient, KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    Obj,
    age,
    dig,
    event_time,
    items_of,
    parse_time,
    result,
    table,
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

Clock = Callable[[], datetime]
WorkloadKind = Literal["Deployment", "StatefulSet", "DaemonSet"]
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")

REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
# Labels the controllers add to a revision's template: not part of what anyone changed.
HASH_LABELS = ("pod-template-hash", "controller-revision-hash")
# ConfigMaps as their metadata alone (the API server's PartialObjectMetadataList).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

MAX_REVISIONS = 20  # rows of the history table
MAX_DIFF_LINES = 60
MAX_ENTRIES = 50  # lines of a timeline
MAX_NODES = 20  # nodes whose conditions a timeline looks at
DEFAULT_WINDOW = timedelta(hours=1)
MAX_WINDOW = timedelta(hours=24)
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_WORKLOAD = re.compile(r"(Deployment|StatefulSet|DaemonSet)/([a-z0-9][-a-z0-9.]{0,252})")


def system_clock() -> datetime:
    return datetime.now(UTC)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the arguments ------------------------------------------------------------------------


def _window(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    found = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if found is None or not any(found.groups()):
        raise ToolArgumentError(f'{key} {value!r} must be a duration such as "30m", "1h" or "6h".')
    if not timedelta(minutes=1) <= parse_window(value) <= MAX_WINDOW:
        raise ToolArgumentError(f"{key} must be between 1m and 24h, got {value}.")
    return value


def parse_window(text: str | None) -> timedelta:
    found = _DURATION.fullmatch(text or "")
    if not text or found is None:
        return DEFAULT_WINDOW
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _workload(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _WORKLOAD.fullmatch(value):
        raise ToolArgumentError(
            f"{key} {value!r} must be kind/name with kind Deployment, StatefulSet or DaemonSet, "
            'e.g. "Deployment/checkout-api".'
        )
    return value


def _kind(key: str, value: Any) -> Any:
    if value not in WORKLOAD_KINDS:
        raise ToolArgumentError(f"{key} {value!r} must be Deployment, StatefulSet or DaemonSet.")
    return value


def _revision_field(description: str) -> Any:
    return Field(ge=1, description=description)


class HistoryArgs(ToolArgs):
    kind: Annotated[WorkloadKind, checked(_kind)]
    name: Annotated[str, NAME]
    namespace: ObjectNamespace = None
    revision: Annotated[int | None, _revision_field("Default: the current one.")] = None
    compare_to: Annotated[int | None, _revision_field("Diff against; default: the previous.")] = (
        None
    )


class ChangesArgs(ToolArgs):
    namespace: ObjectNamespace = None
    workload: Annotated[
        str | None,
        checked(_workload),
        Field(description='Only one, e.g. "Deployment/api".'),
    ] = None
    window: Annotated[
        str | None,
        checked(_window),
        Field(description='e.g. "30m" (default 1h, at most 24h)'),
    ] = None


# --- revisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Revision:
    number: int
    source: str  # the object it was read from, e.g. "ReplicaSet shop/checkout-api-5d8f"
    created: datetime | None
    change_cause: str
    template: Obj  # the pod template, without the controllers' hash labels

    @property
    def images(self) -> list[str]:
        return images_of(self.template)


def images_of(template: Any) -> list[str]:
    spec = dig(template, "spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return [str(c.get("image")) for c in containers if isinstance(c, dict)]


def _owned_by(obj: Obj, uid: Any) -> bool:
    refs = dig(obj, "metadata", "ownerReferences") or []
    return any(isinstance(ref, dict) and ref.get("uid") == uid for ref in refs)


def _clean_template(template: Any) -> Obj:
    """A revision's pod template as its workload holds it: no hash labels, no `$patch`."""
    copied: Obj = json.loads(json.dumps(template or {}))
    copied.pop("$patch", None)
    labels = dig(copied, "metadata", "labels")
    if isinstance(labels, dict):
        for label in HASH_LABELS:
            labels.pop(label, None)
    return copied


def replicaset_revision(rs: Obj) -> Revision | None:
    meta = rs.get("metadata") or {}
    number = str((meta.get("annotations") or {}).get(REVISION) or "")
    if not number.isdigit():
        return None
    return Revision(
        number=int(number),
        source=f"ReplicaSet {meta.get('namespace')}/{meta.get('name')}",
        created=parse_time(meta.get("creationTimestamp")),
        change_cause=str((meta.get("annotations") or {}).get(CHANGE_CAUSE) or ""),
        template=_clean_template(dig(rs, "spec", "template")),
    )


def controller_revision(cr: Obj) -> Revision | None:
    meta = cr.get("metadata") or {}
    number = cr.get("revision")
    if not isinstance(number, int):
        return None
    # The StatefulSet and DaemonSet controllers store the template as a patch of `spec`.
    return Revision(
        number=number,
        source=f"ControllerRevision {meta.get('namespace')}/{meta.get('name')}",
        created=parse_time(meta.get("creationTimestamp")),
        change_cause=str((meta.get("annotations") or {}).get(CHANGE_CAUSE) or ""),
        template=_clean_template(dig(cr, "data", "spec", "template")),
    )


def _masked_env(template: Obj) -> Obj:
    """The template with every env value that looks like a secret masked."""
    copied: Obj = json.loads(json.dumps(template))
    spec = copied.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for variable in container.get("env") or []:
            value = variable.get("value") if isinstance(variable, dict) else None
            if isinstance(value, str) and value:
                masked, found = mask_text(f"{variable.get('name')}={value}")
                if found:
                    variable["value"] = masked.split("=", 1)[1]
    return copied


def template_diff(old: Revision, new: Revision) -> list[str]:
    """The unified diff of two revisions' pod templates (YAML), at most MAX_DIFF_LINES."""

    def lines(revision: Revision) -> list[str]:
        text = yaml.safe_dump(_masked_env(revision.template), sort_keys=True, width=200)
        return text.splitlines()

    diff = list(
        difflib.unified_diff(
            lines(old),
            lines(new),
            f"revision {old.number}",
            f"revision {new.number}",
            n=2,
            lineterm="",
        )
    )
    if not diff:
        return [f"The pod templates of revisions {old.number} and {new.number} are identical."]
    if len(diff) > MAX_DIFF_LINES:
        more = len(diff) - MAX_DIFF_LINES
        diff = [*diff[:MAX_DIFF_LINES], f"… {more} more diff lines not shown."]
    return diff


# --- the timeline -------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One line of a timeline: when, what kind of change, what, and the evidence."""

    at: datetime
    kind: str  # rollout, scale, restart, warning, config, hpa, node
    text: str
    evidence: str

    def row(self) -> list[str]:
        return [stamp(self.at), self.kind, f"{self.text} [{self.evidence}]"]


@dataclass(frozen=True)
class Scope:
    """What a timeline looks at: a namespace, or one workload of it (and what it owns)."""

    namespace: str
    kind: str | None = None
    name: str | None = None
    uid: str | None = None
    template: Obj | None = None

    def covers_name(self, name: Any) -> bool:
        """Whether an object name is the workload's or one it generates (its ReplicaSets,
        pods, ControllerRevisions all start with `<name>-`)."""
        if self.name is None:
            return True
        return isinstance(name, str) and (name == self.name or name.startswith(f"{self.name}-"))

    def configmaps(self) -> set[str] | None:
        """The ConfigMaps the workload's pod template uses (None: every ConfigMap)."""
        if self.template is None:
            return None
        return set(_configmap_names(self.template))


def _configmap_names(template: Obj) -> Iterable[str]:
    spec = template.get("spec") or {}
    for volume in spec.get("volumes") or []:
        if name := dig(volume, "configMap", "name"):
            yield str(name)
        for source in dig(volume, "projected", "sources") or []:
            if name := dig(source, "configMap", "name"):
                yield str(name)
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in container.get("envFrom") or []:
            if name := dig(source, "configMapRef", "name"):
                yield str(name)
        for variable in container.get("env") or []:
            if name := dig(variable, "valueFrom", "configMapKeyRef", "name"):
                yield str(name)


def _images_text(images: list[str]) -> str:
    return ", ".join(images) or "no images"


def rollout_entries(revisions: dict[str, list[Revision]], kind: dict[str, str]) -> list[Entry]:
    """A new revision per workload (by owner uid), with its image change."""
    entries = []
    for owner, found in revisions.items():
        ordered = sorted(found, key=lambda r: r.number)
        for before, revision in zip([None, *ordered], ordered, strict=False):
            if revision.created is None:
                continue
            change = _images_text(revision.images)
            if before is not None and before.images != revision.images:
                change = f"{_images_text(before.images)} → {change}"
            cause = f" ({revision.change_cause})" if revision.change_cause else ""
            text = f"{kind[owner]} revision {revision.number}: {change}{cause}"
            entries.append(Entry(revision.created, "rollout", text, revision.source))
    return entries


def event_entries(events: list[Obj]) -> list[Entry]:
    """Scaling, HPA decisions and every Warning, from the namespace's events."""
    entries = []
    for event in events:
        at = parse_time(event_time(event))
        if at is None:
            continue
        involved = event.get("involvedObject") or event.get("regarding") or {}
        reason, kind = str(event.get("reason") or "?"), "warning"
        if reason == "ScalingReplicaSet":
            kind = "scale"
        elif reason == "SuccessfulRescale":
            kind = "hpa"
        elif event.get("type") != "Warning":
            continue
        count = event.get("count") or dig(event, "series", "count") or 1
        times = f" (x{count})" if isinstance(count, int) and count > 1 else ""
        message = " ".join(str(event.get("message") or event.get("note") or "").split())
        about = f"{involved.get('kind', '?')} {involved.get('name', '?')}"
        text = f"{about}: {reason}{times}: {message}"
        evidence = f"Event {dig(event, 'metadata', 'name')}"
        entries.append(Entry(at, kind, text, evidence))
    return entries


def restart_entries(pods: list[Obj]) -> list[Entry]:
    """Each container's last termination (it restarted after it)."""
    entries = []
    for pod in pods:
        name = dig(pod, "metadata", "name")
        for status in dig(pod, "status", "containerStatuses") or []:
            last = dig(status, "lastState", "terminated")
            at = parse_time(dig(last, "finishedAt"))
            if at is None:
                continue
            container = status.get("name")
            text = (
                f"Pod {name} container {container} restarted after {last.get('reason') or 'exit'}"
                f" (exit code {last.get('exitCode')}, {status.get('restartCount') or 0} restarts)"
            )
            evidence = f"Pod {name} status.containerStatuses[{container}].lastState"
            entries.append(Entry(at, "restart", text, evidence))
    return entries


def configmap_entries(configmaps: list[Obj], only: set[str] | None) -> list[Entry]:
    """When each ConfigMap was last written (its managedFields' latest time), by whom."""
    entries = []
    for configmap in configmaps:
        meta = configmap.get("metadata") or {}
        if only is not None and meta.get("name") not in only:
            continue
        writes = [
            (parse_time(m.get("time")), str(m.get("manager") or "?"))
            for m in meta.get("managedFields") or []
            if isinstance(m, dict)
        ]
        dated = [(at, who) for at, who in writes if at is not None]
        created = parse_time(meta.get("creationTimestamp"))
        at, who = max(dated, key=lambda w: w[0]) if dated else (created, "?")
        if at is None:
            continue
        what = "created" if at == created else "changed"
        text = f"ConfigMap {meta.get('name')} {what} by {who} (values not shown)"
        evidence = f"ConfigMap {meta.get('name')} resourceVersion {meta.get('resourceVersion')}"
        entries.append(Entry(at, "config", text, evidence))
    return entries


def hpa_entries(hpas: list[Obj], events: list[Obj]) -> list[Entry]:
    """Each HPA's last scaling, unless a SuccessfulRescale event already tells it."""
    told = {
        dig(e, "involvedObject", "name") for e in events if e.get("reason") == "SuccessfulRescale"
    }
    entries = []
    for hpa in hpas:
        at = parse_time(dig(hpa, "status", "lastScaleTime"))
        name = dig(hpa, "metadata", "name")
        if at is None or name in told:
            continue
        target = dig(hpa, "spec", "scaleTargetRef") or {}
        status = hpa.get("status") or {}
        text = (
            f"HPA {name} scaled {target.get('kind')} {target.get('name')} to "
            f"{status.get('desiredReplicas')} replicas (now {status.get('currentReplicas')})"
        )
        evidence = f"HorizontalPodAutoscaler {name} status.lastScaleTime"
        entries.append(Entry(at, "hpa", text, evidence))
    return entries


def _replicas_written(rs: Obj) -> tuple[datetime, str] | None:
    """When spec.replicas of a ReplicaSet was last written after its creation, and by whom
    (its managedFields; a status write is not a scale)."""
    created = parse_time(dig(rs, "metadata", "creationTimestamp"))
    latest: tuple[datetime, str] | None = None
    for managed in dig(rs, "metadata", "managedFields") or []:
        fields = dig(managed, "fieldsV1", "f:spec") or {}
        at = parse_time(managed.get("time"))
        if "f:replicas" not in fields or at is None or managed.get("subresource") == "status":
            continue
        if created is not None and at <= created + timedelta(seconds=1):
            continue
        if latest is None or at > latest[0]:
            latest = (at, str(managed.get("manager") or "?"))
    return latest


def scale_entries(
    replicasets: list[Obj], owners: set[Any] | None, events: list[Obj]
) -> list[Entry]:
    """Replica changes the ReplicaSets show that no ScalingReplicaSet event tells."""
    told = " ".join(str(e.get("message")) for e in events if e.get("reason") == "ScalingReplicaSet")
    entries = []
    for rs in replicasets:
        name = dig(rs, "metadata", "name")
        written = _replicas_written(rs)
        if written is None or not _in(rs, owners) or str(name) in told:
            continue
        text = f"ReplicaSet {name} set to {dig(rs, 'spec', 'replicas')} replicas by {written[1]}"
        evidence = f"ReplicaSet {name} managedFields spec.replicas"
        entries.append(Entry(written[0], "scale", text, evidence))
    return entries


def node_entries(nodes: list[Obj], names: set[str]) -> list[Entry]:
    entries = []
    for node in nodes:
        name = dig(node, "metadata", "name")
        if name not in names:
            continue
        for condition in dig(node, "status", "conditions") or []:
            at = parse_time(condition.get("lastTransitionTime"))
            if at is None:
                continue
            kind, status = condition.get("type"), condition.get("status")
            why = f" ({condition.get('reason')})" if condition.get("reason") else ""
            text = f"Node {name} condition {kind} became {status}{why}"
            evidence = f"Node {name} status.conditions[{kind}].lastTransitionTime"
            entries.append(Entry(at, "node", text, evidence))
    return entries


def _controller(obj: Obj) -> Obj | None:
    refs = dig(obj, "metadata", "ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def _in(obj: Obj, owners: set[Any] | None) -> bool:
    """Whether `obj` is owned by one of `owners` (None: no workload named, every object)."""
    if owners is None:
        return True
    refs = dig(obj, "metadata", "ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") in owners for r in refs)


def _owner_uids(scope: Scope, replicasets: list[Obj]) -> set[Any] | None:
    """The workload's uid and its ReplicaSets' (what its pods name as their owner)."""
    if scope.uid is None:
        return None
    owned = {dig(rs, "metadata", "uid") for rs in replicasets if _owned_by(rs, scope.uid)}
    return {scope.uid, *owned}


def _revisions_by_owner(
    replicasets: list[Obj], controller_revisions: list[Obj], owners: set[Any] | None
) -> tuple[dict[str, list[Revision]], dict[str, str]]:
    """The revisions (ReplicaSets, ControllerRevisions) by their workload's uid, and each
    workload's kind and name."""
    revisions: dict[str, list[Revision]] = {}
    names: dict[str, str] = {}
    # Items of a list carry no `kind`: what was listed says which reader applies.
    listed = [(rs, replicaset_revision(rs)) for rs in replicasets]
    listed += [(cr, controller_revision(cr)) for cr in controller_revisions]
    for obj, revision in listed:
        owner = _controller(obj)
        if owner is None or (owners is not None and owner.get("uid") not in owners):
            continue
        if revision is None:
            continue
        uid = str(owner.get("uid"))
        revisions.setdefault(uid, []).append(revision)
        names[uid] = f"{owner.get('kind')} {owner.get('name')}"
    return revisions, names


def _targets(hpa: Obj, scope: Scope) -> bool:
    target = dig(hpa, "spec", "scaleTargetRef") or {}
    return target.get("kind") == scope.kind and target.get("name") == scope.name


def _about(event: Obj, scope: Scope, related: set[str], other_pods: set[str]) -> bool:
    """Whether an event is about the workload or what it owns; a pod that is gone is known
    by its name alone (the workload's name and a dash)."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    name = str(involved.get("name"))
    if name in related:
        return True
    gone = involved.get("kind") == "Pod" and name not in other_pods
    return gone and scope.covers_name(name)


def _counts(entries: list[Entry]) -> str:
    if not entries:
        return "no changes"
    kinds: dict[str, int] = {}
    for entry in entries:
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    each = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return f"{plural(len(entries), 'change')} ({each})"


def _window_text(window: timedelta) -> str:
    minutes = int(window.total_seconds()) // 60
    hours, rest = divmod(minutes, 60)
    return f"{hours}h{rest}m" if hours and rest else (f"{hours}h" if hours else f"{minutes}m")


def _current(kind: str, workload: Obj, revisions: list[Revision]) -> int:
    """The workload's current revision: a Deployment's annotation, a StatefulSet's
    status.updateRevision, else the highest."""
    highest = revisions[0].number
    if kind == "Deployment":
        value = str(dig(workload, "metadata", "annotations", REVISION) or "")
        return int(value) if value.isdigit() else highest
    update = dig(workload, "status", "updateRevision")
    named = [r.number for r in revisions if update and r.source.endswith(f"/{update}")]
    return named[0] if named else highest


def _difference(
    revisions: list[Revision], current: int, args: HistoryArgs, where: str
) -> list[str]:
    """The pod-template difference of `revision` (default current) against `compare_to`
    (default the one before it)."""
    by_number = {r.number: r for r in revisions}
    listed = ", ".join(str(n) for n in sorted(by_number))
    wanted = args.revision or current
    if wanted not in by_number:
        raise ToolArgumentError(f"{where} has no revision {wanted} (revisions: {listed}).")
    earlier = [n for n in by_number if n < wanted]
    base = args.compare_to if args.compare_to is not None else max(earlier, default=None)
    if base is None:
        return [f"Revision {wanted} is the first recorded one: nothing to compare it with."]
    if base not in by_number:
        raise ToolArgumentError(f"{where} has no revision {base} (revisions: {listed}).")
    title = f"Pod template difference, revision {base} → revision {wanted}:"
    return [title, *template_diff(by_number[base], by_number[wanted])]


def _within(entries: Iterable[Entry], since: datetime, now: datetime) -> list[Entry]:
    # Stamps have whole seconds: at the same second, the later-listed entry (a source lists
    # in the order things happened, e.g. revision 2 before 3) comes first.
    kept = [(e.at, i, e) for i, e in enumerate(entries) if since <= e.at <= now]
    return [e for _, _, e in sorted(kept, key=lambda k: (k[0], k[1]), reverse=True)]


@dataclass(frozen=True)
class Listed:
    """What a timeline is made from: the namespace's objects, as listed."""

    replicasets: list[Obj]
    revisions: list[Obj]  # ControllerRevisions
    hpas: list[Obj]
    pods: list[Obj]
    events: list[Obj]
    configmaps: list[Obj]  # metadata only


def timeline(scope: Scope, found: Listed, owners: set[Any] | None, nodes: list[Obj]) -> list[Entry]:
    """Every entry of the scope, in no particular order and whatever its time."""
    hpas = [h for h in found.hpas if scope.name is None or _targets(h, scope)]
    pods = [p for p in found.pods if _in(p, owners)]
    related = _related_names(scope, found, owners, [*pods, *hpas])
    others = {str(dig(p, "metadata", "name")) for p in found.pods} - (related or set())
    events = [e for e in found.events if related is None or _about(e, scope, related, others)]
    return [
        *rollout_entries(*_revisions_by_owner(found.replicasets, found.revisions, owners)),
        *scale_entries(found.replicasets, owners, events),
        *event_entries(events),
        *restart_entries(pods),
        *configmap_entries(found.configmaps, scope.configmaps()),
        *hpa_entries(hpas, events),
        *node_entries(nodes, {str(dig(p, "spec", "nodeName")) for p in pods}),
    ]


def _related_names(
    scope: Scope, found: Listed, owners: set[Any] | None, theirs: list[Obj]
) -> set[str] | None:
    """The names of the workload and what it owns or what scales it (None: no workload)."""
    if scope.name is None:
        return None
    owned = [o for o in [*found.replicasets, *found.revisions] if _in(o, owners)]
    objs = [*owned, *theirs]
    return {scope.name, *(str(dig(o, "metadata", "name")) for o in objs)}


# --- the handlers -------------------------------------------------------------------------

_READ = {
    "Deployment": lambda kube: kube.apps.read_namespaced_deployment,
    "StatefulSet": lambda kube: kube.apps.read_namespaced_stateful_set,
    "DaemonSet": lambda kube: kube.apps.read_namespaced_daemon_set,
}


class _Changes(KubeReads):
    def __init__(self, clients: KubeClients, clock: Clock) -> None:
        super().__init__(clients)
        self._clock = clock

    async def _workload(self, kube: KubeClient, kind: str, namespace: str, name: str) -> Obj:
        return dict(
            await kube.call_json(
                f"read {kind.lower()} {namespace}/{name}", _READ[kind](kube), name, namespace
            )
        )

    async def _replicasets(
        self, kube: KubeClient, namespace: str, selector: str | None
    ) -> list[Obj]:
        listing = await kube.call_json(
            f"list replicasets in namespace {namespace}",
            kube.apps.list_namespaced_replica_set,
            namespace,
            label_selector=selector,
        )
        return items_of(listing)

    async def _controller_revisions(
        self, kube: KubeClient, namespace: str, selector: str | None
    ) -> list[Obj]:
        listing = await kube.call_json(
            f"list controllerrevisions in namespace {namespace}",
            kube.apps.list_namespaced_controller_revision,
            namespace,
            label_selector=selector,
        )
        return items_of(listing)

    async def _revisions(self, kube: KubeClient, kind: str, workload: Obj) -> list[Revision]:
        namespace = str(dig(workload, "metadata", "namespace"))
        uid = dig(workload, "metadata", "uid")
        labels = dig(workload, "spec", "selector", "matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
        # Items of a list carry no `kind`: what was listed says which reader applies.
        if kind == "Deployment":
            owned = await self._replicasets(kube, namespace, selector)
            found = [replicaset_revision(o) for o in owned if _owned_by(o, uid)]
        else:
            owned = await self._controller_revisions(kube, namespace, selector)
            found = [controller_revision(o) for o in owned if _owned_by(o, uid)]
        return sorted((r for r in found if r is not None), key=lambda r: -r.number)

    async def rollout_history(self, args: HistoryArgs, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        kube = self.kube(context)
        workload = await self._workload(kube, args.kind, namespace, args.name)
        revisions = await self._revisions(kube, args.kind, workload)
        where = f"{args.kind} {namespace}/{args.name}"
        if not revisions:
            return result([f"{where} has no recorded revisions."], f"{where}: no revisions")
        current = _current(args.kind, workload, revisions)
        lines = [f"{where}: {plural(len(revisions), 'revision')}, current {current}"]
        lines += self._history_table(revisions, current)
        lines += _difference(revisions, current, args, where)
        return result(lines, f"{where}: {plural(len(revisions), 'revision')}, current {current}")

    def _history_table(self, revisions: list[Revision], current: int) -> list[str]:
        now = self._clock()
        rows = [
            [
                f"{r.number}{' (current)' if r.number == current else ''}",
                f"{stamp(r.created)} ({age(stamp(r.created), now)} ago)" if r.created else "?",
                _images_text(r.images),
                r.change_cause or "-",
            ]
            for r in revisions[:MAX_REVISIONS]
        ]
        more = len(revisions) - MAX_REVISIONS
        note = [f"… and {more} older revisions."] if more > 0 else []
        return [*table(["REVISION", "CREATED", "IMAGES", "CHANGE-CAUSE"], rows), *note]

    async def what_changed(self, args: ChangesArgs, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        now = self._clock()
        window = parse_window(args.window)
        kube = self.kube(context)
        scope = await self._scope(kube, namespace, args.workload)
        entries, gaps = await self._entries(kube, scope)
        shown = _within(entries, now - window, now)
        about = f"{scope.kind} {namespace}/{scope.name}" if scope.name else f"namespace {namespace}"
        span = f"{stamp(now - window)} to {stamp(now)}"
        summary = f"what changed in {about} over {_window_text(window)}: {_counts(shown)}"
        lines = [f"What changed in {about}, {span} (newest first): {_counts(shown)}"]
        if not shown:
            lines.append("Nothing recorded in this window.")
        lines += table(None, [e.row() for e in shown[:MAX_ENTRIES]])
        if len(shown) > MAX_ENTRIES:
            lines.append(
                f"… and {len(shown) - MAX_ENTRIES} older entries (narrow the window or name a "
                "workload)."
            )
        lines += [f"Not included: {gap}" for gap in gaps]
        return result(lines, summary)

    async def _scope(self, kube: KubeClient, namespace: str, workload: str | None) -> Scope:
        if workload is None:
            return Scope(namespace)
        kind, _, name = workload.partition("/")
        obj = await self._workload(kube, kind, namespace, name)
        template = dig(obj, "spec", "template") or {}
        return Scope(namespace, kind, name, dig(obj, "metadata", "uid"), template)

    async def _entries(self, kube: KubeClient, scope: Scope) -> tuple[list[Entry], list[str]]:
        """Every entry the sources give (unbounded in time); a source that fails is named in
        the gaps, and the others still count."""
        ns, gaps = scope.namespace, []

        async def listed(what: str, fn: Callable[..., Any], **kw: Any) -> list[Obj]:
            try:
                answer = await kube.call_json(f"list {what} in namespace {ns}", fn, ns, **kw)
            except ToolFailure as exc:
                gaps.append(f"{what} ({exc})")
                return []
            return items_of(answer)

        apps, autoscaling, core = kube.apps, kube.autoscaling_v1, kube.core
        replicasets = await listed("replicasets", apps.list_namespaced_replica_set)
        owners = _owner_uids(scope, replicasets)
        found = Listed(
            replicasets=replicasets,
            revisions=await listed("controllerrevisions", apps.list_namespaced_controller_revision),
            hpas=await listed(
                "horizontalpodautoscalers", autoscaling.list_namespaced_horizontal_pod_autoscaler
            ),
            pods=await listed("pods", core.list_namespaced_pod),
            events=await listed("events", core.list_namespaced_event),
            # Metadata only: a ConfigMap's values never reach kelpie.
            configmaps=await listed(
                "configmaps", core.list_namespaced_config_map, _headers={"Accept": METADATA_ONLY}
            ),
        )
        nodes = await self._nodes(kube, [p for p in found.pods if _in(p, owners)], gaps)
        return timeline(scope, found, owners, nodes), gaps

    async def _nodes(self, kube: KubeClient, pods: list[Obj], gaps: list[str]) -> list[Obj]:
        names = sorted({str(n) for p in pods if (n := dig(p, "spec", "nodeName"))})
        if not names:
            return []
        try:
            listing = await kube.call_json("list nodes", kube.core.list_node)
        except ToolFailure as exc:
            gaps.append(f"node conditions ({exc})")
            return []
        if len(names) > MAX_NODES:
            gaps.append(f"the conditions of {len(names) - MAX_NODES} more nodes")
        wanted = set(names[:MAX_NODES])
        return [n for n in items_of(listing) if dig(n, "metadata", "name") in wanted]


def change_tools(clients: KubeClients, *, clock: Clock = system_clock) -> list[Tool]:
    reads = _Changes(clients, clock)
    return [
        declare(
            "rollout_history",
            ToolKind.READ,
            "A workload's revisions (change-cause, images) and the template diff of two.",
            HistoryArgs,
            reads.audited(reads.rollout_history),
            kinds=("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ControllerRevision"),
        ),
        declare(
            "what_changed",
            ToolKind.READ,
            "Recent changes: rollouts, scaling, restarts, warnings, ConfigMaps, HPA, nodes.",
            ChangesArgs,
            reads.audited(reads.what_changed),
            kinds=_TIMELINE_KINDS,
        ),
    ]


_TIMELINE_KINDS = (
    "ReplicaSet",
    "ControllerRevision",
    "Event",
    "Pod",
    "ConfigMap",
    "HorizontalPodAutoscaler",
    "Node",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
)
