"""The Kubernetes write tools (kind `write`): scale, restart, roll back, delete a pod,
cordon/uncordon a node, set a container's resources.

A write tool is never run by its `handler` (a guard that refuses); the approval flow calls
its `write` operation in two halves:

- `prepare(args, context)` changes nothing: it validates the arguments (ToolArgumentError,
  one sentence), asks the API server whether kelpie's own identity may do exactly this
  (a SelfSubjectAccessReview for the verb, resource, subresource, namespace and name),
  reads the target (its uid becomes the plan's `WriteTarget`) and sends the very same change
  as a server-side dry run (`dryRun=All`; for a DELETE inside the DeleteOptions body). The
  dry run names the uid but no resourceVersion: controllers rewrite status every few
  seconds, and a preview must not fail on that. The fields that differ between the object
  read and the dry run's answer are the preview (`FieldChange`s).
- `execute(plan, context)` runs after a person approved and is bound to what was approved:
  it re-reads the target and writes nothing (`WriteConflict`, one sentence) if it is gone,
  was replaced (another uid), or what the preview rested on moved (`plan.args["expect"]`:
  a deployment's `metadata.generation`, a node's `spec.unschedulable`). Status-only changes
  pass. The write names the uid (never a resourceVersion, which status churn would
  break); a 409 is retried from a fresh re-read and check (`MAX_WRITE_ATTEMPTS`). A pod is
  bound by its uid alone.

Everything `execute` needs is in `plan.args` (JSON-serialisable, so a plan can wait in the
database): the validated arguments plus what `prepare` computed (`restarted_at` for a
restart, `revision` and the `template` merge patch for a rollback). Bodies are plain dicts
(the 37.x client's pydantic models reject fields they do not know).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import Field

from bot.toolsets.declare import (
    NAME,
    ObjectNamespace,
    ToolArgs,
    checked,
    declare_write,
    parse_args,
    resolve_namespace,
)
from bot.toolsets.kube.client import KubeClient, KubeClients, KubeFailure
from bot.toolsets.kube.gitops import managed_by
from bot.toolsets.kube.render import dig, pod_phase
from bot.toolsets.spec import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolFailure,
    ToolHandler,
    ToolResult,
    ToolScope,
    WriteConflict,
    bind_identity,
    bound_identity,
)
from bot.values import FieldChange, GitOpsPolicy, WritePlan, WriteTarget

Obj = dict[str, Any]

DEFAULT_MAX_REPLICAS = 50
MAX_GRACE_PERIOD_S = 3600
MAX_CHANGES = 20  # FieldChanges shown in one preview
# Tries at the approved write when the object keeps moving (409) between re-read and write.
MAX_WRITE_ATTEMPTS = 4
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
REVISION = "deployment.kubernetes.io/revision"
POD_TEMPLATE_HASH = "pod-template-hash"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# Who the cluster's managedFields name as the owner of what an approved write changed (else
# the client's User-Agent, "OpenAPI-Generator"), so a GitOps applier's conflict names kelpie.
FIELD_MANAGER = "kelpie"
RESOURCE_NAMES = ("cpu", "memory")

# A Kubernetes quantity (resource.Quantity): a non-negative decimal number and an optional
# binary-SI (Ki…Ei), decimal-SI (n u m k M G T P E) or exponent (e3, E-2) suffix.
_QUANTITY = re.compile(
    r"^(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


# --- small helpers ----------------------------------------------------------------------


def _namespace(args: DeploymentTarget | PodTarget, context: ToolContext) -> str:
    value = resolve_namespace(args.namespace, context, allow_all=False)
    assert value is not None  # resolve_namespace(allow_all=False) raises instead
    return value


def _now_rfc3339() -> str:
    """What `kubectl rollout restart` writes (time.RFC3339), in UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _show(value: Any) -> str:
    """A field value as a person reads it on a card."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 120 else text[:119] + "…"


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    keys = list(first)
    return keys + [k for k in second if k not in keys]


def diff(before: Any, after: Any, path: str) -> list[FieldChange]:
    """The leaf fields that differ, kubectl-style paths: lists of named items by name
    (`spec.template.spec.containers[app].image`); a missing map reads as an empty one."""
    if before == after:
        return []
    if isinstance(before, dict | None) and isinstance(after, dict | None):
        old, new = before or {}, after or {}
        changes: list[FieldChange] = []
        for key in _union(old, new):
            changes += diff(old.get(key), new.get(key), f"{path}.{key}")
        return changes
    if _named_list(before) and _named_list(after) and before and after:
        by_old = {item["name"]: item for item in before}
        by_new = {item["name"]: item for item in after}
        changes = []
        for key in _union(by_old, by_new):
            old_item, new_item = by_old.get(key), by_new.get(key)
            if old_item is None or new_item is None:
                changes.append(FieldChange(f"{path}[{key}]", _show(old_item), _show(new_item)))
            else:
                changes += diff(old_item, new_item, f"{path}[{key}]")
        return changes
    return [FieldChange(path, _show(before), _show(after))]


def _replace_patch(current: Any, wanted: Any) -> Any:
    """A JSON merge patch (RFC 7386) that turns `current` into exactly `wanted`: `wanted`
    itself, with null for every map key that `current` has and `wanted` lacks."""
    if not isinstance(current, dict) or not isinstance(wanted, dict):
        return wanted
    patch: Obj = {key: None for key in current if key not in wanted}
    for key, value in wanted.items():
        patch[key] = _replace_patch(current.get(key), value)
    return patch


def _quantity(value: str) -> Decimal | None:
    """The value of a Kubernetes quantity, or None when it is not one."""
    match = _QUANTITY.match(value)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    try:
        number = Decimal(match["number"])
        if suffix[:1] in ("e", "E"):
            return number * Decimal(10) ** int(suffix[1:])
        return number * _SUFFIX[suffix]
    except (InvalidOperation, ValueError, OverflowError):
        return None


def _owned_by(obj: Obj, uid: str) -> bool:
    refs = dig(obj, "metadata", "ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == uid for r in refs)


def _revision(obj: Obj) -> int | None:
    value = dig(obj, "metadata", "annotations", REVISION)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _approval_only_handler() -> ToolHandler:
    async def refuse(args: dict[str, Any], context: ToolContext) -> ToolResult:
        raise ToolFailure("write tools run only through an approval")

    return refuse


def _resource_values(key: str, value: Any) -> dict[str, str] | None:
    """`requests` / `limits`: an object of cpu and/or memory quantities."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ToolArgumentError(f'{key} must be an object such as {{"cpu": "500m"}}.')
    unknown = sorted(set(value) - set(RESOURCE_NAMES))
    if unknown:
        raise ToolArgumentError(
            f"{key} may only set cpu and memory, not {', '.join(map(str, unknown))}."
        )
    values: dict[str, str] = {}
    for resource in RESOURCE_NAMES:
        raw = value.get(resource)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise ToolArgumentError(f"{key}.{resource} must be a quantity such as 500m or 1Gi.")
        text = str(raw).strip() if isinstance(raw, str) else str(raw)
        amount = _quantity(text)
        if amount is None:
            example = "500m or 2" if resource == "cpu" else "512Mi or 1Gi"
            raise ToolArgumentError(
                f"{key}.{resource} {raw!r} is not a Kubernetes quantity (e.g. {example})."
            )
        if resource == "memory" and text.endswith("m"):
            raise ToolArgumentError(
                f"{key}.memory {text!r} means {text[:-1]} thousandths of a byte; "
                "use Mi or Gi (e.g. 512Mi)."
            )
        values[resource] = text
    return values


