"""The security pipeline in front of every tool call, in the design brief's order.

abort → provider-native skip → channel role → PreToolUse hooks → firewall → guardian →
permission (approval) → [execute with timeout, in the harness] → PostToolUse hooks.

Stages run in list order; the first decision that is not "allow" stops the call, so a call
denied at stage N never reaches stage N+1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.policy.decision import Stage, ToolInvocation
from bot.policy.roles import namespace_allowed, tool_allowed
from bot.tools.spec import ToolKind
from bot.values import Decision, StageDecision, ToolOutcome, Verdict


class AbortStage:
    name = "abort"

    async def check(self, call: ToolInvocation) -> Decision:
        if call.scope.abort.is_set():
            return Decision.deny("the turn was interrupted")
        return Decision.allow()


class ProviderNativeStage:
    """Tools the provider runs itself are not run locally. None exist today: a pass-through
    kept so the order stays the brief's when one is added."""

    name = "provider-native"

    async def check(self, call: ToolInvocation) -> Decision:
        return Decision.allow()


class RoleGateStage:
    name = "channel role"

    async def check(self, call: ToolInvocation) -> Decision:
        scope = call.scope
        tool = call.tool
        if tool.name not in scope.offered or not tool_allowed(scope.role, tool):
            return Decision.deny(f"channel role {scope.role_name} may not run {tool.pattern_name}")
        namespace = call.namespace
        if not namespace_allowed(scope.role, namespace):
            where = (
                "all namespaces"
                if namespace is None
                else "cluster-scoped objects"
                if namespace == ""
                else f"namespace {namespace}"
            )
            allowed = ", ".join(scope.role.namespaces) or "none"
            return Decision.deny(
                f"channel role {scope.role_name} may not touch {where} (allowed: {allowed})"
            )
        return Decision.allow()


class PermissionStage:
    """Writes need a person's approval: the harness hands them to the approval port."""

    name = "permission"

    async def check(self, call: ToolInvocation) -> Decision:
        if call.tool.kind is ToolKind.WRITE:
            return Decision.needs_approval("a write needs a person's approval")
        return Decision.allow()


class PostHook(Protocol):
    async def fire(self, call: ToolInvocation, outcome: ToolOutcome) -> None: ...


class Pipeline:
    def __init__(self, stages: Sequence[Stage], post_hooks: Sequence[PostHook] = ()) -> None:
        self.stages = list(stages)
        self._post_hooks = list(post_hooks)

    async def decide(self, call: ToolInvocation) -> list[StageDecision]:
        """Each stage's decision in order, up to and including the first that is not allow."""
        trail: list[StageDecision] = []
        for stage in self.stages:
            decision = await stage.check(call)
            trail.append(StageDecision(stage.name, decision))
            if decision.verdict is not Verdict.ALLOW:
                break
        return trail

    async def after(self, call: ToolInvocation, outcome: ToolOutcome) -> None:
        for hook in self._post_hooks:
            await hook.fire(call, outcome)
