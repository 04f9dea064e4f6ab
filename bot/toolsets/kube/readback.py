"""Reads a write's target back to tell whether its planned change is in place (start-up
reconciliation of an approval that was approved but has no recorded outcome).

Only field changes the plan names are compared (`spec.replicas 3 → 5` is in place when the
object's spec.replicas reads 5); a deleted pod is in place when the previewed pod (its
uid) is gone. A target that cannot be read, a kind this does not read (another MCP
server's call) or a change it cannot compare tells nothing (UNKNOWN): kelpie then asks a
person to check before asking again, rather than claiming the change was not made.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from bot.toolsets.kube.client import KubeClients, KubeFailure
from bot.toolsets.kube.render import dig
from bot.values import Landed, WritePlan

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

    async def applied(self, plan: WritePlan, approval_id: str = "") -> Landed:
        try:
            current = await self._read(plan)
        except KeyError:
            return Landed.UNKNOWN  # a kind this does not read: another MCP server's call
        except KubeFailure:
            log.warning("could not read %s back", plan.target.key, exc_info=True)
            return Landed.UNKNOWN
        gone = current is None or dig(current, "metadata", "uid") != plan.target.uid
        if plan.tool == "delete_pod":
            return Landed.seen(gone)
        if gone:
            return Landed.NOT_APPLIED  # what is there now is not what was changed
        fields = [change for change in plan.changes if _PLAIN_FIELD.match(change.field)]
        if not fields or len(fields) != len(plan.changes):
            return Landed.UNKNOWN
        return Landed.seen(
            all(_shown(dig(current, *change.field.split("."))) == change.after for change in fields)
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
