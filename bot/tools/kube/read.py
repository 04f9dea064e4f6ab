"""The Kubernetes read tools (kind `read`): list and describe what is there, read logs.

Each tool validates its arguments with the `spec` helpers (unknown or ill-typed arguments
raise ToolArgumentError), calls the API through `KubeClient.call_json` (so every failure is
a one-sentence ToolFailure) and turns the wire objects into compact text for a model:
a summary line first, then aligned rows, capped at MAX_ROWS. Never a raw API dump.

Deliberately absent: Secrets. No tool reads a Secret, and environment variables that
come from a secretKeyRef are never resolved (container env is not shown at all).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bot.agent.events import plural
from bot.tools.kube.client import KubeClient, KubeClients
from bot.tools.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
    ToolScope,
    bool_arg,
    int_arg,
    name_arg,
    namespace_arg,
    only_args,
    str_arg,
)

Obj = dict[str, Any]
Handler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]

MAX_ROWS = 200
EVENTS_IN_DESCRIBE = 10
DEFAULT_TAIL_LINES = 200
DEFAULT_LIMIT_BYTES = 65536

_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")  # fullmatch: no trailing newline

# --- JSON schema pieces ---------------------------------------------------------------

_NAMESPACE_LIST = {
    "type": "string",
    "description": 'Namespace to list; "*" for all namespaces. Defaults to the channel\'s.',
}
_NAMESPACE_ONE = {
    "type": "string",
    "description": "Namespace of the object. Defaults to the channel's namespace.",
}
_LABEL_SELECTOR = {
    "type": "string",
    "description": 'Label selector, e.g. "app=checkout", "tier in (web,api)", "env!=dev".',
}
_FIELD_SELECTOR = {
    "type": "string",
    "description": 'Field selector, e.g. "status.phase=Running" or "spec.nodeName=node-a".',
}


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


# --- small helpers ----------------------------------------------------------------------


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]…, or None where anything along the way is missing."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _parse_time(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(stamp: Any, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 5h, 3d ("?" when unknown)."""
    then = _parse_time(stamp)
    if then is None:
        return "?"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 120 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns (two spaces apart), with a header line unless it is None."""
    every = [header, *rows] if header is not None else list(rows)
    if not every:
        return []
    widths = [max(len(str(r[i])) for r in every) for i in range(len(every[0]))]
    return [
        "  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in every
    ]


def _capped(rows: list[list[str]], noun: str) -> tuple[list[list[str]], str | None]:
    if len(rows) <= MAX_ROWS:
        return rows, None
    more = len(rows) - MAX_ROWS
    return rows[:MAX_ROWS], f"… and {more} more {noun} (narrow with a selector or namespace)."


def _where(namespace: str | None) -> str:
    return f"in namespace {namespace}" if namespace else "in all namespaces"


def _labels(labels: Any) -> str:
    if not isinstance(labels, dict) or not labels:
        return "-"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _items(listing: Any) -> list[Obj]:
    items = dig(listing, "items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _ns_name(obj: Obj) -> str:
    namespace = dig(obj, "metadata", "namespace")
    name = dig(obj, "metadata", "name") or "?"
    return f"{namespace}/{name}" if namespace else str(name)


def _result(lines: list[str], summary: str, attachment: str | None = None) -> ToolResult:
    return ToolResult(text="\n".join(lines), summary=summary, attachment=attachment)


# --- pods ---------------------------------------------------------------------------------


def _container_statuses(pod: Obj) -> list[Obj]:
    statuses = dig(pod, "status", "containerStatuses")
    return [s for s in statuses if isinstance(s, dict)] if isinstance(statuses, list) else []


def pod_phase(pod: Obj) -> str:
    """The phase, with the reason a person would look at first (kubectl's STATUS)."""
    if dig(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    phase = dig(pod, "status", "phase") or "Unknown"
    reason = dig(pod, "status", "reason")  # e.g. Evicted
    if not reason:
        for status in _container_statuses(pod):
            reason = dig(status, "state", "waiting", "reason") or dig(
                status, "state", "terminated", "reason"
            )
            if reason and reason != "Completed":
                break
            reason = None
    if not reason:
        for condition in dig(pod, "status", "conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reason = condition.get("reason")
    return f"{phase} ({reason})" if reason else str(phase)


def _pod_ready(pod: Obj) -> tuple[int, int]:
    total = len(dig(pod, "spec", "containers") or []) or len(_container_statuses(pod))
    ready = sum(1 for s in _container_statuses(pod) if s.get("ready") is True)
    return ready, total


def _restarts(pod: Obj) -> str:
    statuses = _container_statuses(pod)
    count = sum(int(s.get("restartCount") or 0) for s in statuses)
    last = [dig(s, "lastState", "terminated", "reason") for s in statuses]
    reasons = sorted({r for r in last if r})
    return f"{count} ({', '.join(reasons)})" if count and reasons else str(count)


def _pod_not_ready(pod: Obj) -> bool:
    ready, total = _pod_ready(pod)
    return dig(pod, "status", "phase") != "Succeeded" and (total == 0 or ready < total)


def _resources(container: Obj) -> str:
    parts = []
    for key in ("requests", "limits"):
        values = dig(container, "resources", key)
        if isinstance(values, dict) and values:
            parts.append(f"{key} " + ", ".join(f"{k}={v}" for k, v in sorted(values.items())))
    return "; ".join(parts) or "no requests or limits"


def _container_state(status: Obj) -> str:
    state = status.get("state") or {}
    if "running" in state and state["running"] is not None:
        return f"running since {age(dig(state, 'running', 'startedAt'))} ago"
    if state.get("waiting") is not None:
        waiting = state["waiting"]
        message = f": {waiting['message']}" if waiting.get("message") else ""
        return f"waiting ({waiting.get('reason') or 'unknown reason'}{message})"
    if state.get("terminated") is not None:
        done = state["terminated"]
        return f"terminated ({done.get('reason') or 'no reason'}, exit code {done.get('exitCode')})"
    return "unknown"


def _event_time(event: Obj) -> str | None:
    for stamp in (
        event.get("lastTimestamp"),
        dig(event, "series", "lastObservedTime"),  # a repeated event's latest occurrence
        event.get("eventTime"),
        event.get("deprecatedLastTimestamp"),
        event.get("firstTimestamp"),
        dig(event, "metadata", "creationTimestamp"),
    ):
        if stamp:
            return str(stamp)
    return None


def _sorted_events(events: list[Obj]) -> list[Obj]:
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(events, key=lambda e: _parse_time(_event_time(e)) or epoch, reverse=True)


def _event_row(event: Obj, *, with_object: bool, with_namespace: bool = False) -> list[str]:
    # core/v1 events and events.k8s.io/v1 ones (note, regarding, series) alike.
    count = event.get("count") or dig(event, "series", "count") or 1
    message = " ".join(str(event.get("message") or event.get("note") or "").split())
    row = [f"{age(_event_time(event))} ago", str(event.get("type") or "?")]
    row.append(str(event.get("reason") or "?"))
    if with_object:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        where = f"{dig(event, 'metadata', 'namespace')}/" if with_namespace else ""
        row.append(f"{involved.get('kind', '?')} {where}{involved.get('name', '?')}")
    repeated = isinstance(count, int) and count > 1
    row.append((f"(x{count}) " if repeated else "") + message)
    return row


class _ReadTools:
    """The handlers; each looks up the client for the context's cluster on every call."""

    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients

    def _kube(self, context: ToolContext) -> KubeClient:
        return self._clients.client_for(context.cluster).acting_as(context.identity)

    def audited(self, handler: Handler) -> Handler:
        """`handler`, its result or failure naming the identity the cluster saw (audited)."""

        async def run(args: dict[str, Any], context: ToolContext) -> ToolResult:
            who = self._kube(context).seen_as
            try:
                result = await handler(args, context)
            except ToolFailure as failure:
                failure.acting_as = who
                raise
            return replace(result, acting_as=who)

        return run

    async def _events_for(
        self, kube: KubeClient, namespace: str, kind: str, name: str
    ) -> list[str]:
        """Recent events about one object, or one line saying why they are missing."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        try:
            listing = await kube.call_json(
                f"list events for {kind.lower()} {namespace}/{name}",
                kube.core.list_namespaced_event,
                namespace,
                field_selector=selector,
            )
        except ToolFailure as exc:
            return [f"Events: unavailable ({exc})"]
        events = _sorted_events(_items(listing))[:EVENTS_IN_DESCRIBE]
        if not events:
            return ["Events: none"]
        rows = [_event_row(e, with_object=False) for e in events]
        return ["Events (most recent first):", *("  " + r for r in _table(_EVENT_HEAD, rows))]

    # --- namespaces -------------------------------------------------------------------

    async def list_namespaces(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["label_selector"])
        selector = str_arg(args, "label_selector")
        kube = self._kube(context)
        listing = await kube.call_json(
            "list namespaces", kube.core.list_namespace, label_selector=selector
        )
        items = _items(listing)
        rows = [
            [
                dig(n, "metadata", "name") or "?",
                dig(n, "status", "phase") or "?",
                age(dig(n, "metadata", "creationTimestamp")),
            ]
            for n in items
        ]
        rows, more = _capped(rows, "namespaces")
        summary = plural(len(items), "namespace")
        lines = [summary, *_table(["NAME", "STATUS", "AGE"], rows), *([more] if more else [])]
        return _result(lines, summary)

    # --- pods ------------------------------------------------------------------------------

    async def list_pods(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "label_selector", "field_selector"])
        namespace = namespace_arg(args, context, allow_all=True)
        selectors = {
            "label_selector": str_arg(args, "label_selector"),
            "field_selector": str_arg(args, "field_selector"),
        }
        kube = self._kube(context)
        describe = f"list pods {_where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.core.list_pod_for_all_namespaces, **selectors
            )
        else:
            listing = await kube.call_json(
                describe, kube.core.list_namespaced_pod, namespace, **selectors
            )
        pods = _items(listing)
        not_ready = sum(1 for p in pods if _pod_not_ready(p))
        header = ["NAME", "PHASE", "READY", "RESTARTS", "AGE", "NODE"]
        rows = []
        for pod in pods:
            ready, total = _pod_ready(pod)
            name = _ns_name(pod) if namespace is None else dig(pod, "metadata", "name")
            rows.append(
                [
                    str(name),
                    pod_phase(pod),
                    f"{ready}/{total}",
                    _restarts(pod),
                    age(dig(pod, "metadata", "creationTimestamp")),
                    dig(pod, "spec", "nodeName") or "-",
                ]
            )
        rows, more = _capped(rows, "pods")
        summary = f"{plural(len(pods), 'pod')} {_where(namespace)}, {not_ready} not ready"
        if not pods:
            return _result([f"No pods {_where(namespace)} match."], summary)
        return _result([summary, *_table(header, rows), *([more] if more else [])], summary)

    async def describe_pod(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "name"])
        namespace = namespace_arg(args, context, allow_all=False)
        name = name_arg(args)
        assert namespace is not None and name is not None
        kube = self._kube(context)
        pod = await kube.call_json(
            f"read pod {namespace}/{name}", kube.core.read_namespaced_pod, name, namespace
        )
        ready, total = _pod_ready(pod)
        meta = pod.get("metadata") or {}
        owners = [f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or []]
        lines = [
            f"Pod {namespace}/{name}: {pod_phase(pod)}, {ready}/{total} containers ready, "
            f"restarts {_restarts(pod)}",
            f"Node: {dig(pod, 'spec', 'nodeName') or '-'}  IP: {dig(pod, 'status', 'podIP') or '-'}"
            f"  Age: {age(meta.get('creationTimestamp'))}"
            f"  QoS: {dig(pod, 'status', 'qosClass') or '-'}",
            f"Controlled by: {', '.join(owners) or '-'}",
            f"Labels: {_labels(meta.get('labels'))}",
        ]
        if dig(pod, "status", "message"):
            lines.append(f"Message: {dig(pod, 'status', 'message')}")
        statuses = {s.get("name"): s for s in _container_statuses(pod)}
        init_statuses = dig(pod, "status", "initContainerStatuses") or []
        statuses |= {s.get("name"): s for s in init_statuses if isinstance(s, dict)}
        for title, key in (("Init containers", "initContainers"), ("Containers", "containers")):
            containers = dig(pod, "spec", key) or []
            if not containers:
                continue
            lines.append(f"{title}:")
            for container in containers:
                cname = container.get("name")
                lines.append(f"  {cname}: image {container.get('image')}")
                status = statuses.get(cname)
                if status is None:
                    lines.append("    state: not started")
                else:
                    lines.append(
                        f"    state: {_container_state(status)}; "
                        f"ready {str(status.get('ready')).lower()}, "
                        f"restarts {status.get('restartCount', 0)}"
                    )
                    last = dig(status, "lastState", "terminated")
                    if last:
                        lines.append(
                            f"    last termination: {last.get('reason') or 'no reason'}, "
                            f"exit code {last.get('exitCode')}, "
                            f"finished {age(last.get('finishedAt'))} ago"
                        )
                lines.append(f"    {_resources(container)}")
        conditions = []
        for condition in dig(pod, "status", "conditions") or []:
            text = f"{condition.get('type')}={condition.get('status')}"
            if condition.get("reason"):
                text += f" ({condition['reason']})"
            conditions.append(text)
        lines.append(f"Conditions: {', '.join(conditions) or 'none reported'}")
        lines += await self._events_for(kube, namespace, "Pod", name)
        summary = f"pod {namespace}/{name}: {pod_phase(pod)}, {ready}/{total} ready"
        return _result(lines, summary + f", restarts {_restarts(pod)}")

    async def pod_logs(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(
            args,
            [
                "namespace",
                "name",
                "container",
                "tail_lines",
                "previous",
                "since_seconds",
                "limit_bytes",
            ],
        )
        namespace = namespace_arg(args, context, allow_all=False)
        name = name_arg(args)
        assert namespace is not None and name is not None
        container = name_arg(args, "container", required=False)
        tail = int_arg(args, "tail_lines", default=DEFAULT_TAIL_LINES, minimum=1, maximum=5000)
        previous = bool_arg(args, "previous", default=False)
        since = int_arg(args, "since_seconds", default=None, minimum=1, maximum=30 * 86400)
        limit = int_arg(
            args, "limit_bytes", default=DEFAULT_LIMIT_BYTES, minimum=1, maximum=10 * 1024 * 1024
        )
        kube = self._kube(context)
        which = f"container {container} of pod" if container else "pod"
        instance = " (previous instance)" if previous else ""
        logs = await kube.call(
            f"read logs of {which} {namespace}/{name}{instance}",
            kube.core.read_namespaced_pod_log,
            name,
            namespace,
            container=container,
            tail_lines=tail,
            previous=previous or None,
            since_seconds=since,
            limit_bytes=limit,
        )
        logs = logs if isinstance(logs, str) else str(logs or "")
        line_count = len(logs.splitlines())
        size = len(logs.encode())
        summary = f"logs of {which} {namespace}/{name}{instance}: {plural(line_count, 'line')}"
        if not logs:
            window = f" in the last {since}s" if since else ""
            return _result([f"(no log lines{window})"], summary, attachment="")
        text = logs
        if limit is not None and size >= limit:
            note = f"[cut at limit_bytes={limit}; lower tail_lines or raise limit_bytes]"
            text = logs + ("" if logs.endswith("\n") else "\n") + note
            summary += f", cut at {limit} bytes"
        return ToolResult(text=text, summary=summary, attachment=logs)

    # --- deployments ----------------------------------------------------------------------

    async def list_deployments(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "label_selector"])
        namespace = namespace_arg(args, context, allow_all=True)
        selector = str_arg(args, "label_selector")
        kube = self._kube(context)
        describe = f"list deployments {_where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.apps.list_deployment_for_all_namespaces, label_selector=selector
            )
        else:
            listing = await kube.call_json(
                describe, kube.apps.list_namespaced_deployment, namespace, label_selector=selector
            )
        deployments = _items(listing)
        rows, lagging = [], 0
        for deployment in deployments:
            desired = dig(deployment, "spec", "replicas")
            desired = 1 if desired is None else int(desired)
            status = deployment.get("status") or {}
            ready = int(status.get("readyReplicas") or 0)
            available = int(status.get("availableReplicas") or 0)
            lagging += ready < desired or available < desired
            name = (
                _ns_name(deployment) if namespace is None else dig(deployment, "metadata", "name")
            )
            rows.append(
                [
                    str(name),
                    f"{ready}/{desired}",
                    str(status.get("updatedReplicas") or 0),
                    str(available),
                    age(dig(deployment, "metadata", "creationTimestamp")),
                ]
            )
        rows, more = _capped(rows, "deployments")
        summary = (
            f"{plural(len(deployments), 'deployment')} {_where(namespace)}, "
            f"{lagging} not fully available"
        )
        if not deployments:
            return _result([f"No deployments {_where(namespace)} match."], summary)
        header = ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        return _result([summary, *_table(header, rows), *([more] if more else [])], summary)

    async def describe_deployment(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "name"])
        namespace = namespace_arg(args, context, allow_all=False)
        name = name_arg(args)
        assert namespace is not None and name is not None
        kube = self._kube(context)
        deployment = await kube.call_json(
            f"read deployment {namespace}/{name}",
            kube.apps.read_namespaced_deployment,
            name,
            namespace,
        )
        meta = deployment.get("metadata") or {}
        spec = deployment.get("spec") or {}
        status = deployment.get("status") or {}
        desired = 1 if spec.get("replicas") is None else int(spec["replicas"])
        counts = {k: int(status.get(k) or 0) for k in _REPLICA_FIELDS}
        revision = dig(meta, "annotations", "deployment.kubernetes.io/revision") or "?"
        rollout = rollout_status(deployment)
        lines = [
            f"Deployment {namespace}/{name} (revision {revision}, age "
            f"{age(meta.get('creationTimestamp'))})",
            f"Replicas: {desired} desired, {counts['updatedReplicas']} updated, "
            f"{counts['readyReplicas']} ready, {counts['availableReplicas']} available, "
            f"{counts['unavailableReplicas']} unavailable",
            f"Rollout: {rollout}",
            f"Strategy: {_strategy(spec)}",
            f"Selector: {_labels(dig(spec, 'selector', 'matchLabels'))}",
        ]
        for container in dig(spec, "template", "spec", "containers") or []:
            lines.append(
                f"Container {container.get('name')}: image {container.get('image')}; "
                f"{_resources(container)}"
            )
        annotations = dig(spec, "template", "metadata", "annotations")
        if annotations:
            lines.append(f"Pod template annotations: {_labels(annotations)}")
        lines.append("Conditions:")
        for condition in status.get("conditions") or []:
            lines.append(
                f"  {condition.get('type')}={condition.get('status')} "
                f"{condition.get('reason') or ''}: {condition.get('message') or ''} "
                f"(updated {age(condition.get('lastUpdateTime'))} ago)"
            )
        if not status.get("conditions"):
            lines.append("  none reported")
        lines += await self._replicasets_of(kube, deployment)
        lines += await self._events_for(kube, namespace, "Deployment", name)
        summary = (
            f"deployment {namespace}/{name}: {counts['readyReplicas']}/{desired} ready, {rollout}"
        )
        return _result(lines, summary)

    async def _replicasets_of(self, kube: KubeClient, deployment: Obj) -> list[str]:
        namespace = dig(deployment, "metadata", "namespace")
        uid = dig(deployment, "metadata", "uid")
        match_labels = dig(deployment, "spec", "selector", "matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items())) or None
        try:
            listing = await kube.call_json(
                f"list replicasets in namespace {namespace}",
                kube.apps.list_namespaced_replica_set,
                namespace,
                label_selector=selector,
            )
        except ToolFailure as exc:
            return [f"ReplicaSets: unavailable ({exc})"]
        owned = [
            rs
            for rs in _items(listing)
            if any(o.get("uid") == uid for o in dig(rs, "metadata", "ownerReferences") or [])
        ]

        def revision(rs: Obj) -> int:
            value = dig(rs, "metadata", "annotations", "deployment.kubernetes.io/revision")
            return int(value) if str(value).isdigit() else 0

        rows = []
        for rs in sorted(owned, key=revision, reverse=True):
            images = ",".join(
                str(c.get("image")) for c in dig(rs, "spec", "template", "spec", "containers") or []
            )
            rows.append(
                [
                    f"revision {revision(rs)}",
                    str(dig(rs, "metadata", "name")),
                    f"{dig(rs, 'spec', 'replicas') or 0} desired",
                    f"{dig(rs, 'status', 'replicas') or 0} current",
                    f"{dig(rs, 'status', 'readyReplicas') or 0} ready",
                    images or "-",
                    f"age {age(dig(rs, 'metadata', 'creationTimestamp'))}",
                ]
            )
        if not rows:
            return ["ReplicaSets: none found"]
        return ["ReplicaSets (newest first):", *("  " + r for r in _table(None, rows))]

    # --- events -------------------------------------------------------------------------

    async def list_events(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "kind", "name", "warnings_only"])
        namespace = namespace_arg(args, context, allow_all=True)
        kind = str_arg(args, "kind", max_len=63)
        if kind is not None and not _KIND.fullmatch(kind):
            raise ToolArgumentError(f"kind {kind!r} must be a Kubernetes kind such as Pod.")
        name = name_arg(args, required=False)
        warnings_only = bool_arg(args, "warnings_only", default=False)
        fields = []
        if kind:
            fields.append(f"involvedObject.kind={kind}")
        if name:
            fields.append(f"involvedObject.name={name}")
        if warnings_only:
            fields.append("type=Warning")
        selector = ",".join(fields) or None
        kube = self._kube(context)
        describe = f"list events {_where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.core.list_event_for_all_namespaces, field_selector=selector
            )
        else:
            listing = await kube.call_json(
                describe, kube.core.list_namespaced_event, namespace, field_selector=selector
            )
        events = _sorted_events(_items(listing))
        warnings = sum(1 for e in events if e.get("type") == "Warning")
        about = f" about {kind or 'object'} {name}" if name else (f" about {kind}s" if kind else "")
        summary = f"{plural(len(events), 'event')}{about} {_where(namespace)}, {warnings} warnings"
        if not events:
            return _result([f"No events{about} {_where(namespace)} match."], summary)
        rows = [_event_row(e, with_object=True, with_namespace=namespace is None) for e in events]
        rows, more = _capped(rows, "events")
        header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        return _result([summary, *_table(header, rows), *([more] if more else [])], summary)

    # --- nodes ------------------------------------------------------------------------------

    async def list_nodes(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["label_selector"])
        selector = str_arg(args, "label_selector")
        kube = self._kube(context)
        listing = await kube.call_json("list nodes", kube.core.list_node, label_selector=selector)
        nodes = _items(listing)
        rows, not_ready, cordoned = [], 0, 0
        for node in nodes:
            state = node_state(node)
            not_ready += not state.startswith("Ready")
            cordoned += bool(dig(node, "spec", "unschedulable"))
            cap = dig(node, "status", "capacity") or {}
            alloc = dig(node, "status", "allocatable") or {}
            taints = [
                f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                for t in dig(node, "spec", "taints") or []
            ]
            rows.append(
                [str(dig(node, "metadata", "name")), state]
                + [f"{alloc.get(r, '?')}/{cap.get(r, '?')}" for r in ("cpu", "memory", "pods")]
                + [
                    ",".join(taints) or "-",
                    dig(node, "status", "nodeInfo", "kubeletVersion") or "?",
                ]
                + [age(dig(node, "metadata", "creationTimestamp"))]
            )
        rows, more = _capped(rows, "nodes")
        summary = f"{plural(len(nodes), 'node')}, {not_ready} not ready, {cordoned} cordoned"
        header = ["NAME", "STATUS", "CPU alloc/cap", "MEMORY alloc/cap", "PODS alloc/cap"]
        header += ["TAINTS", "VERSION", "AGE"]
        return _result([summary, *_table(header, rows), *([more] if more else [])], summary)

    # --- services --------------------------------------------------------------------------

    async def list_services(self, args: dict[str, Any], context: ToolContext) -> ToolResult:
        args = only_args(args, ["namespace", "label_selector"])
        namespace = namespace_arg(args, context, allow_all=True)
        selector = str_arg(args, "label_selector")
        kube = self._kube(context)
        where = _where(namespace)
        if namespace is None:
            services = await kube.call_json(
                f"list services {where}",
                kube.core.list_service_for_all_namespaces,
                label_selector=selector,
            )
            endpoints_call: Callable[..., Any] = kube.core.list_endpoints_for_all_namespaces
            endpoint_args: tuple[str, ...] = ()
        else:
            services = await kube.call_json(
                f"list services {where}",
                kube.core.list_namespaced_service,
                namespace,
                label_selector=selector,
            )
            endpoints_call, endpoint_args = kube.core.list_namespaced_endpoints, (namespace,)
        endpoints: dict[str, tuple[int, int]] | None = None
        try:
            listing = await kube.call_json(
                f"list endpoints {where}", endpoints_call, *endpoint_args
            )
        except ToolFailure:
            pass  # the services are still worth showing; their endpoints read "?"
        else:
            endpoints = {}
            for item in _items(listing):
                subsets = item.get("subsets") or []
                ready = sum(len(s.get("addresses") or []) for s in subsets)
                pending = sum(len(s.get("notReadyAddresses") or []) for s in subsets)
                endpoints[_ns_name(item)] = (ready, pending)
        items = _items(services)
        rows, without = [], 0
        for service in items:
            spec = service.get("spec") or {}
            if endpoints is None:
                endpoint_text = "?"
            elif not spec.get("selector") and spec.get("type") == "ExternalName":
                endpoint_text = "-"
            else:
                ready, pending = endpoints.get(_ns_name(service), (0, 0))
                without += ready == 0
                endpoint_text = f"{ready} ready" + (f", {pending} not ready" if pending else "")
            ingress = dig(service, "status", "loadBalancer", "ingress") or []
            external = ",".join(str(i.get("ip") or i.get("hostname")) for i in ingress)
            name = _ns_name(service) if namespace is None else dig(service, "metadata", "name")
            rows.append(
                [
                    str(name),
                    str(spec.get("type") or "ClusterIP"),
                    str(spec.get("clusterIP") or "-"),
                    external or spec.get("externalName") or "-",
                    _ports(spec),
                    endpoint_text,
                ]
            )
        rows, more = _capped(rows, "services")
        summary = f"{plural(len(items), 'service')} {where}, {without} without ready endpoints"
        if not items:
            return _result([f"No services {where} match."], summary)
        header = ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL", "PORTS", "ENDPOINTS"]
        return _result([summary, *_table(header, rows), *([more] if more else [])], summary)


_EVENT_HEAD = ["LAST SEEN", "TYPE", "REASON", "MESSAGE"]
_REPLICA_FIELDS = ("updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas")


def _strategy(spec: Obj) -> str:
    strategy = spec.get("strategy") or {}
    kind = strategy.get("type") or "RollingUpdate"
    rolling = strategy.get("rollingUpdate") or {}
    if kind == "RollingUpdate" and rolling:
        return (
            f"RollingUpdate (maxSurge {rolling.get('maxSurge', '25%')}, "
            f"maxUnavailable {rolling.get('maxUnavailable', '25%')})"
        )
    return str(kind)


def _ports(spec: Obj) -> str:
    ports = []
    for port in spec.get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        target = port.get("targetPort")
        if target is not None and target != port.get("port"):
            text += f"->{target}"
        ports.append(f"{text}/{port.get('protocol') or 'TCP'}")
    return ",".join(ports) or "-"


def node_state(node: Obj) -> str:
    """Ready / NotReady / Unknown, plus SchedulingDisabled and any pressure condition."""
    state, extra = "Unknown", []
    for condition in dig(node, "status", "conditions") or []:
        kind, status = condition.get("type"), condition.get("status")
        if kind == "Ready":
            state = {"True": "Ready", "False": "NotReady"}.get(str(status), "Unknown")
        elif status == "True":
            extra.append(str(kind))
    if dig(node, "spec", "unschedulable"):
        extra.insert(0, "SchedulingDisabled")
    return ",".join([state, *extra])


def rollout_status(deployment: Obj) -> str:
    """The sentence `kubectl rollout status` would print, from the same fields."""
    generation = dig(deployment, "metadata", "generation") or 0
    status = deployment.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(generation):
        return "Waiting for the deployment spec update to be observed."
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and (
            condition.get("reason") == "ProgressDeadlineExceeded"
        ):
            return "Rollout has exceeded its progress deadline."
    desired = dig(deployment, "spec", "replicas")
    desired = 1 if desired is None else int(desired)
    updated = int(status.get("updatedReplicas") or 0)
    replicas = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < desired:
        return f"Waiting for rollout to finish: {updated} of {desired} new replicas are updated."
    if replicas > updated:
        return (
            f"Waiting for rollout to finish: {replicas - updated} old replicas are pending "
            "termination."
        )
    if available < updated:
        return (
            f"Waiting for rollout to finish: {available} of {updated} updated replicas are "
            "available."
        )
    return "Successfully rolled out."


def read_tools(clients: KubeClients) -> list[Tool]:
    """The read tools, bound to `clients` (the handler picks the context's cluster)."""
    t = _ReadTools(clients)

    def tool(
        name: str,
        description: str,
        handler: Handler,
        properties: dict[str, Any],
        kinds: tuple[str, ...],
        *,
        required: Sequence[str] = (),
        scope: ToolScope = ToolScope.NAMESPACED,
    ) -> Tool:
        return Tool(
            name=name,
            kind=ToolKind.READ,
            description=description,
            parameters=_schema(properties, required),
            handler=t.audited(handler),
            scope=scope,
            resource_kinds=kinds,
        )

    name = {"type": "string", "description": "Name of the object."}
    return [
        tool(
            "list_namespaces",
            "List the cluster's namespaces with their status and age.",
            t.list_namespaces,
            {"label_selector": _LABEL_SELECTOR},
            ("Namespace",),
            scope=ToolScope.CLUSTER,
        ),
        tool(
            "list_pods",
            "List pods: phase (with the waiting/termination reason), ready containers, "
            "restarts (with the last termination reason), age and node. Starts with a "
            "summary line such as '12 pods in namespace shop, 2 not ready'.",
            t.list_pods,
            {
                "namespace": _NAMESPACE_LIST,
                "label_selector": _LABEL_SELECTOR,
                "field_selector": _FIELD_SELECTOR,
            },
            ("Pod",),
        ),
        tool(
            "describe_pod",
            "Describe one pod: phase, node, owner, each container's state, readiness, "
            "restarts and last termination (reason, exit code), resources, conditions and "
            "the pod's recent events.",
            t.describe_pod,
            {"namespace": _NAMESPACE_ONE, "name": name},
            ("Pod", "Event"),
            required=["name"],
        ),
        tool(
            "pod_logs",
            "Read a pod's logs (the last tail_lines lines, at most limit_bytes). Use "
            "previous=true for the logs of the previous, crashed instance of the container.",
            t.pod_logs,
            {
                "namespace": _NAMESPACE_ONE,
                "name": {"type": "string", "description": "Pod name."},
                "container": {
                    "type": "string",
                    "description": "Container name; required when the pod has several.",
                },
                "tail_lines": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 5000,
                    "default": DEFAULT_TAIL_LINES,
                    "description": "How many of the last lines to return.",
                },
                "previous": {
                    "type": "boolean",
                    "default": False,
                    "description": "Logs of the previous terminated instance of the container.",
                },
                "since_seconds": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 30 * 86400,
                    "description": "Only lines newer than this many seconds.",
                },
                "limit_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10 * 1024 * 1024,
                    "default": DEFAULT_LIMIT_BYTES,
                    "description": "Stop after this many bytes.",
                },
            },
            ("Pod",),
            required=["name"],
        ),
        tool(
            "list_deployments",
            "List deployments with ready/desired, up-to-date and available replicas and age.",
            t.list_deployments,
            {"namespace": _NAMESPACE_LIST, "label_selector": _LABEL_SELECTOR},
            ("Deployment",),
        ),
        tool(
            "describe_deployment",
            "Describe one deployment: desired/updated/ready/available replicas, the rollout "
            "status, strategy, images, conditions, its ReplicaSets by revision and recent "
            "events.",
            t.describe_deployment,
            {"namespace": _NAMESPACE_ONE, "name": name},
            ("Deployment", "ReplicaSet", "Event"),
            required=["name"],
        ),
        tool(
            "list_events",
            "List events, most recent first, optionally only about one object (kind and/or "
            "name) and only warnings.",
            t.list_events,
            {
                "namespace": _NAMESPACE_LIST,
                "kind": {
                    "type": "string",
                    "description": "Kind of the object the events are about, e.g. Pod.",
                },
                "name": {
                    "type": "string",
                    "description": "Name of the object the events are about.",
                },
                "warnings_only": {
                    "type": "boolean",
                    "default": False,
                    "description": "Only events of type Warning.",
                },
            },
            ("Event",),
        ),
        tool(
            "list_nodes",
            "List nodes: Ready/NotReady, pressure conditions, cordoned (SchedulingDisabled), "
            "allocatable/capacity of cpu, memory and pods, taints, kubelet version and age.",
            t.list_nodes,
            {"label_selector": _LABEL_SELECTOR},
            ("Node",),
            scope=ToolScope.CLUSTER,
        ),
        tool(
            "list_services",
            "List services with type, cluster IP, external address, ports and how many "
            "ready endpoints each has.",
            t.list_services,
            {"namespace": _NAMESPACE_LIST, "label_selector": _LABEL_SELECTOR},
            ("Service", "Endpoints"),
        ),
    ]
