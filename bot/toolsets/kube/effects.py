"""What an approved write did, read from the cluster (the verification watch's probe).

- A deployment (scale, restart, roll back, resources): the rollout is done when the
  controller observed the new generation (`observedGeneration`) and every desired replica
  is updated and available, with no old one left; it failed when its `Progressing`
  condition says `ProgressDeadlineExceeded` (the controller gave up), or the deployment is
  gone or replaced.
- A deleted pod: gone (its uid), and the pods of its controller Running and ready again.
- A node: cordoned or schedulable as the write left it.

The reads act as the identity the write was made as (the role's `impersonate`, bound to the
plan), else kelpie's own (the RBAC in deploy/base grants get/list on all three): following a
change never reads with more than making it could.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
from bot.toolsets.kube.render import dig, pod_phase
from bot.toolsets.spec import bound_identity
from bot.values import Effect, WritePlan

log = logging.getLogger(__name__)

REVISION = "deployment.kubernetes.io/revision"
DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


def _count(obj: Any, field: str) -> int:
    value = dig(obj, "status", field)
    return value if isinstance(value, int) else 0


def _ready(pod: Any) -> bool:
    conditions = dig(pod, "status", "conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _progressing(deployment: Any) -> dict[str, Any]:
    for condition in dig(deployment, "status", "conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Progressing":
            return condition
    return {}


def rollout(deployment: Any, where: str) -> Effect:
    """A deployment's rollout, as `kubectl rollout status` judges it."""
    desired = dig(deployment, "spec", "replicas")
    desired = desired if isinstance(desired, int) else 1
    generation = dig(deployment, "metadata", "generation") or 0
    observed = dig(deployment, "status", "observedGeneration") or 0
    updated, available = (
        _count(deployment, "updatedReplicas"),
        _count(deployment, "availableReplicas"),
    )
    total = _count(deployment, "replicas")
    revision = dig(deployment, "metadata", "annotations", REVISION) or "?"
    state = f"{available}/{desired} replicas available at revision {revision}"
    progressing = _progressing(deployment)
    if progressing.get("reason") == DEADLINE_EXCEEDED:
        why = progressing.get("message") or "the rollout made no progress"
        return Effect(False, True, f"deployment {where}: {state}; {DEADLINE_EXCEEDED}: {why}")
    if observed < generation:
        lag = f"the controller has not observed generation {generation} yet (at {observed})"
        return Effect(False, False, f"deployment {where}: {state}; {lag}")
    if updated < desired or available < desired or total > updated:
        old = f", {total - updated} old" if total > updated else ""
        progress = f"{updated}/{desired} updated{old}"
        return Effect(False, False, f"deployment {where}: {state}; {progress}")
    return Effect(True, False, f"deployment {where}: {state}")


class KubeEffects:
    """Implements the verification watch's `Effects` port."""

    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients

    async def observe(self, plan: WritePlan) -> Effect:
        target = plan.target
        kube = self._clients.client_for(plan.cluster).acting_as(bound_identity(plan))
        where = f"{target.namespace}/{target.name}" if target.namespace else target.name
        if target.kind == "Deployment":
            return await self._deployment(kube, plan, where)
        if target.kind == "Pod":
            return await self._pod(kube, plan, where)
        if target.kind == "Node":
            return await self._node(kube, plan)
        return Effect(True, False, f"{target.kind} {where}: nothing to follow")

    async def _read(self, kube: KubeClient, what: str, read: Any, *args: str) -> Any:
        try:
            return await kube.call_json(f"read {what}", read, *args)
        except KubeFailure as error:
            if error.status == 404:
                return None
            raise

    async def _deployment(self, kube: KubeClient, plan: WritePlan, where: str) -> Effect:
        target = plan.target
        deployment = await self._read(
            kube,
            f"deployment {where}",
            kube.apps.read_namespaced_deployment,
            target.name,
            target.namespace,
        )
        if deployment is None:
            return Effect(False, True, f"deployment {where} is gone")
        if dig(deployment, "metadata", "uid") != target.uid:
            return Effect(False, True, f"deployment {where} was deleted and created again")
        return rollout(deployment, where)

    async def _pod(self, kube: KubeClient, plan: WritePlan, where: str) -> Effect:
        target = plan.target
        pod = await self._read(
            kube, f"pod {where}", kube.core.read_namespaced_pod, target.name, target.namespace
        )
        if pod is not None and dig(pod, "metadata", "uid") == target.uid:
            return Effect(False, False, f"pod {where} is still there ({pod_phase(pod)})")
        owner = plan.args.get("owner")
        if not isinstance(owner, dict):
            return Effect(True, False, f"pod {where} is gone (no controller replaces it)")
        listing = await kube.call_json(
            f"list the pods in {target.namespace}",
            kube.core.list_namespaced_pod,
            target.namespace,
        )
        owned = [
            p
            for p in dig(listing, "items") or []
            if any(
                isinstance(ref, dict) and ref.get("uid") == owner.get("uid")
                for ref in dig(p, "metadata", "ownerReferences") or []
            )
        ]
        running = [p for p in owned if pod_phase(p) == "Running" and _ready(p)]
        # Right after the delete the replacement may not exist yet: count against what the
        # controller wants, where it says.
        wanted = max(len(owned), await self._desired(kube, owner, target.namespace) or 0)
        who = f"{owner.get('kind')} {owner.get('name')}"
        state = f"pod {where} is gone; {who} has {len(running)}/{wanted} pods Running and ready"
        return Effect(wanted > 0 and len(running) == wanted, False, state)

    async def _desired(self, kube: KubeClient, owner: dict[str, Any], namespace: str) -> int | None:
        """The replicas a ReplicaSet or StatefulSet wants (None: another kind, or gone).
        ReplicaSets are listed by name: kelpie's ClusterRole lists them, never gets one."""
        name = str(owner.get("name"))
        what = f"{owner.get('kind')} {namespace}/{name}"
        if owner.get("kind") == "ReplicaSet":
            listing = await kube.call_json(
                f"list {what}",
                kube.apps.list_namespaced_replica_set,
                namespace,
                field_selector=f"metadata.name={name}",
            )
            found = next(iter(dig(listing, "items") or []), None)
        elif owner.get("kind") == "StatefulSet":
            read = kube.apps.read_namespaced_stateful_set
            found = await self._read(kube, what, read, name, namespace)
        else:
            return None
        replicas = dig(found, "spec", "replicas") if found is not None else None
        return replicas if isinstance(replicas, int) else None

    async def _node(self, kube: KubeClient, plan: WritePlan) -> Effect:
        name = plan.target.name
        node = await self._read(kube, f"node {name}", kube.core.read_node, name)
        if node is None:
            return Effect(False, True, f"node {name} is gone")
        wanted = plan.tool == "cordon_node"
        cordoned = bool(dig(node, "spec", "unschedulable"))
        state = "cordoned (unschedulable)" if cordoned else "schedulable"
        if cordoned != wanted:
            return Effect(False, True, f"node {name} is {state} again")
        return Effect(True, False, f"node {name} is {state}")
