"""The pods toolset: list and describe pods, read their logs (read)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from bot.toolsets.declare import (
    NAME,
    OPTIONAL_NAME,
    FieldSelector,
    NamespacedList,
    NamespacedObject,
    ObjectNamespace,
    ToolArgs,
    checked,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
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
from bot.toolsets.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolResult,
)
from bot.values import plural

DEFAULT_TAIL_LINES = 200
DEFAULT_LIMIT_BYTES = 65536


MAX_SINCE_S = 7 * 86400
_DURATION = re.compile(r"(\d{1,7})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# --- the sentences of this module ---------------------------------------------------------
_BAD_DURATION = '{key} {value!r} must be a duration such as "15m", "2h" or "1d" (at most 7d).'
_NO_SUCH_CONTAINER = "Pod {pod} has no container {container!r}; its containers: {names}."
_NAME_A_CONTAINER = "Pod {pod} has several containers ({names}): name one with container."
_NO_PREVIOUS = (
    "{which} {pod} has no previous terminated instance to read (it has not restarted); "
    "read its current logs without previous."
)


def _duration(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    found = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if found is None or not 0 < int(found[1]) * _UNIT_S[found[2]] <= MAX_SINCE_S:
        raise ToolArgumentError(_BAD_DURATION.format(key=key, value=value))
    return str(value)


def since_seconds(since: str | None) -> int | None:
    found = _DURATION.fullmatch(since) if since else None
    return int(found[1]) * _UNIT_S[found[2]] if found else None


class PodList(NamespacedList):
    field_selector: FieldSelector = None


class PodLogs(ToolArgs):
    namespace: ObjectNamespace = None
    name: Annotated[str, NAME]
    container: Annotated[
        str | None,
        OPTIONAL_NAME,
        Field(description="Required when the pod has several."),
    ] = None
    tail_lines: Annotated[int, Field(ge=1, le=5000)] = DEFAULT_TAIL_LINES
    previous: Annotated[bool, Field(description="The crashed instance's logs.")] = False
    since: Annotated[
        str | None,
        checked(_duration),
        Field(description='e.g. "15m", "2h" (at most 7d)'),
    ] = None
    limit_bytes: Annotated[int, Field(ge=1, le=10 * 1024 * 1024)] = DEFAULT_LIMIT_BYTES


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
        tail, since, limit = args.tail_lines, since_seconds(args.since), args.limit_bytes
        kube = self.kube(context)
        which = f"container {container} of pod" if container else "pod"
        instance = " (previous instance)" if previous else ""
        try:
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
        except KubeFailure as failure:
            if failure.status != 400:
                raise
            raise await self._log_refusal(kube, namespace, args, failure) from None
        logs = logs if isinstance(logs, str) else str(logs or "")
        line_count = len(logs.splitlines())
        size = len(logs.encode())
        summary = f"logs of {which} {namespace}/{name}{instance}: {plural(line_count, 'line')}"
        if not logs:
            window = f" in the last {args.since}" if args.since else ""
            return result([f"(no log lines{window})"], summary, attachment="")
        text = logs
        if limit is not None and size >= limit:
            note = f"[cut at limit_bytes={limit}; lower tail_lines or raise limit_bytes]"
            text = logs + ("" if logs.endswith("\n") else "\n") + note
            summary += f", cut at {limit} bytes"
        return ToolResult(text=text, summary=summary, attachment=logs)

    async def _log_refusal(
        self, kube: KubeClient, namespace: str, args: PodLogs, failure: KubeFailure
    ) -> KubeFailure:
        """A 400 to a log request in words naming the pod's containers (a wrong or missing
        container name, or no previous instance)."""
        try:
            pod = await kube.call_json(
                f"read pod {namespace}/{args.name}",
                kube.core.read_namespaced_pod,
                args.name,
                namespace,
            )
        except ToolFailure:
            return failure
        spec = pod.get("spec") or {}
        names = [
            str(c.get("name"))
            for key in ("initContainers", "containers")
            for c in spec.get(key) or []
        ]
        label = f"{namespace}/{args.name}"
        if args.container is not None and args.container not in names:
            text = _NO_SUCH_CONTAINER.format(
                pod=label, container=args.container, names=", ".join(names)
            )
        elif args.container is None and len(spec.get("containers") or []) > 1:
            text = _NAME_A_CONTAINER.format(pod=label, names=", ".join(names))
        elif args.previous:
            which = f"Container {args.container} of pod" if args.container else "Pod"
            text = _NO_PREVIOUS.format(which=which, pod=label)
        else:
            return failure
        return KubeFailure(text, status=400)


def pod_tools(clients: KubeClients) -> list[Tool]:
    reads = _Pods(clients)
    return [
        declare(
            "list_pods",
            ToolKind.READ,
            "Pods: phase and reason, ready, restarts and last termination, age, node.",
            PodList,
            reads.audited(reads.list_pods),
            kinds=("Pod",),
        ),
        declare(
            "describe_pod",
            ToolKind.READ,
            "One pod: containers' state, restarts, last exit, resources, conditions, events.",
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
            "A pod's last log lines, bounded and masked.",
            PodLogs,
            reads.audited(reads.pod_logs),
            kinds=("Pod",),
        )
    ]
