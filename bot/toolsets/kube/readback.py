"""Reads a write's target back to tell whether its planned change is in place (start-up
reconciliation of an approval that was approved but has no recorded outcome).

Only field changes the plan names are compared (`spec.replicas 3 → 5` is in place when the
object's spec.replicas reads 5); a deleted pod is in place when the previewed pod (its
uid) is gone. Anything that cannot be read or compared counts as not in place: kelpie then
says "not executed" and a person asks again, which never runs a write twice.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from bot.toolsets.kube.client import KubeClients, KubeFailure
from bot.toolsets.kube.render import dig
from bot.values import WritePlan

log = logging.getLogger(__name__)

_PLAIN_FIELD = re.compile(r"^[A-Za-z]+(\.[A-Za-z]+)+$")


def _shown(value: Any) -> str:
    """The value as the card showed it (the write tools' rendering)."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class KubeReadback:
    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients

    async def applied(self, plan: WritePlan, approval_id: str = "") -> bool:
        try:
            current = await self._read(plan)
        except (KubeFailure, KeyError):
            log.warning("could not read %s back", plan.target.key, exc_info=True)
            return False
        if plan.tool == "delete_pod":
            return current is None or dig(current, "metadata", "uid") != plan.target.uid
        if current is None or dig(current, "metadata", "uid") != plan.target.uid:
            return False
        fields = [change for change in plan.changes if _PLAIN_FIELD.match(change.field)]
        if not fields or len(fields) != len(plan.changes):
            return False
        return all(
            _shown(dig(current, *change.field.split("."))) == change.after for change in fields
        )

    async def _read(self, plan: WritePlan) -> Any:
        target = plan.target
        kube = self._clients.client_for(plan.cluster)
        reads: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
            "Deployment": (kube.apps.read_namespaced_deployment, (target.name, target.namespace)),
            "Pod": (kube.core.read_namespaced_pod, (target.name, target.namespace)),
            "Node": (kube.core.read_node, (target.name,)),
        }
        read, args = reads[target.kind]
        try:
            return await kube.call_json(f"read {target.key}", read, *args)
        except KubeFailure as error:
            if error.status == 404:
                return None
            raise
