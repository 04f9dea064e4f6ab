"""Channel → role binding, and what a role allows (tool patterns and namespace globs)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from bot.config import (
    MCP_PATTERN_KIND,
    NO_ROLE,
    ApprovalConfig,
    Approvers,
    Config,
    RoleConfig,
    RoleObservability,
)
from bot.toolsets.spec import KubeIdentity, Reach, Tool, ToolContext


@dataclass(frozen=True)
class ChannelBinding:
    """What a channel may do: its role, which cluster it talks to, its default namespace."""

    role_name: str
    role: RoleConfig
    cluster: str
    namespace: str | None

    def tool_context(self) -> ToolContext:
        """Where this channel's calls go, and the Kubernetes identity its role acts as
        (None: kelpie's own) — the same for a running turn and for an approved write."""
        chosen = self.role.kubernetes.impersonate
        identity = KubeIdentity(chosen.user, tuple(chosen.groups)) if chosen else None
        reach = Reach(tuple(self.role.namespaces), self.role.observability.cluster_metrics)
        return ToolContext(
            self.cluster, self.namespace, identity, reach, runbooks=tuple(self.role.runbooks)
        )


class ChannelRoles:
    def __init__(self, config: Config) -> None:
        self._config = config

    def bind(self, channel_id: str, channel_name: str | None, is_im: bool) -> ChannelBinding | None:
        """First matching channel entry wins; unmatched channels get `default_role`.

        None means kelpie is not enabled in this channel.
        """
        for entry in self._config.channels:
            match = entry.match
            matched = (
                (match.id is not None and match.id == channel_id)
                or (match.im is not None and match.im == is_im)
                or (
                    match.name is not None
                    and channel_name is not None
                    and fnmatchcase(channel_name, match.name)
                )
            )
            if matched:
                return self._binding(entry.role, entry.cluster, entry.namespace)
        return self._binding(self._config.default_role, None, None)

    def needs_name(self, channel_id: str, is_im: bool) -> bool:
        """Whether the channel's name could change what `bind` answers: False when an entry
        matching by id or im comes first (or no entry matches by name), so a caller may
        bind without asking Slack for the name."""
        for entry in self._config.channels:
            match = entry.match
            if (match.id is not None and match.id == channel_id) or (
                match.im is not None and match.im == is_im
            ):
                return False
            if match.name is not None:
                return True
        return False

    def for_external_user(self, binding: ChannelBinding) -> ChannelBinding | None:
        """The binding for someone from another organisation (Slack Connect): the channel's
        cluster and namespace, `slack.external_users_role`'s tools. None: not for them."""
        return self._binding(
            self._config.slack.external_users_role, binding.cluster, binding.namespace
        )

    def _binding(
        self, role_name: str, cluster: str | None, namespace: str | None
    ) -> ChannelBinding | None:
        if role_name == NO_ROLE:
            return None
        return ChannelBinding(
            role_name=role_name,
            role=self._config.roles[role_name],
            cluster=cluster or self._config.kubernetes.default_cluster,
            namespace=namespace,
        )


def narrower(
    admitted: ChannelBinding, now: ChannelBinding, tools: list[Tool]
) -> ChannelBinding | None:
    """What a turn admitted under `admitted` runs under now that the configuration gives
    `now`: never more than either. The configuration gives less now: less; more: still the
    admitted binding; neither within the other: what both allow, under the current role's
    name. None when the channel now works on another cluster or acts as another Kubernetes
    identity (nothing the turn was admitted for is granted as such any more)."""
    if admitted.cluster != now.cluster:
        return None
    namespace = _narrower_namespace(admitted.namespace, now.namespace)
    if role_within(now.role, admitted.role, tools):
        return replace(now, namespace=namespace)
    if role_within(admitted.role, now.role, tools):
        return replace(admitted, namespace=namespace)
    both = common_role(admitted.role, now.role, tools)
    return replace(now, role=both, namespace=namespace) if both is not None else None


def role_within(inner: RoleConfig, outer: RoleConfig, tools: list[Tool]) -> bool:
    """Everything `inner` allows, `outer` allows: every tool of this build, every
    namespace (judged conservatively: a glob only within "*" or itself), the same
    Kubernetes identity, and approvals no looser (its approvers among outer's)."""
    if inner.kubernetes.impersonate != outer.kubernetes.impersonate:
        return False
    if inner.observability.cluster_metrics and not outer.observability.cluster_metrics:
        return False
    if any(tool_allowed(inner, t) and not tool_allowed(outer, t) for t in tools):
        return False
    if _common_namespaces(inner.namespaces, outer.namespaces) != inner.namespaces:
        return False
    mine, theirs = inner.approval, outer.approval
    return (
        (theirs.allow_requester or not mine.allow_requester)
        and set(mine.approvers.users) <= set(theirs.approvers.users)
        and set(mine.approvers.usergroups) <= set(theirs.approvers.usergroups)
    )


def common_role(a: RoleConfig, b: RoleConfig, tools: list[Tool]) -> RoleConfig | None:
    """A role allowing only what both allow: the tools of this build both offer (by exact
    name), the namespaces both allow (conservatively), the approvers both name; None when
    they act as different Kubernetes identities (a call cannot act as both)."""
    if a.kubernetes.impersonate != b.kubernetes.impersonate:
        return None
    mine, theirs = a.approval, b.approval
    approval = ApprovalConfig(
        approvers=Approvers(
            users=[user for user in mine.approvers.users if user in theirs.approvers.users],
            usergroups=[g for g in mine.approvers.usergroups if g in theirs.approvers.usergroups],
        ),
        allow_requester=mine.allow_requester and theirs.allow_requester,
        timeout_s=min(mine.timeout_s, theirs.timeout_s),
    )
    return RoleConfig(
        tools=[t.pattern_name for t in tools if tool_allowed(a, t) and tool_allowed(b, t)],
        namespaces=_common_namespaces(a.namespaces, b.namespaces),
        approval=approval,
        kubernetes=b.kubernetes,
        observability=RoleObservability(
            cluster_metrics=a.observability.cluster_metrics and b.observability.cluster_metrics
        ),
    )


def _common_namespaces(mine: list[str], theirs: list[str]) -> list[str]:
    """The patterns of `mine` (or of `theirs`) whose namespaces both lists allow, kept only
    where that is certain: a glob meets "*" or itself; a name, any glob that matches it."""
    common: list[str] = []
    for pattern in mine:
        for other in theirs:
            met = _meet(pattern, other) or _meet(other, pattern)
            if met is not None and met not in common:
                common.append(met)
    return common


def _meet(pattern: str, other: str) -> str | None:
    if pattern == other or other == "*":
        return pattern
    literal = not any(char in pattern for char in "*?[")
    # "" (cluster-scoped objects) is allowed only by "*" or "" itself.
    return pattern if pattern and literal and fnmatchcase(pattern, other) else None


def _narrower_namespace(admitted: str | None, now: str | None) -> str | None:
    """A channel's default namespace (None: all of them, as far as its role allows)."""
    return now if now is not None else admitted


def tool_allowed(role: RoleConfig, tool: Tool) -> bool:
    return any(fnmatchcase(tool.pattern_name, pattern) for pattern in role.tools)


def namespace_allowed(role: RoleConfig, namespace: str | None) -> bool:
    """Cluster-scoped objects are namespace "": allowed only by "*" or an explicit "".

    None (all namespaces) is allowed only by "*".
    """
    if namespace is None:
        return "*" in role.namespaces
    if namespace == "":
        return "*" in role.namespaces or "" in role.namespaces
    return any(fnmatchcase(namespace, pattern) for pattern in role.namespaces if pattern)


def offered_tools(role: RoleConfig, tools: list[Tool]) -> list[Tool]:
    return [tool for tool in tools if tool_allowed(role, tool)]


def pattern_problems(roles: dict[str, RoleConfig], tools: list[Tool]) -> list[str]:
    """Role tool patterns that match no tool this build has, each with its key path and the
    closest tool: a misspelt name would otherwise make the role silently allow less."""
    problems: list[str] = []
    names = [tool.pattern_name for tool in tools]
    for role_name, role in roles.items():
        for i, pattern in enumerate(role.tools):
            if any(fnmatchcase(name, pattern) for name in names):
                continue
            if pattern.startswith(f"{MCP_PATTERN_KIND}/"):
                continue  # an MCP server's tools are known once it answers: see mcp.servers
            _, _, tool_name = pattern.partition("/")
            # The right name under another kind (write/list_pods) says so.
            close = [n for n in names if n.partition("/")[2] == tool_name]
            close = close or difflib.get_close_matches(pattern, names, n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            problems.append(f'roles.{role_name}.tools[{i}]: "{pattern}" matches no tool{hint}')
    return problems