# --- the arguments ---------------------------------------------------------------------


class DeploymentTarget(ToolArgs):
    namespace: ObjectNamespace = None
    name: Annotated[str, NAME, Field(description="Name of the deployment.")]


class ScaleArgs(DeploymentTarget):
    replicas: int


def scale_args(max_replicas: int) -> type[ScaleArgs]:
    """scale_deployment's arguments: the replica bound is the configuration's."""

    class Bounded(ScaleArgs):
        replicas: Annotated[
            int, Field(ge=0, le=max_replicas, description="The desired number of replicas.")
        ]

    return Bounded


class RollbackArgs(DeploymentTarget):
    revision: Annotated[
        int | None,
        Field(
            ge=1,
            le=2**31 - 1,
            description="Revision to roll back to (describe_deployment lists them); "
            "default: the previous one.",
        ),
    ] = None


class Quantities(ToolArgs):
    """CPU and/or memory quantities, checked (and written) as Kubernetes quantities."""

    cpu: Annotated[str | None, Field(description='CPU quantity, e.g. "250m" or "2".')] = None
    memory: Annotated[str | None, Field(description='Memory quantity, e.g. "512Mi" or "2Gi".')] = (
        None
    )

    def values(self) -> dict[str, str]:
        return self.model_dump(exclude_none=True)


QUANTITIES = checked(_resource_values)


class ResourcesArgs(DeploymentTarget):
    container: Annotated[str, NAME, Field(description="Name of the container.")]
    requests: Annotated[Quantities | None, QUANTITIES] = None
    limits: Annotated[Quantities | None, QUANTITIES] = None


class PodTarget(ToolArgs):
    namespace: ObjectNamespace = None
    name: Annotated[str, NAME, Field(description="Name of the pod.")]
    grace_period_seconds: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_GRACE_PERIOD_S,
            description="Seconds the pod gets to shut down; default: the pod's own "
            "terminationGracePeriodSeconds. 0 removes it at once.",
        ),
    ] = None


class NodeTarget(ToolArgs):
    name: Annotated[str, NAME]


# --- what every write tool shares ------------------------------------------------------


@dataclass(frozen=True)
class _Access:
    """The attributes of one SelfSubjectAccessReview."""

    verb: str
    resource: str
    group: str = ""
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None

    def body(self) -> Obj:
        attributes: Obj = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.subresource:
            attributes["subresource"] = self.subresource
        if self.namespace:
            attributes["namespace"] = self.namespace
        if self.name:
            attributes["name"] = self.name
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {resource}{where}"


def _noun(target: WriteTarget) -> str:
    where = f"{target.namespace}/{target.name}" if target.namespace else target.name
    return f"{target.kind.lower()} {where}"


def _conflict(target: WriteTarget, reason: str) -> WriteConflict:
    return WriteConflict(
        f"{_noun(target)} changed since the preview ({reason}); nothing was changed; "
        "propose the change again."
    )


def _write_failure(target: WriteTarget, exc: KubeFailure) -> ToolFailure:
    """A failed write as one sentence: a vanished or replaced target is a conflict (the
    API server answers a uid mismatch in a PATCH body with 422 "field is immutable")."""
    if exc.status == 404:
        return _conflict(target, "it no longer exists")
    if exc.status == 422 and "metadata.uid" in str(exc):
        return _conflict(target, "it was replaced by a new object of the same name")
    return exc


