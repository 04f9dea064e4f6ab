"""Channel → role binding, and what a role allows (tool patterns and namespace globs)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from fnmatch import fnmatchcase

from bot.config import NO_ROLE, Config, RoleConfig
from bot.tools.spec import KubeIdentity, Tool, ToolContext


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
        return ToolContext(self.cluster, self.namespace, identity)


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
            _, _, tool_name = pattern.partition("/")
            # The right name under another kind (write/list_pods) says so.
            close = [n for n in names if n.partition("/")[2] == tool_name]
            close = close or difflib.get_close_matches(pattern, names, n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            problems.append(f'roles.{role_name}.tools[{i}]: "{pattern}" matches no tool{hint}')
    return problems
