"""A card is a request, not a capability: at the click the proposed call is rebuilt under
the *current* configuration (the channel's binding: role, cluster, offered tools), so the
pipeline as wired now (role, PreToolUse hooks, firewall, …) judges it again; and the clicker
is checked against the current approvers and the four-eyes rule, with every requester of
the card counted as the one who asked."""

from __future__ import annotations

import asyncio
from typing import Protocol

from bot.config import ApprovalConfig
from bot.pipeline.decision import CallScope, ToolInvocation
from bot.pipeline.harness import ToolRegistry
from bot.pipeline.roles import ChannelBinding, offered_tools
from bot.toolsets.spec import REASON_ARG, KubeIdentity, bound_identity
from bot.values import Approval, SessionInfo


def identity_changed(proposed: KubeIdentity | None, now: KubeIdentity | None) -> str:
    """Why a card proposed as one Kubernetes identity does not run as another."""
    return (
        f"this channel's role now acts as {_who(now)}, not as {_who(proposed)} as when the "
        "change was proposed; ask again for a card under the new identity"
    )


def _who(identity: KubeIdentity | None) -> str:
    return str(identity) if identity is not None else "kelpie's own Kubernetes identity"


class Bindings(Protocol):
    """The channel's binding under the configuration running now (`external`: for
    someone from another organisation, as their message is admitted); None: not enabled
    (for them)."""

    async def current(
        self, session: SessionInfo, *, external: bool = False
    ) -> ChannelBinding | None: ...


class TurnBindings(Protocol):
    """What a turn runs under now: what it was admitted under (its asker a guest or not),
    never more than the configuration running now gives; None: nothing of it is granted
    as such any more (another cluster, another Kubernetes identity, not enabled)."""

    async def turn_binding(self, session: SessionInfo, turn_id: str) -> ChannelBinding | None: ...


class Approvers(Protocol):
    async def is_approver(self, user: str, approval: ApprovalConfig) -> bool: ...

    def describe(self, approval: ApprovalConfig) -> str:
        """Who may approve, in one phrase."""
        ...


class Sessions(Protocol):
    async def get(self, session_id: int) -> SessionInfo | None: ...


class CurrentPolicy:
    """Implements the approval flow's `CallCheck` port."""

    def __init__(
        self,
        registry: ToolRegistry,
        sessions: Sessions,
        bindings: Bindings,
        approvers: Approvers,
        *,
        self_approval: bool = False,
        turns: TurnBindings | None = None,
    ) -> None:
        # `kelpie chat --self-approve`: the operator lifts four eyes for their own changes,
        # explicitly; the terminal records each such decision under a name that says so.
        self._self_approval = self_approval
        self._registry = registry
        self._sessions = sessions
        self._bindings = bindings
        self._approvers = approvers
        self._turns = turns

    async def _binding(self, approval: Approval) -> tuple[SessionInfo, ChannelBinding] | None:
        session = await self._sessions.get(approval.session_id)
        if session is None:
            return None
        binding = await self._bindings.current(session)
        return (session, binding) if binding is not None else None

    async def invocation(self, approval: Approval) -> ToolInvocation | str:
        found = await self._binding(approval)
        if found is None:
            return "kelpie is no longer enabled in this channel"
        session, binding = found
        plan = approval.plan
        if binding.cluster != plan.cluster:
            return f"this channel now works on cluster {binding.cluster}, not {plan.cluster}"
        tool = self._registry.get(plan.tool)
        if tool is None or tool.write is None:
            return f"{plan.tool} is no longer an available write tool"
        # The write would act as the identity bound in its plan: only while the channel's
        # role still acts as that one is the card what the configuration allows now.
        acting_as, bound = binding.tool_context().identity, bound_identity(plan)
        if acting_as != bound:
            return identity_changed(bound, acting_as)
        asked_under = await self._asked_under(session, approval, binding)
        if asked_under is None:
            return "the role this change was asked under is no longer granted in this channel"
        binding = asked_under
        offered = offered_tools(binding.role, self._registry.all())
        scope = CallScope(
            session_id=session.id,
            session_key=session.session_key,
            channel_id=session.channel_id,
            slack_user=approval.requested_by,
            role_name=binding.role_name,
            role=binding.role,
            tool_context=binding.tool_context(),
            offered=frozenset(offered_tool.name for offered_tool in offered),
            abort=asyncio.Event(),
            turn_id=approval.turn_id,
        )
        args = {**plan.args, REASON_ARG: approval.reason} if approval.reason else dict(plan.args)
        return ToolInvocation(approval.tool_call_id, tool, args, scope)

    async def _asked_under(
        self, session: SessionInfo, approval: Approval, channel: ChannelBinding
    ) -> ChannelBinding | None:
        """The channel's binding, no wider than what the turn that proposed the change was
        admitted under (a Slack Connect guest's card runs under the guests' role)."""
        if self._turns is None:
            return channel
        return await self._turns.turn_binding(session, approval.turn_id)

    async def may_decide(self, approval: Approval, user: str) -> str | None:
        found = await self._binding(approval)
        if found is None:
            return "kelpie is no longer enabled in this channel, so nobody can decide this change."
        settings = found[1].role.approval
        who = self._approvers.describe(settings)
        four_eyes = not (settings.allow_requester or self._self_approval)
        if user in approval.requesters and four_eyes:
            return (
                "You asked for this change (or wrote in this thread before it was proposed), "
                f"so someone else has to decide it. Who can: {who}."
            )
        if not await self._approvers.is_approver(user, settings):
            return f"You may not decide this change. Who can: {who}."
        return None

    async def may_withdraw(self, approval: Approval, user: str) -> bool:
        found = await self._binding(approval)
        return found is not None and await self._approvers.is_approver(user, found[1].role.approval)
