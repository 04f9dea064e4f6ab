"""The workloads toolset: deployments, their rollout and their ReplicaSets (read)."""

from __future__ import annotations

from bot.toolsets.declare import (
    NamespacedList,
    NamespacedObject,
    declare,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClient, KubeClients
from bot.toolsets.kube.render import (
    KubeReads,
    Obj,
    age,
    capped,
    dig,
    items_of,
    labels_text,
    ns_name,
    resources_text,
    result,
    table,
    where,
)
from bot.toolsets.spec import Tool, ToolContext, ToolFailure, ToolKind, ToolResult
from bot.values import plural


class _Workloads(KubeReads):
    async def list_deployments(self, args: NamespacedList, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=True)
        selector = args.label_selector
        kube = self.kube(context)
        describe = f"list deployments {where(namespace)}"
        if namespace is None:
            listing = await kube.call_json(
                describe, kube.apps.list_deployment_for_all_namespaces, label_selector=selector
            )
        else:
            listing = await kube.call_json(
                describe, kube.apps.list_namespaced_deployment, namespace, label_selector=selector
            )
        deployments = items_of(listing)
        rows, lagging = [], 0
        for deployment in deployments:
            desired = dig(deployment, "spec", "replicas")
            desired = 1 if desired is None else int(desired)
            status = deployment.get("status") or {}
            ready = int(status.get("readyReplicas") or 0)
            available = int(status.get("availableReplicas") or 0)
            lagging += ready < desired or available < desired
            name = ns_name(deployment) if namespace is None else dig(deployment, "metadata", "name")
            rows.append(
                [
                    str(name),
                    f"{ready}/{desired}",
                    str(status.get("updatedReplicas") or 0),
                    str(available),
                    age(dig(deployment, "metadata", "creationTimestamp")),
                ]
            )
        rows, more = capped(rows, "deployments")
        summary = (
            f"{plural(len(deployments), 'deployment')} {where(namespace)}, "
            f"{lagging} not fully available"
        )
        if not deployments:
            return result([f"No deployments {where(namespace)} match."], summary)
        header = ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        return result([summary, *table(header, rows), *([more] if more else [])], summary)

    async def describe_deployment(self, args: NamespacedObject, context: ToolContext) -> ToolResult:
        namespace = resolve_namespace(args.namespace, context, allow_all=False)
        name = args.name
        assert namespace is not None
        kube = self.kube(context)
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
            f"Selector: {labels_text(dig(spec, 'selector', 'matchLabels'))}",
        ]
        for container in dig(spec, "template", "spec", "containers") or []:
            lines.append(
                f"Container {container.get('name')}: image {container.get('image')}; "
                f"{resources_text(container)}"
            )
        annotations = dig(spec, "template", "metadata", "annotations")
        if annotations:
            lines.append(f"Pod template annotations: {labels_text(annotations)}")
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
        lines += await self.events_for(kube, namespace, "Deployment", name)
        summary = (
            f"deployment {namespace}/{name}: {counts['readyReplicas']}/{desired} ready, {rollout}"
        )
        return result(lines, summary)

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
            for rs in items_of(listing)
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
        return ["ReplicaSets (newest first):", *("  " + r for r in table(None, rows))]


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


def workload_tools(clients: KubeClients) -> list[Tool]:
    reads = _Workloads(clients)
    return [
        declare(
            "list_deployments",
            ToolKind.READ,
            "Deployments: ready/desired, up-to-date, available, age.",
            NamespacedList,
            reads.audited(reads.list_deployments),
            kinds=("Deployment",),
        ),
        declare(
            "describe_deployment",
            ToolKind.READ,
            "One deployment: replicas, rollout, strategy, images, conditions, revisions, events.",
            NamespacedObject,
            reads.audited(reads.describe_deployment),
            kinds=("Deployment", "ReplicaSet", "Event"),
        ),
    ]
