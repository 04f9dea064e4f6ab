"""Re-read, at export time, the objects and logs a thread's tools read, masked for a file.

What the tools saw then is gone (their stored results are rendered text): the fixture is
the cluster as it is when the export runs, read with the channel's role (its Kubernetes
identity, only its namespaces), and the case file says so. Masked before anything is
written: no Secret is ever read; ConfigMap values become `<masked>`; kubectl's
last-applied copy and managedFields are dropped; container env values are masked as
`NAME=value` would be in a log; then the outbound masker runs over every string.
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from bot.feedback.reads import SECRET_KINDS, LogRead, ObjectRead, ReadPlan
from bot.model.outbound import mask_text, mask_value
from bot.toolsets.kube.client import KubeClient, KubeFailure

log = logging.getLogger(__name__)

MASKED = "<masked>"
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")

# kind → (apiVersion, plural, namespaced): the built-in kinds kelpie's read tools read.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Pod": ("v1", "pods", True),
    "Service": ("v1", "services", True),
    "Endpoints": ("v1", "endpoints", True),
    "Event": ("v1", "events", True),
    "ConfigMap": ("v1", "configmaps", True),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims", True),
    "Namespace": ("v1", "namespaces", False),
    "Node": ("v1", "nodes", False),
    "Deployment": ("apps/v1", "deployments", True),
    "ReplicaSet": ("apps/v1", "replicasets", True),
    "StatefulSet": ("apps/v1", "statefulsets", True),
    "DaemonSet": ("apps/v1", "daemonsets", True),
    "ControllerRevision": ("apps/v1", "controllerrevisions", True),
    "Job": ("batch/v1", "jobs", True),
    "CronJob": ("batch/v1", "cronjobs", True),
    "Ingress": ("networking.k8s.io/v1", "ingresses", True),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "horizontalpodautoscalers", True),
}

Obj = dict[str, Any]


@dataclass
class Fixture:
    objects: list[Obj] = field(default_factory=list)
    logs: list[Obj] = field(default_factory=list)
    # Reads that are not in the fixture, each with why.
    missing: list[str] = field(default_factory=list)


class FixtureReader:
    """Reads a plan through `kube` (already acting as the role's identity), within the
    role's `namespaces` patterns."""

    def __init__(self, kube: KubeClient, namespaces: list[str]) -> None:
        self._kube = kube
        self._namespaces = namespaces

    async def read(self, plan: ReadPlan) -> Fixture:
        fixture = Fixture(missing=list(plan.not_captured))
        seen: set[tuple[str, str, str]] = set()
        for read in plan.objects:
            for obj in await self._objects(read, fixture):
                meta = obj.get("metadata") or {}
                key = (obj["kind"], str(meta.get("namespace") or ""), str(meta.get("name")))
                if key not in seen:
                    seen.add(key)
                    fixture.objects.append(obj)
        for entry in plan.logs:
            text = await self._logs(entry, fixture)
            if text is not None:
                fixture.logs.append(_log_entry(entry, text))
        return fixture

    async def _objects(self, read: ObjectRead, fixture: Fixture) -> list[Obj]:
        known = KINDS.get(read.kind)
        what = f"{read.kind} {read.namespace or '-'}/{read.name or '*'}"
        if read.kind in SECRET_KINDS:
            return []
        if known is None:
            fixture.missing.append(f"{what}: a kind the export does not read")
            return []
        if known[2] and not self._allowed(read.namespace):
            fixture.missing.append(f"{what}: no namespace of the channel's role named")
            return []
        try:
            found = await self._kube.get_path(f"read {what}", _path(read, *known), _query(read))
        except KubeFailure as failure:
            fixture.missing.append(f"{what}: {failure}")
            return []
        items = found.get("items") if read.name is None else [found]
        return [clean(item, read.kind, known[0]) for item in items or []]

    async def _logs(self, entry: LogRead, fixture: Fixture) -> str | None:
        what = f"logs of {entry.namespace}/{entry.pod}" + (" (previous)" if entry.previous else "")
        if not self._allowed(entry.namespace):
            fixture.missing.append(f"{what}: outside the channel's role")
            return None
        try:
            text = await self._kube.call(
                f"read {what}",
                self._kube.core.read_namespaced_pod_log,
                entry.pod,
                entry.namespace,
                container=entry.container,
                previous=entry.previous or None,
                tail_lines=entry.tail_lines,
            )
        except KubeFailure as failure:
            fixture.missing.append(f"{what}: {failure}")
            return None
        masked, _ = mask_text(str(text or ""), "logs")
        return masked

    def _allowed(self, namespace: str | None) -> bool:
        return namespace is not None and any(
            fnmatchcase(namespace, pattern) for pattern in self._namespaces
        )


def _path(read: ObjectRead, api_version: str, plural: str, namespaced: bool) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{read.namespace}" if namespaced else ""
    name = f"/{read.name}" if read.name else ""
    return f"{base}{scope}/{plural}{name}"


def _query(read: ObjectRead) -> dict[str, str | None]:
    return {"labelSelector": read.label_selector} if read.name is None else {}


def _log_entry(entry: LogRead, text: str) -> Obj:
    logged: Obj = {"namespace": entry.namespace, "pod": entry.pod}
    if entry.container:
        logged["container"] = entry.container
    return logged | {"previous": entry.previous, "text": text}


def clean(obj: Obj, kind: str, api_version: str) -> Obj:
    """The object as the fixture keeps it: masked (see the module's docstring)."""
    obj = copy.deepcopy(obj)
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(_LAST_APPLIED, None)
    if kind == "ConfigMap":
        for key in ("data", "binaryData"):
            if isinstance(obj.get(key), dict):
                obj[key] = dict.fromkeys(obj[key], MASKED)
    _mask_env(obj)
    masked, _ = mask_value({"apiVersion": api_version, "kind": kind} | obj, "fixture")
    return dict(masked)


def relative_times(value: Any, at: datetime) -> Any:
    """Every RFC 3339 time in `value` as `now-<N>s` before `at` (when it was read), the form
    the eval's loader resolves against a run's `now`: replayed later, the objects keep their
    ages ("restarted 43 s ago"), not the day they were read."""
    if isinstance(value, dict):
        return {key: relative_times(item, at) for key, item in value.items()}
    if isinstance(value, list):
        return [relative_times(item, at) for item in value]
    if isinstance(value, str) and _RFC3339.match(value):
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        seconds = int((at - when).total_seconds())
        return f"now-{seconds}s" if seconds > 0 else "now"
    return value


def _mask_env(node: Any) -> None:
    """Env values masked as `NAME=value` would be in a log (the name decides, e.g. a
    PASSWORD); a secretKeyRef only names a Secret and stays."""
    if isinstance(node, list):
        for item in node:
            _mask_env(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                for variable in value:
                    if isinstance(variable, dict) and isinstance(variable.get("value"), str):
                        masked, _ = mask_text(f"{variable.get('name')}={variable['value']}")
                        variable["value"] = masked.partition("=")[2]
            else:
                _mask_env(value)