def _target(kind: str, obj: Obj) -> WriteTarget:
    meta = obj.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not version:
        raise ToolFailure(
            f"Kubernetes answered {kind} {meta.get('name')} without a uid or resourceVersion, "
            "so a change cannot be bound to it."
        )
    return WriteTarget(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name")),
        uid=str(uid),
        resource_version=str(version),
    )


def _bound_metadata(target: WriteTarget) -> Obj:
    """What a dry run's and a write's body names: the uid (a replaced object is refused:
    422 for a PATCH body, 409 for the scale subresource), never a resourceVersion.
    Controllers rewrite status all the time; the re-read just before the write checks
    what the approval rests on (generation, the previewed fields) instead."""
    return {"uid": target.uid}


GENERATION = ("metadata", "generation")
# The revision a template change started from: the verification watch's rollback target.
FROM_REVISION = "from_revision"


def _expect(obj: Obj, *paths: tuple[str, ...]) -> list[list[Any]]:
    """What `execute` re-checks (JSON-serialisable): [[path…], value as previewed] pairs."""
    return [[list(path), dig(obj, *path)] for path in paths]


def _expectations(plan: WritePlan) -> list[tuple[tuple[str, ...], Any]]:
    """The plan's expectations; a plan stored before they existed binds to its
    resourceVersion, as it was approved under."""
    raw = plan.args.get("expect")
    if raw is None:
        return [(("metadata", "resourceVersion"), plan.target.resource_version)]
    return [(tuple(path), value) for path, value in raw]


def _moved(path: tuple[str, ...], before: Any, now: Any) -> str:
    if path == GENERATION:
        return f"its spec was changed by someone else: generation {before} is now {now}"
    return f"{'.'.join(path)} was {_show(before)} and is now {_show(now)}"


_READERS = {
    "Deployment": lambda kube: kube.apps.read_namespaced_deployment,
    "Pod": lambda kube: kube.core.read_namespaced_pod,
    "Node": lambda kube: kube.core.read_node,
}


