"""The role gate and the firewall, asked again about what a call resolved to touch.

A generic tool (list_resources, get_resource) learns its kind's group and whether it is
namespaced only from discovery, after the checks ran on its arguments. Before it sends the
request it asks its context's gate (`ToolContext.admit`); the gate runs the same check
stages on the call as it will really land: the resolved kind (`Kind.group`) as the kind it
touches, and its real scope ("" for cluster-scoped kinds). So a role confined to one
namespace cannot reach cluster-scoped objects through a generic call, and
`deny_kinds: [Gadget.example.com]` holds however the model spelt the kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from bot.pipeline.decision import Stage, ToolInvocation
from bot.toolsets.spec import TargetRefused, ToolScope
from bot.values import Verdict


class ResolvedTargets:
    """Binds a call to the check stages that judge its resolved target."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self._stages = list(stages)

    def bind(self, call: ToolInvocation) -> _Gate:
        return _Gate(call, tuple(self._stages))


@dataclass(frozen=True)
class _Gate:
    call: ToolInvocation
    stages: tuple[Stage, ...]

    async def admit(self, kind: str, namespace: str | None) -> None:
        resolved = self._as_resolved(kind, namespace)
        for stage in self.stages:
            decision = await stage.check(resolved)
            if decision.verdict is Verdict.DENY:
                raise TargetRefused(stage.name, decision.reason or "not allowed")

    def _as_resolved(self, kind: str, namespace: str | None) -> ToolInvocation:
        scope = ToolScope.CLUSTER if namespace == "" else ToolScope.NAMESPACED
        tool = replace(self.call.tool, scope=scope, resource_kinds=(kind,), target=None)
        where = "*" if namespace is None else namespace
        return replace(self.call, tool=tool, args={**self.call.args, "namespace": where})
