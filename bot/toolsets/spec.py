"""What a tool is: its kind, its JSON schema for the model, its handler and its result.

This module owns the typed vocabulary every tool shares. It knows no Kubernetes and no
Slack; the handlers live in `bot/toolsets/kube/` and are registered by the composition root.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from bot.errors import KelpieError
from bot.values import Picture, WritePlan

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
    # Queries over many namespaces (PromQL, LogQL, alerts) that the tool itself limits to
    # the context's reach and the firewall's denied namespaces, inside the query: the
    # pipeline's one-namespace checks do not apply to them.
    QUERY = "query"


class ToolArgumentError(KelpieError, ValueError):
    """Arguments the model can correct; the message is one sentence sent back to it."""


class ToolFailure(KelpieError):
    """A call that reached the cluster and failed (404, 403, timeout, unreachable).

    The message is one sentence for the model, e.g.
    "Kubernetes answered 403 Forbidden to list pods in namespace shop."
    """

    # Who the cluster saw make the call (set by the Kubernetes tools), for the audit.
    acting_as: str | None = None


class TargetRefused(ToolFailure):
    """The pipeline refused what a call resolved to touch (a kind found by discovery, its
    real scope): nothing was requested. `stage` and `reason` say who refused and why."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"Denied by {stage}: {reason}.")
        self.stage, self.reason = stage, reason


class TargetGate(Protocol):
    """The pipeline's role and firewall checks, asked again once a tool knows what it will
    touch: a generic tool learns its kind's group and scope only from discovery."""

    async def admit(self, kind: str, namespace: str | None) -> None:
        """Return when the call may touch `kind` objects (`Kind` or `Kind.group`) in
        `namespace` ("" cluster-scoped, None all namespaces); raise TargetRefused if not."""
        ...


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
class Reach:
    """The namespaces a channel's role may read (globs, "*" for all) and whether it may
    read series without a namespace (nodes, cluster totals). The default reaches nothing:
    a context made without a role (tests, the CLI) must not read every namespace's metrics."""

    namespaces: tuple[str, ...] = ()
    cluster_metrics: bool = False


@dataclass(frozen=True)
class ToolContext:
    """Where the question was asked: which cluster, which default namespace, and which
    Kubernetes identity the channel's role acts as (None: kelpie's own)."""

    cluster: str
    default_namespace: str | None = None
    identity: KubeIdentity | None = None
    # The role's namespaces, for the tools that scope queries themselves (observability).
    reach: Reach = Reach()
    # The Slack user who asked, where a write must name them (a silence's comment).
    requester: str | None = None
    # The approval an approved write runs for, where what it makes carries its id (a
    # silence's comment), so a restart can find it again; None outside an approved write.
    approval_id: str | None = None
    # The running turn's background investigations; None where they are not available
    # (e.g. inside a background investigation).
    background: BackgroundPort | None = field(default=None, compare=False, repr=False)
    # The pipeline's checks for a target resolved at run time; None outside the pipeline.
    gate: TargetGate | None = field(default=None, compare=False, repr=False)
    # The runbook ids (fnmatch patterns) the role may see; none without a role.
    runbooks: tuple[str, ...] = ()

    async def admit(self, kind: str, namespace: str | None) -> None:
        """Ask the pipeline (when there is one) whether this target may be touched."""
        if self.gate is not None:
            await self.gate.admit(kind, namespace)


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
    # What exactly was asked of which backend (a scoped query, its window, the instance),
    # recorded in the turn's evidence ledger beside the reference.
    evidence: str | None = None
    # An image for the thread (present tools): uploaded as a file with its caption.
    picture: Picture | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


class ToolSource(Protocol):
    """Tools that come and go while kelpie runs (an MCP server's): the registry asks for
    the current list each time."""

    def tools(self) -> list[Tool]: ...


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
    parameters: dict[str, Any]  # JSON schema of the arguments object (`declare.schema_of`)
    handler: ToolHandler
    scope: ToolScope = ToolScope.NAMESPACED
    # Kubernetes kinds the tool touches, for the firewall (e.g. ["Pod"]).
    resource_kinds: tuple[str, ...] = field(default_factory=tuple)
    # Write tools only: the approval flow calls prepare/execute; `handler` is never run.
    write: WriteOperation | None = None
    # Where a call lands when the arguments alone do not say it the usual way (a generic
    # tool whose kind may be cluster-scoped); None: `namespace` or the channel's default.
    target: Callable[[dict[str, Any], ToolContext], str | None] | None = None
    # The name roles match when it is not `<kind>/<name>`: an MCP server's tool is
    # `mcp/<server>/<tool>` whatever its kind (`bot/toolsets/mcp/`).
    pattern: str | None = None

    @property
    def pattern_name(self) -> str:
        """The name roles match against: `<kind>/<name>` (or the tool's own `pattern`)."""
        return self.pattern or f"{self.kind}/{self.name}"

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def target_namespace(self, args: dict[str, Any], context: ToolContext) -> str | None:
        """The namespace a call lands in: "" for cluster-scoped, None for all namespaces."""
        if self.scope is ToolScope.CLUSTER:
            return ""
        if self.target is not None:
            return self.target(args, context)
        namespace = args.get("namespace")
        if namespace == "*":
            return None
        if isinstance(namespace, str) and namespace:
            return namespace
        return context.default_namespace
