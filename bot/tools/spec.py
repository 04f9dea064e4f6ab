"""What a tool is: its kind, its JSON schema for the model, its handler and its result.

This module owns the typed vocabulary every tool shares. It knows no Kubernetes and no
Slack; the handlers live in `bot/tools/kube/` and are registered by the composition root.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from bot.values import WritePlan

REASON_ARG = "reason"


class ToolKind(StrEnum):
    PRESENT = "present"
    READ = "read"
    DIAGNOSE = "diagnose"
    WRITE = "write"


class ToolScope(StrEnum):
    """Where a call lands: in one namespace, or on cluster-scoped objects (namespace "")."""

    NAMESPACED = "namespaced"
    CLUSTER = "cluster"


class ToolArgumentError(ValueError):
    """Arguments the model can correct; the message is one sentence sent back to it."""


class ToolFailure(Exception):
    """A call that reached the cluster and failed (404, 403, timeout, unreachable).

    The message is one sentence for the model, e.g.
    "Kubernetes answered 403 Forbidden to list pods in namespace shop."
    """

    # Who the cluster saw make the call (set by the Kubernetes tools), for the audit.
    acting_as: str | None = None


class BackgroundPort(Protocol):
    """Starts a background investigation for the running turn (see `spawn_investigation`)."""

    def spawn(self, label: str, question: str, namespace: str | None) -> str:
        """Start it and return its id; raises ToolFailure when no more may start."""
        ...


@dataclass(frozen=True)
class KubeIdentity:
    """Who the Kubernetes API is asked to act as (Impersonate-User / Impersonate-Group)."""

    user: str
    groups: tuple[str, ...] = ()

    def __str__(self) -> str:
        groups = f" (groups {', '.join(self.groups)})" if self.groups else ""
        return f"Kubernetes user {self.user}{groups}"


def bind_identity(plan: WritePlan, who: KubeIdentity) -> WritePlan:
    """The plan made as `who`: the approved write acts as that identity, not as whatever
    the configuration says when it runs (the click checks that the two still agree)."""
    bound = {"user": who.user, "groups": list(who.groups)}
    return replace(
        plan, description=f"{plan.description} (as {who})", args=plan.args | {"as": bound}
    )


def bound_identity(plan: WritePlan) -> KubeIdentity | None:
    """The identity the plan was made as (None: kelpie's own)."""
    bound = plan.args.get("as")
    if not isinstance(bound, dict):
        return None
    return KubeIdentity(str(bound["user"]), tuple(str(g) for g in bound.get("groups") or []))


@dataclass(frozen=True)
class ToolContext:
    """Where the question was asked: which cluster, which default namespace, and which
    Kubernetes identity the channel's role acts as (None: kelpie's own)."""

    cluster: str
    default_namespace: str | None = None
    identity: KubeIdentity | None = None
    # The running turn's background investigations; None where they are not available
    # (e.g. inside a background investigation).
    background: BackgroundPort | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ToolResult:
    """A successful result: `text` goes to the model, `summary` is one line for the thread."""

    text: str
    summary: str
    # Raw output a person may want as a file (e.g. full logs); None when not applicable.
    attachment: str | None = None
    # A yield signal: when this is the only call of its round, the turn ends right after it
    # with a fixed confirmation instead of another model round (direct presentation).
    end_turn: bool = False
    # Who the cluster saw make the calls (set by the Kubernetes tools), for the audit.
    acting_as: str | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


class WriteConflict(ToolFailure):
    """The target changed or was replaced since the preview: nothing was executed."""


class WriteOperation(Protocol):
    """A write tool's two halves. Nothing changes in `prepare`; `execute` runs only after a
    person approved, bound to the previewed object (its uid, and what the preview rested on)."""

    async def prepare(self, args: dict[str, Any], context: ToolContext) -> WritePlan:
        """Validate, check our own RBAC (SelfSubjectAccessReview), read the target, dry-run.

        Raises ToolArgumentError for bad arguments, ToolFailure when it cannot be done.
        """
        ...

    async def execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        """Perform the change; raises WriteConflict when the target changed since `prepare`."""
        ...


@dataclass(frozen=True)
class Tool:
    name: str
    kind: ToolKind
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    handler: ToolHandler
    scope: ToolScope = ToolScope.NAMESPACED
    # Kubernetes kinds the tool touches, for the firewall (e.g. ["Pod"]).
    resource_kinds: tuple[str, ...] = field(default_factory=tuple)
    # Write tools only: the approval flow calls prepare/execute; `handler` is never run.
    write: WriteOperation | None = None

    @property
    def pattern_name(self) -> str:
        """The name roles match against: `<kind>/<name>`."""
        return f"{self.kind}/{self.name}"

    def openai_schema(self) -> dict[str, Any]:
        parameters = self.parameters
        if self.kind is ToolKind.WRITE:
            # The approval card shows the model's stated reason next to the preview.
            parameters = {
                **parameters,
                "properties": {
                    **parameters.get("properties", {}),
                    REASON_ARG: {
                        "type": "string",
                        "description": "One sentence for the approver: why this change.",
                    },
                },
                "required": [*parameters.get("required", []), REASON_ARG],
            }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def target_namespace(self, args: dict[str, Any], context: ToolContext) -> str | None:
        """The namespace a call lands in: "" for cluster-scoped, None for all namespaces."""
        if self.scope is ToolScope.CLUSTER:
            return ""
        namespace = args.get("namespace")
        if namespace == "*":
            return None
        if isinstance(namespace, str) and namespace:
            return namespace
        return context.default_namespace


# Kubernetes object names: RFC 1123 labels/subdomains.
# Matched whole (fullmatch): `$` would also accept a trailing newline.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def namespace_arg(args: dict[str, Any], context: ToolContext, *, allow_all: bool) -> str | None:
    """Validate the `namespace` argument; None means all namespaces (only when allowed)."""
    value = args.get("namespace")
    if value is None or value == "":
        value = context.default_namespace
    if value is None or value == "*":
        if allow_all:
            return None
        raise ToolArgumentError("namespace is required (no default namespace is set here).")
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        raise ToolArgumentError(f"namespace {value!r} is not a valid Kubernetes namespace name.")
    return value


def name_arg(args: dict[str, Any], key: str = "name", *, required: bool = True) -> str | None:
    value = args.get(key)
    if value is None or value == "":
        if required:
            raise ToolArgumentError(f"{key} is required.")
        return None
    if not isinstance(value, str) or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ToolArgumentError(f"{key} {value!r} is not a valid Kubernetes object name.")
    return value


def int_arg(
    args: dict[str, Any], key: str, *, default: int | None, minimum: int, maximum: int
) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolArgumentError(f"{key} must be an integer between {minimum} and {maximum}.")
    if not minimum <= value <= maximum:
        raise ToolArgumentError(f"{key} must be between {minimum} and {maximum}, got {value}.")
    return value


def bool_arg(args: dict[str, Any], key: str, *, default: bool) -> bool:
    value = args.get(key, default)
    if not isinstance(value, bool):
        raise ToolArgumentError(f"{key} must be true or false.")
    return value


def str_arg(args: dict[str, Any], key: str, *, max_len: int = 512) -> str | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise ToolArgumentError(f"{key} must be a string of at most {max_len} characters.")
    return value


def only_args(args: Any, allowed: Iterable[str]) -> dict[str, Any]:
    """Reject non-objects and unknown argument names (the schema says additionalProperties)."""
    if not isinstance(args, dict):
        raise ToolArgumentError("arguments must be a JSON object.")
    allowed_set = set(allowed)
    unknown = sorted(set(args) - allowed_set)
    if unknown:
        known = ", ".join(sorted(allowed_set)) or "none"
        raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}; known: {known}.")
    return args