class _WriteOperation:
    """prepare/execute plumbing shared by the tools; subclasses fill in the specifics."""

    tool_name = ""
    # The declared arguments: the schema the model sees and the validation in `prepare`.
    args_model: type[ToolArgs] = ToolArgs

    def __init__(self, clients: KubeClients, *, gitops: GitOpsPolicy = GitOpsPolicy.REFUSE) -> None:
        self._clients = clients
        self._gitops_policy = gitops

    def _gitops(self, target: WriteTarget, obj: Obj) -> tuple[str, ...]:
        """The plan's note when Argo CD or Flux manages the target; with `refuse`, the
        refusal instead, raised before the dry run: nothing is sent and no card is posted."""
        manager = managed_by(obj)
        if manager is None:
            return ()
        what = _noun(target)
        what = what[0].upper() + what[1:]
        if self._gitops_policy is GitOpsPolicy.REFUSE:
            raise ToolFailure(manager.refusal(what))
        return (manager.warning(what),)

    async def prepare(self, args: dict[str, Any], context: ToolContext) -> WritePlan:
        """The tool's plan; one made as a role's Kubernetes identity stays bound to it."""
        plan = await self._prepare(parse_args(self.args_model, args), context)
        who = context.identity
        return plan if who is None else bind_identity(plan, who)

    async def execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        if plan.tool != self.tool_name:
            raise ToolFailure(f"a {plan.tool} plan cannot be executed by {self.tool_name}.")
        result = await self._execute(plan, context)
        who = bound_identity(plan)
        if who is None:
            return result
        return replace(result, summary=f"{result.summary} (as {who})")

    def _kube(self, context: ToolContext) -> KubeClient:
        return self._clients.client_for(context.cluster).acting_as(context.identity)

    def _plan_kube(self, plan: WritePlan) -> KubeClient:
        """The client for the approved write: as the identity the plan was made with."""
        return self._clients.client_for(plan.cluster).acting_as(bound_identity(plan))

    async def _prepare(self, args: Any, context: ToolContext) -> WritePlan:
        raise NotImplementedError

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        raise NotImplementedError

    async def _require_access(self, kube: KubeClient, access: _Access) -> None:
        review = await kube.call_json(
            f"check whether kelpie may {access}",
            kube.authz.create_self_subject_access_review,
            access.body(),
        )
        status = dig(review, "status") or {}
        if status.get("allowed") is True:
            return
        why = status.get("reason") or status.get("evaluationError")
        who = kube.identity or "kelpie's Kubernetes identity"
        raise ToolFailure(
            f"{who} may not {access}"
            + (f" ({why})." if why else ".")
            + " Ask a cluster admin to grant it, or make the change another way."
        )

    async def _dry_run(
        self, kube: KubeClient, describe: str, fn: Callable[..., Any], *args: Any, **kw: Any
    ) -> Obj:
        answer = await kube.call_json(f"dry-run {describe}", fn, *args, dry_run="All", **kw)
        if not isinstance(answer, dict):
            raise ToolFailure(f"Kubernetes answered the dry run to {describe} with no object.")
        return answer

    async def _dry_run_in_body(
        self, kube: KubeClient, describe: str, fn: Callable[..., Any], *args: Any, body: Obj
    ) -> Obj:
        """A dry run whose options travel in the body (DELETE): never `dry_run=` in the query."""
        if body.get("dryRun") != ["All"]:
            raise ToolFailure(f"refusing to preview {describe} without dryRun in its body.")
        answer = await kube.call_json(f"dry-run {describe}", fn, *args, body=body)
        if not isinstance(answer, dict):
            raise ToolFailure(f"Kubernetes answered the dry run to {describe} with no object.")
        return answer

    async def _bound_write(
        self, kube: KubeClient, plan: WritePlan, write: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Re-read the target, check it is still what was approved, then `write()`.

        A 409 (a conflict the API server could not resolve itself, or a uid precondition)
        is retried from a fresh re-read, a bounded number of times.
        """
        target = plan.target
        for _ in range(MAX_WRITE_ATTEMPTS):
            await self._reread(kube, plan)
            try:
                return await write()
            except KubeFailure as exc:
                if exc.status == 409:
                    continue
                raise _write_failure(target, exc) from exc
        raise WriteConflict(
            f"{_noun(target)} kept changing while kelpie tried to write it "
            f"({MAX_WRITE_ATTEMPTS} attempts); nothing was changed; propose the change again."
        )

    async def _reread(self, kube: KubeClient, plan: WritePlan) -> Obj:
        """The target as it is now, if it is still the object and state that was approved."""
        target = plan.target
        read = _READERS[target.kind](kube)
        try:
            current = await kube.call_json(f"read {_noun(target)}", read, *_at(target))
        except KubeFailure as exc:
            if exc.status == 404:
                raise _conflict(target, "it no longer exists") from exc
            raise
        uid = dig(current, "metadata", "uid")
        if uid != target.uid:
            raise _conflict(target, f"it was replaced: uid {target.uid} is now {uid}")
        for path, value in _expectations(plan):
            now = dig(current, *path)
            if isinstance(value, bool):  # an absent flag (spec.unschedulable) reads as false
                now = bool(now)
            if now != value:
                raise _conflict(target, _moved(path, value, now))
        return dict(current)

    @staticmethod
    def _spec_changes(before: Obj, after: Obj, what: str) -> tuple[FieldChange, ...]:
        changes = diff(before.get("spec"), after.get("spec"), "spec")
        if not changes:
            raise ToolArgumentError(f"nothing would change: {what}.")
        return tuple(changes[:MAX_CHANGES])

    @staticmethod
    def _more(changes_total: int) -> str:
        hidden = changes_total - MAX_CHANGES
        return f" ({hidden} more changed fields not shown)" if hidden > 0 else ""


# --- deployments ------------------------------------------------------------------------


class _DeploymentWrite(_WriteOperation):
    async def _read_deployment(self, kube: KubeClient, namespace: str, name: str) -> Obj:
        deployment = await kube.call_json(
            f"read deployment {namespace}/{name}",
            kube.apps.read_namespaced_deployment,
            name,
            namespace,
        )
        return dict(deployment)

    async def _patch_deployment(
        self, kube: KubeClient, plan: WritePlan, body: Obj, content_type: str, verb: str
    ) -> Obj:
        """The approved patch, bound by `_bound_write`."""
        target = plan.target

        async def patch() -> Any:
            return await kube.call_json(
                f"{verb} {_noun(target)}",
                kube.apps.patch_namespaced_deployment,
                target.name,
                target.namespace,
                body,
                _content_type=content_type,
                field_manager=FIELD_MANAGER,
            )

        return dict(await self._bound_write(kube, plan, patch) or {})


class ScaleDeployment(_DeploymentWrite):
    tool_name = "scale_deployment"

    def __init__(
        self,
        clients: KubeClients,
        *,
        max_replicas: int,
        gitops: GitOpsPolicy = GitOpsPolicy.REFUSE,
    ) -> None:
        super().__init__(clients, gitops=gitops)
        self.max_replicas = max_replicas
        self.args_model = scale_args(max_replicas)

    async def _prepare(self, args: ScaleArgs, context: ToolContext) -> WritePlan:
        namespace, name, replicas = _namespace(args, context), args.name, args.replicas
        kube = self._kube(context)
        await self._require_access(
            kube, _Access("patch", "deployments", "apps", "scale", namespace, name)
        )
        deployment = await self._read_deployment(kube, namespace, name)
        target = _target("Deployment", deployment)
        notes = self._gitops(target, deployment)
        before = dig(deployment, "spec", "replicas")
        if before == replicas:
            raise ToolArgumentError(
                f"deployment {namespace}/{name} already has {replicas} replicas; nothing to change."
            )
        scale = await self._dry_run(
            kube,
            f"scale deployment {namespace}/{name}",
            kube.apps.patch_namespaced_deployment_scale,
            name,
            namespace,
            self._body(_bound_metadata(target), replicas),
            _content_type=MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        after = dig(scale, "spec", "replicas")
        description = f"Scale deployment {namespace}/{name} from {before} to {after} replicas"
        if replicas == 0:
            description += " (stops all of its pods)"
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=description,
            cluster=context.cluster,
            target=target,
            changes=(FieldChange("spec.replicas", _show(before), _show(after)),),
            args={
                "namespace": namespace,
                "name": name,
                "replicas": replicas,
                "expect": _expect(deployment, GENERATION, ("spec", "replicas")),
            },
        )

    @staticmethod
    def _body(metadata: Obj, replicas: int) -> Obj:
        return {"metadata": metadata, "spec": {"replicas": replicas}}

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target, replicas = plan.target, int(plan.args["replicas"])
        kube = self._plan_kube(plan)

        # The scale subresource is a view of the deployment: the deployment is re-read and
        # checked, and its uid and resourceVersion are the scale patch's preconditions.
        async def patch() -> Any:
            return await kube.call_json(
                f"scale {_noun(target)}",
                kube.apps.patch_namespaced_deployment_scale,
                target.name,
                target.namespace,
                self._body(_bound_metadata(target), replicas),
                _content_type=MERGE_PATCH,
                field_manager=FIELD_MANAGER,
            )

        scale = await self._bound_write(kube, plan, patch)
        now = dig(scale, "spec", "replicas")
        where = f"{target.namespace}/{target.name}"
        return ToolResult(
            text=f"Scaled deployment {where} to {now} replicas ({plan.changes[0].render()}). "
            "Pods are added or removed in the background; describe_deployment shows progress.",
            summary=f"scaled {where} to {now} replicas",
        )


def _at(target: WriteTarget) -> tuple[str, ...]:
    """The (name, namespace) or (name,) positional arguments of the client's read call."""
    return (target.name, target.namespace) if target.namespace else (target.name,)


class RestartDeployment(_DeploymentWrite):
    tool_name = "restart_deployment"

    args_model = DeploymentTarget

    async def _prepare(self, args: DeploymentTarget, context: ToolContext) -> WritePlan:
        namespace, name = _namespace(args, context), args.name
        kube = self._kube(context)
        await self._require_access(
            kube, _Access("patch", "deployments", "apps", None, namespace, name)
        )
        deployment = await self._read_deployment(kube, namespace, name)
        target = _target("Deployment", deployment)
        notes = self._gitops(target, deployment)
        if dig(deployment, "spec", "paused"):
            raise ToolFailure(
                f"deployment {namespace}/{name} is paused; a restart would not roll out until "
                "it is resumed."
            )
        restarted_at = _now_rfc3339()
        after = await self._dry_run(
            kube,
            f"restart deployment {namespace}/{name}",
            kube.apps.patch_namespaced_deployment,
            name,
            namespace,
            self._body(_bound_metadata(target), restarted_at),
            _content_type=MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        changes = self._spec_changes(deployment, after, "the restart annotation is already set")
        replicas = dig(deployment, "spec", "replicas")
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=f"Restart deployment {namespace}/{name}: a rolling update replaces "
            f"its {_show(replicas)} pods with new ones (like kubectl rollout restart)",
            cluster=context.cluster,
            target=target,
            changes=changes,
            args={
                "namespace": namespace,
                "name": name,
                "restarted_at": restarted_at,
                "expect": _expect(deployment, GENERATION),
                FROM_REVISION: _revision(deployment),
            },
        )

    @staticmethod
    def _body(metadata: Obj, restarted_at: str) -> Obj:
        annotations = {RESTARTED_AT: restarted_at}
        return {
            "metadata": metadata,
            "spec": {"template": {"metadata": {"annotations": annotations}}},
        }

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target = plan.target
        kube = self._plan_kube(plan)
        stamp = str(plan.args["restarted_at"])
        await self._patch_deployment(
            kube, plan, self._body(_bound_metadata(target), stamp), MERGE_PATCH, "restart"
        )
        where = f"{target.namespace}/{target.name}"
        return ToolResult(
            text=f"Restarted deployment {where} ({RESTARTED_AT}={plan.args['restarted_at']}); "
            "the rolling update runs in the background; describe_deployment shows progress.",
            summary=f"restarted deployment {where}",
        )


class RollbackDeployment(_DeploymentWrite):
    tool_name = "rollback_deployment"

    args_model = RollbackArgs

    async def _prepare(self, args: RollbackArgs, context: ToolContext) -> WritePlan:
        namespace, name, wanted = _namespace(args, context), args.name, args.revision
        kube = self._kube(context)
        await self._require_access(
            kube, _Access("patch", "deployments", "apps", None, namespace, name)
        )
        deployment = await self._read_deployment(kube, namespace, name)
        target = _target("Deployment", deployment)
        notes = self._gitops(target, deployment)
        if dig(deployment, "spec", "paused"):
            raise ToolFailure(
                f"deployment {namespace}/{name} is paused; resume it before rolling back."
            )
        history = await self._history(kube, deployment)
        where = f"deployment {namespace}/{name}"
        current = _revision(deployment) or max(history, default=None)
        listed = ", ".join(f"{r} (current)" if r == current else str(r) for r in sorted(history))
        if wanted is None:
            earlier = [r for r in history if current is None or r < current]
            if not earlier:
                raise ToolArgumentError(
                    f"{where} has no earlier revision to roll back to "
                    f"(revisions: {listed or 'none'})."
                )
            wanted = max(earlier)
        elif wanted not in history:
            raise ToolArgumentError(
                f"{where} has no revision {wanted} (revisions: {listed or 'none'})."
            )
        if wanted == current:
            raise ToolArgumentError(
                f"revision {wanted} is the current revision of {where}; name an earlier one "
                f"(revisions: {listed})."
            )
        replicaset = history[wanted]
        template = _without_hash(dig(replicaset, "spec", "template") or {})
        current_template = dig(deployment, "spec", "template") or {}
        if template == current_template:
            raise ToolArgumentError(
                f"the pod template of revision {wanted} already matches {where}'s current "
                "template; nothing to roll back."
            )
        template_patch = _replace_patch(current_template, template)
        after = await self._dry_run(
            kube,
            f"roll back {where}",
            kube.apps.patch_namespaced_deployment,
            name,
            namespace,
            self._body(_bound_metadata(target), template_patch),
            _content_type=MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        all_changes = diff(deployment.get("spec"), after.get("spec"), "spec")
        if not all_changes:
            raise ToolArgumentError(
                f"nothing would change: {where} already runs revision {wanted}."
            )
        rs_name = dig(replicaset, "metadata", "name")
        from_text = f"revision {current}" if current is not None else "its current revision"
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=f"Roll back {where} from {from_text} to revision {wanted} "
            f"(the pod template of ReplicaSet {rs_name}, as kubectl rollout undo does); "
            f"this rolls out new pods{self._more(len(all_changes))}",
            cluster=context.cluster,
            target=target,
            changes=tuple(all_changes[:MAX_CHANGES]),
            args={
                "namespace": namespace,
                "name": name,
                "revision": wanted,
                "template": template_patch,
                "expect": _expect(deployment, GENERATION),
                FROM_REVISION: current,
            },
        )

    async def _history(self, kube: KubeClient, deployment: Obj) -> dict[int, Obj]:
        """The deployment's ReplicaSets (controller uid) by revision."""
        namespace = dig(deployment, "metadata", "namespace")
        uid = dig(deployment, "metadata", "uid")
        labels = dig(deployment, "spec", "selector", "matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
        listing = await kube.call_json(
            f"list the replicasets of deployment {namespace}/{dig(deployment, 'metadata', 'name')}",
            kube.apps.list_namespaced_replica_set,
            namespace,
            label_selector=selector,
        )
        history: dict[int, Obj] = {}
        for rs in dig(listing, "items") or []:
            revision = _revision(rs) if isinstance(rs, dict) else None
            if revision is not None and _owned_by(rs, str(uid)):
                history[revision] = rs
        return history

    @staticmethod
    def _body(metadata: Obj, template_patch: Any) -> Obj:
        return {"metadata": metadata, "spec": {"template": template_patch}}

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target = plan.target
        kube = self._plan_kube(plan)
        template = plan.args["template"]
        await self._patch_deployment(
            kube, plan, self._body(_bound_metadata(target), template), MERGE_PATCH, "roll back"
        )
        where = f"{target.namespace}/{target.name}"
        revision = plan.args["revision"]
        return ToolResult(
            text=f"Rolled back deployment {where} to the pod template of revision {revision} "
            f"({'; '.join(c.render() for c in plan.changes)}). The rollout runs in the "
            "background (it gets a new revision number); describe_deployment shows progress.",
            summary=f"rolled back {where} to revision {revision}",
        )


def _without_hash(template: Obj) -> Obj:
    """A ReplicaSet's pod template as the deployment would hold it (no pod-template-hash)."""
    copied = json.loads(json.dumps(template))
    labels = dig(copied, "metadata", "labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH, None)
    return dict(copied)


class SetContainerResources(_DeploymentWrite):
    tool_name = "set_container_resources"

    args_model = ResourcesArgs

    async def _prepare(self, args: ResourcesArgs, context: ToolContext) -> WritePlan:
        namespace, name, container = _namespace(args, context), args.name, args.container
        requests = args.requests.values() if args.requests else {}
        limits = args.limits.values() if args.limits else {}
        if not requests and not limits:
            raise ToolArgumentError(
                "give at least one value in requests or limits (cpu and/or memory)."
            )
        _check_order(requests, limits, "")
        kube = self._kube(context)
        await self._require_access(
            kube, _Access("patch", "deployments", "apps", None, namespace, name)
        )
        deployment = await self._read_deployment(kube, namespace, name)
        target = _target("Deployment", deployment)
        notes = self._gitops(target, deployment)
        where = f"deployment {namespace}/{name}"
        containers = dig(deployment, "spec", "template", "spec", "containers") or []
        found = next((c for c in containers if c.get("name") == container), None)
        if found is None:
            names = ", ".join(str(c.get("name")) for c in containers) or "none"
            raise ToolArgumentError(
                f"{where} has no container {container!r}; its containers: {names}."
            )
        existing = found.get("resources") or {}
        _check_order(
            {**(existing.get("requests") or {}), **requests},
            {**(existing.get("limits") or {}), **limits},
            " (together with the container's current values)",
        )
        body = self._body(_bound_metadata(target), container, requests, limits)
        after = await self._dry_run(
            kube,
            f"set resources of container {container} in {where}",
            kube.apps.patch_namespaced_deployment,
            name,
            namespace,
            body,
            _content_type=STRATEGIC_PATCH,
            field_manager=FIELD_MANAGER,
        )
        changes = self._spec_changes(
            deployment, after, f"container {container} already has these values"
        )
        values = [f"requests.{k}={v}" for k, v in requests.items()]
        values += [f"limits.{k}={v}" for k, v in limits.items()]
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=f"Set resources of container {container} in {where} "
            f"({', '.join(values)}); this rolls out new pods",
            cluster=context.cluster,
            target=target,
            changes=changes,
            args={
                "namespace": namespace,
                "name": name,
                "container": container,
                "requests": requests,
                "limits": limits,
                "expect": _expect(deployment, GENERATION),
                FROM_REVISION: _revision(deployment),
            },
        )

    @staticmethod
    def _body(
        metadata: Obj, container: str, requests: dict[str, str], limits: dict[str, str]
    ) -> Obj:
        resources: Obj = {}
        if requests:
            resources["requests"] = dict(requests)
        if limits:
            resources["limits"] = dict(limits)
        # Strategic merge: the containers list merges by name, so only this one changes.
        return {
            "metadata": metadata,
            "spec": {
                "template": {"spec": {"containers": [{"name": container, "resources": resources}]}}
            },
        }

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target = plan.target
        kube = self._plan_kube(plan)
        container = str(plan.args["container"])
        requests, limits = dict(plan.args["requests"]), dict(plan.args["limits"])
        await self._patch_deployment(
            kube,
            plan,
            self._body(_bound_metadata(target), container, requests, limits),
            STRATEGIC_PATCH,
            "set resources of",
        )
        where = f"{target.namespace}/{target.name}"
        return ToolResult(
            text=f"Set resources of container {container} in deployment {where} "
            f"({'; '.join(c.render() for c in plan.changes)}). New pods roll out in the "
            "background; describe_deployment shows progress.",
            summary=f"set resources of {container} in {where}",
        )


def _check_order(requests: dict[str, Any], limits: dict[str, Any], context: str) -> None:
    """Kubernetes rejects a request above its limit; say so before asking anyone."""
    for resource in RESOURCE_NAMES:
        low, high = requests.get(resource), limits.get(resource)
        if low is None or high is None:
            continue
        low_amount, high_amount = _quantity(str(low)), _quantity(str(high))
        if low_amount is not None and high_amount is not None and low_amount > high_amount:
            raise ToolArgumentError(
                f"requests.{resource} {low} would be above limits.{resource} {high}{context}; "
                "a request may not exceed its limit."
            )


# --- pods -------------------------------------------------------------------------------


class DeletePod(_WriteOperation):
    tool_name = "delete_pod"

    args_model = PodTarget

    async def _prepare(self, args: PodTarget, context: ToolContext) -> WritePlan:
        namespace, name, grace = _namespace(args, context), args.name, args.grace_period_seconds
        kube = self._kube(context)
        await self._require_access(kube, _Access("delete", "pods", "", None, namespace, name))
        pod = await kube.call_json(
            f"read pod {namespace}/{name}", kube.core.read_namespaced_pod, name, namespace
        )
        target = _target("Pod", pod)
        notes = self._gitops(target, pod)
        if dig(pod, "metadata", "deletionTimestamp"):
            raise ToolArgumentError(
                f"pod {namespace}/{name} is already being deleted (Terminating)."
            )
        # A DELETE's options come from its body, and the API server then ignores the query
        # string: `?dryRun=All` beside a DeleteOptions body is a real delete.
        answer = await self._dry_run_in_body(
            kube,
            f"delete pod {namespace}/{name}",
            kube.core.delete_namespaced_pod,
            name,
            namespace,
            body=self._body(target.uid, grace) | {"dryRun": ["All"]},
        )
        effective = dig(answer, "metadata", "deletionGracePeriodSeconds")
        if effective is None:
            effective = grace
        if effective is None:
            effective = dig(pod, "spec", "terminationGracePeriodSeconds")
        effective = 30 if effective is None else effective
        controllers = [
            {"kind": ref.get("kind"), "name": ref.get("name"), "uid": ref.get("uid")}
            for ref in dig(pod, "metadata", "ownerReferences") or []
            if isinstance(ref, dict) and ref.get("controller")
        ]
        owners = [f"{ref['kind']} {ref['name']}" for ref in controllers]
        if owners:
            aftermath = f"its controller ({owners[0]}) will create a replacement"
        else:
            aftermath = "no controller owns it, so nothing will replace it"
        how = f"grace period {effective} s"
        if effective == 0:
            how = "grace period 0 s: removed at once, without waiting for its containers to stop"
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=f"Delete pod {namespace}/{name} ({how}); {aftermath}",
            cluster=context.cluster,
            target=target,
            changes=(
                FieldChange(
                    "metadata",
                    f"pod {pod_phase(pod)} on {dig(pod, 'spec', 'nodeName') or 'no node'}",
                    f"pod deleted (grace {effective} s)",
                ),
            ),
            # A pod is bound by its uid alone: its status changes all the time, and what
            # the preview showed (phase, node) is not what a person approves a delete for.
            args={
                "namespace": namespace,
                "name": name,
                "grace_period_seconds": grace,
                "expect": [],
                # Whose pods the verification watch follows once this one is gone.
                **({"owner": controllers[0]} if controllers else {}),
            },
        )

    @staticmethod
    def _body(uid: str, grace: int | None) -> Obj:
        body: Obj = {"preconditions": {"uid": uid}}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        return body

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target = plan.target
        kube = self._plan_kube(plan)
        grace = plan.args.get("grace_period_seconds")
        body = self._body(target.uid, None if grace is None else int(grace))

        async def delete() -> Any:
            return await kube.call_json(
                f"delete {_noun(target)}",
                kube.core.delete_namespaced_pod,
                target.name,
                target.namespace,
                body=body,
            )

        await self._bound_write(kube, plan, delete)
        where = f"{target.namespace}/{target.name}"
        return ToolResult(
            text=f"Deleted pod {where} ({plan.changes[0].after}). {plan.description}.",
            summary=f"deleted pod {where}",
        )


# --- nodes ------------------------------------------------------------------------------


class _NodeSchedulability(_WriteOperation):
    """cordon_node (unschedulable true) and uncordon_node (false)."""

    def __init__(
        self,
        clients: KubeClients,
        *,
        unschedulable: bool,
        gitops: GitOpsPolicy = GitOpsPolicy.REFUSE,
    ) -> None:
        super().__init__(clients, gitops=gitops)
        self.unschedulable = unschedulable
        self.tool_name = "cordon_node" if unschedulable else "uncordon_node"
        self._verb = "cordon" if unschedulable else "uncordon"

    args_model = NodeTarget

    async def _prepare(self, args: NodeTarget, context: ToolContext) -> WritePlan:
        name = args.name
        kube = self._kube(context)
        await self._require_access(kube, _Access("patch", "nodes", "", None, None, name))
        node = await kube.call_json(f"read node {name}", kube.core.read_node, name)
        target = _target("Node", node)
        notes = self._gitops(target, node)
        if bool(dig(node, "spec", "unschedulable")) == self.unschedulable:
            state = "cordoned" if self.unschedulable else "schedulable (not cordoned)"
            raise ToolArgumentError(f"node {name} is already {state}; nothing to change.")
        after = await self._dry_run(
            kube,
            f"{self._verb} node {name}",
            kube.core.patch_node,
            name,
            self._body(_bound_metadata(target)),
            _content_type=MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        before_value = bool(dig(node, "spec", "unschedulable"))
        after_value = bool(dig(after, "spec", "unschedulable"))
        if before_value == after_value:
            raise ToolArgumentError(f"nothing would change on node {name}.")
        if self.unschedulable:
            description = (
                f"Cordon node {name}: mark it unschedulable, so no new pods are scheduled "
                "there; pods already running on it stay"
            )
        else:
            description = f"Uncordon node {name}: let new pods be scheduled on it again"
        return WritePlan(
            tool=self.tool_name,
            notes=notes,
            description=description,
            cluster=context.cluster,
            target=target,
            changes=(FieldChange("spec.unschedulable", _show(before_value), _show(after_value)),),
            # Nodes have no generation; heartbeats rewrite status, only this field matters.
            args={"name": name, "expect": [[["spec", "unschedulable"], before_value]]},
        )

    def _body(self, metadata: Obj) -> Obj:
        return {"metadata": metadata, "spec": {"unschedulable": self.unschedulable}}

    async def _execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        target = plan.target
        kube = self._plan_kube(plan)

        async def patch() -> Any:
            return await kube.call_json(
                f"{self._verb} node {target.name}",
                kube.core.patch_node,
                target.name,
                self._body(_bound_metadata(target)),
                _content_type=MERGE_PATCH,
                field_manager=FIELD_MANAGER,
            )

        await self._bound_write(kube, plan, patch)
        done = f"{self._verb}ed node {target.name}"
        return ToolResult(
            text=f"{done[0].upper()}{done[1:]} ({plan.changes[0].render()}).", summary=done
        )


# --- the tools ---------------------------------------------------------------------------


def write_tools(
    clients: KubeClients,
    *,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    gitops: GitOpsPolicy = GitOpsPolicy.REFUSE,
) -> list[Tool]:
    """The write tools, bound to `clients` (each plan names the cluster it was prepared on);
    `gitops` is what a write to an object Argo CD or Flux manages gets.

    Only the approval flow runs them, through `tool.write`.
    """
    if max_replicas < 0:
        raise ValueError("max_replicas must be 0 or more")
    approval = " A person must approve the change on a card before it is made."
    return [
        declare_write(
            "scale_deployment",
            f"Set a deployment's number of replicas (0 to {max_replicas}).{approval}",
            ScaleDeployment(clients, max_replicas=max_replicas, gitops=gitops),
            kinds=("Deployment",),
        ),
        declare_write(
            "restart_deployment",
            "Restart a deployment's pods with a rolling update, as `kubectl rollout restart` "
            f"does (sets the kubectl.kubernetes.io/restartedAt pod template annotation).{approval}",
            RestartDeployment(clients, gitops=gitops),
            kinds=("Deployment",),
        ),
        declare_write(
            "rollback_deployment",
            "Roll a deployment back to the pod template of an earlier revision (its "
            "ReplicaSets), as `kubectl rollout undo` does: the previous revision, or the one "
            f"named.{approval}",
            RollbackDeployment(clients, gitops=gitops),
            kinds=("Deployment", "ReplicaSet"),
        ),
        declare_write(
            "delete_pod",
            "Delete one pod (its controller, if any, creates a replacement), e.g. to clear a "
            f"stuck or crash-looping instance.{approval}",
            DeletePod(clients, gitops=gitops),
            kinds=("Pod",),
        ),
        declare_write(
            "cordon_node",
            "Cordon a node: mark it unschedulable so no new pods are placed on it (running "
            f"pods stay; nothing is drained).{approval}",
            _NodeSchedulability(clients, unschedulable=True, gitops=gitops),
            scope=ToolScope.CLUSTER,
            kinds=("Node",),
        ),
        declare_write(
            "uncordon_node",
            f"Uncordon a node: let new pods be scheduled on it again.{approval}",
            _NodeSchedulability(clients, unschedulable=False, gitops=gitops),
            scope=ToolScope.CLUSTER,
            kinds=("Node",),
        ),
        declare_write(
            "set_container_resources",
            "Set the CPU/memory requests and/or limits of one container of a deployment "
            "(changes the pod template, so new pods roll out). Values are Kubernetes "
            f'quantities such as "250m", "2", "512Mi", "1Gi".{approval}',
            SetContainerResources(clients, gitops=gitops),
            kinds=("Deployment",),
        ),
    ]
