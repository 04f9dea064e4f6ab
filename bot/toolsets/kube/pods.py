"""The pods toolset: list and describe pods, read their logs (read)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.toolsets.declare import (
    NAME,
    OPTIONAL_NAME,
    FieldSelector,
    NamespacedList,
    NamespacedObject,
    ObjectNamespace,
    ToolArgs,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    age,
    capped,
    container_state,
    container_statuses,
    dig,
    items_of,
    labels_text,
    ns_name,
    pod_not_ready,
    pod_phase,
    pod_ready,
    resources_text,
    restarts,
    result,
    table,
    where,
)
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult
from bot.values import plural

DEFAULT_TAIL_LINES = 200
DEFAULT_LIMIT_BYTES = 65536


class PodList(NamespacedList):
    field_selector: FieldSelector = None


class PodLogs(ToolArgs):
    namespace: ObjectNamespace = None
    name: Annotated[str, NAME, Field(description="Pod name.")]
    container: Annotated[
        str | None,
        OPTIONAL_NAME,
        Field(description="Container name; required when the pod has several."),
    ] = None
    tail_lines: Annotated[
        int, Field(ge=1, le=5000, description="How many of the last lines to return.")
    ] = DEFAULT_TAIL_LINES
    previous: Annotated[
        bool, Field(description="Logs of the previous terminated instance of the container.")
    ] = False
    since_seconds: Annotated[
        int | None,
        Field(ge=1, le=30 * 86400, description="Only lines newer than this many seconds."),
    ] = None
    limit_bytes: Annotated[
        int, Field(ge=1, le=10 * 1024 * 1024, description="Stop after this many bytes.")
    ] = DEFAULT_LIMIT_BYTES


class _Pods(KubeReads):
    async def list_pods(self, args: PodList, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=True)
        selectors = {"label_selector": args.label_selector, "field_selector": args.field_selector}
        kube = self.kube(context)
        describe = f"list pods {where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.core.list_pod_for_all_namespaces, **selectors
            )
        else:
            listing = await kube.call_json(
                describe, kube.core.list_namespaced_pod, namespace, **selectors
            )
        pods = items_of(listing)
        not_ready = sum(1 for p in pods if pod_not_ready(p))
        header = ["NAME", "PHASE", "READY", "RESTARTS", "AGE", "NODE"]
        rows = []
        for pod in pods:
            ready, total = pod_ready(pod)
            name = ns_name(pod) if namespace is None else dig(pod, "metadata", "name")
            rows.append(
                [
                    str(name),
                    pod_phase(pod),
                    f"{ready}/{total}",
                    restarts(pod),
                    age(dig(pod, "metadata", "creationTimestamp")),
                    dig(pod, "spec", "nodeName") or "-",
                ]
            )
        rows, more = capped(rows, "pods")
        summary = f"{plural(len(pods), 'pod')} {where(namespace)}, {not_ready} not ready"
        if not pods:
            return result([f"No pods {where(namespace)} match."], summary)
        return result([summary, *table(header, rows), *([more] if more else [])], summary)

    async def describe_pod(self, args: NamespacedObject, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        name = args.name
        assert namespace is not None
        kube = self.kube(context)
        pod = await kube.call_json(
            f"read pod {namespace}/{name}", kube.core.read_namespaced_pod, name, namespace
        )
        ready, total = pod_ready(pod)
        meta = pod.get("metadata") or {}
        owners = [f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or []]
        lines = [
            f"Pod {namespace}/{name}: {pod_phase(pod)}, {ready}/{total} containers ready, "
            f"restarts {restarts(pod)}",
            f"Node: {dig(pod, 'spec', 'nodeName') or '-'}  IP: {dig(pod, 'status', 'podIP') or '-'}"
            f"  Age: {age(meta.get('creationTimestamp'))}"
            f"  QoS: {dig(pod, 'status', 'qosClass') or '-'}",
            f"Controlled by: {', '.join(owners) or '-'}",
            f"Labels: {labels_text(meta.get('labels'))}",
        ]
        if dig(pod, "status", "message"):
            lines.append(f"Message: {dig(pod, 'status', 'message')}")
        statuses = {s.get("name"): s for s in container_statuses(pod)}
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
                        f"    state: {container_state(status)}; "
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
                lines.append(f"    {resources_text(container)}")
        conditions = []
        for condition in dig(pod, "status", "conditions") or []:
            text = f"{condition.get('type')}={condition.get('status')}"
            if condition.get("reason"):
                text += f" ({condition['reason']})"
            conditions.append(text)
        lines.append(f"Conditions: {', '.join(conditions) or 'none reported'}")
        lines += await self.events_for(kube, namespace, "Pod", name)
        summary = f"pod {namespace}/{name}: {pod_phase(pod)}, {ready}/{total} ready"
        return result(lines, summary + f", restarts {restarts(pod)}")

    async def pod_logs(self, args: PodLogs, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        assert namespace is not None
        name, container, previous = args.name, args.container, args.previous
        tail, since, limit = args.tail_lines, args.since_seconds, args.limit_bytes
        kube = self.kube(context)
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
            return result([f"(no log lines{window})"], summary, attachment="")
        text = logs
        if limit is not None and size >= limit:
            note = f"[cut at limit_bytes={limit}; lower tail_lines or raise limit_bytes]"
            text = logs + ("" if logs.endswith("\n") else "\n") + note
            summary += f", cut at {limit} bytes"
        return ToolResult(text=text, summary=summary, attachment=logs)


def pod_tools(clients: KubeClients) -> list[Tool]:
    reads = _Pods(clients)
    return [
        declare(
            "list_pods",
            ToolKind.READ,
            "List pods: phase (with the waiting/termination reason), ready containers, "
            "restarts (with the last termination reason), age and node. Starts with a "
            "summary line such as '12 pods in namespace shop, 2 not ready'.",
            PodList,
            reads.audited(reads.list_pods),
            kinds=("Pod",),
        ),
        declare(
            "describe_pod",
            ToolKind.READ,
            "Describe one pod: phase, node, owner, each container's state, readiness, "
            "restarts and last termination (reason, exit code), resources, conditions and "
            "the pod's recent events.",
            NamespacedObject,
            reads.audited(reads.describe_pod),
            kinds=("Pod", "Event"),
        ),
    ]


def pod_log_tools(clients: KubeClients) -> list[Tool]:
    reads = _Pods(clients)
    return [
        declare(
            "pod_logs",
            ToolKind.READ,
            "Read a pod's logs (the last tail_lines lines, at most limit_bytes). Use "
            "previous=true for the logs of the previous, crashed instance of the container.",
            PodLogs,
            reads.audited(reads.pod_logs),
            kinds=("Pod",),
        )
    ]
