"""Who calls kelpie's MCP server, and what their calls run under.

A caller proves itself with a bearer token (`mcp.clients[].token_env`), compared in
constant time with every configured client's; the client it names gets exactly one role,
one cluster and one Slack channel for its approvals. Each client's calls belong to one
session (`mcp:<client>:`, team `mcp`, no thread: its cards are top-level messages in the
approval channel), so the approval flow (`bot/approvals`) needs nothing of its own: the
re-check at a click asks `McpBindings` for the session's binding (the client's role as
configured now), and `McpDecisions` keeps a decided MCP approval from starting an agent
turn (no model runs for an MCP caller; it asks `kelpie_approval_status`).

Tokens never leave this module: not logged, not stored, not shown.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

import bot.mcp.server_copy as copy
from bot.approvals.model import Continuation
from bot.approvals.recheck import Bindings
from bot.config import Config, ConfigError, McpClientConfig, Secrets
from bot.pipeline.roles import ChannelBinding
from bot.values import MCP_ASKER_PREFIX, Approval, SessionInfo

log = logging.getLogger(__name__)

MCP_TEAM = "mcp"


@dataclass(frozen=True)
class McpCaller:
    """An authenticated client, as the configuration running now describes it."""

    name: str
    binding: ChannelBinding
    # Where its writes are approved (None: its role's writes are not offered).
    approval_channel: str | None

    @property
    def asker(self) -> str:
        """Who the audit, the card and the approval name as the requester."""
        return f"{MCP_ASKER_PREFIX}{self.name}"

    @property
    def session_key(self) -> str:
        # The part after the last ":" is the thread: none (cards go top-level).
        return f"{MCP_TEAM}:{self.name}:"

    def session(self) -> SessionInfo:
        """The template of the client's one session (its id is given by the store)."""
        return SessionInfo(
            id=0,
            session_key=self.session_key,
            team_id=MCP_TEAM,
            channel_id=self.approval_channel or "",
            thread_ts="",
            is_dm=False,
            role=self.binding.role_name,
            cluster=self.binding.cluster,
            namespace=None,
            started_by=self.asker,
        )


def client_of(session_key: str) -> str | None:
    """The MCP client whose session this is (None: a Slack or terminal session)."""
    team, _, rest = session_key.partition(":")
    if team != MCP_TEAM or not rest.endswith(":"):
        return None
    return rest[:-1] or None


class McpCallers:
    """The configured clients, each bound once to its role and cluster (the configuration
    is the process's), and their tokens (read from the environment once)."""

    def __init__(self, callers: dict[str, McpCaller], tokens: dict[str, bytes]) -> None:
        self._callers = callers
        self._tokens = tokens

    @classmethod
    def from_config(cls, config: Config, secrets: Secrets) -> McpCallers:
        """Raises ConfigError naming the first client whose token variable is unset, or
        two clients given the same token (it could only ever name one of them)."""
        tokens = {
            client.name: secrets.mcp_client_token(index).encode()
            for index, client in enumerate(config.mcp.clients)
        }
        if len(set(tokens.values())) != len(tokens):
            raise ConfigError([copy.SHARED_TOKEN])
        return cls({client.name: _caller(config, client) for client in config.mcp.clients}, tokens)

    def authenticate(self, token: str | None) -> McpCaller | None:
        """The client this token belongs to; None for no token or an unknown one. Every
        configured token is compared, in constant time, whatever matched."""
        if not token:
            return None
        given = token.encode()
        found: str | None = None
        for name, expected in self._tokens.items():
            if hmac.compare_digest(given, expected):
                found = name
        return self.caller(found) if found is not None else None

    def caller(self, name: str) -> McpCaller | None:
        """The client of this name (None: no longer configured)."""
        return self._callers.get(name)


def _caller(config: Config, client: McpClientConfig) -> McpCaller:
    """A client bound to its role (the configuration refuses one it does not define)."""
    cluster = client.cluster or config.kubernetes.default_cluster
    binding = ChannelBinding(client.role, config.roles[client.role], cluster, None)
    return McpCaller(client.name, binding, client.approval_channel)


class McpBindings:
    """The approval flow's `Bindings`: an MCP client's session is bound to the client's
    role and cluster as configured now (a client removed: nothing); any other session to
    what its channel gives."""

    def __init__(self, inner: Bindings, callers: McpCallers) -> None:
        self._inner = inner
        self._callers = callers

    async def current(
        self, session: SessionInfo, *, external: bool = False
    ) -> ChannelBinding | None:
        name = client_of(session.session_key)
        if name is None:
            return await self._inner.current(session, external=external)
        caller = self._callers.caller(name)
        return caller.binding if caller is not None else None


class McpDecisions:
    """The approval flow's `Continuation`: a decision on an MCP client's change is on its
    approval (and card) only; no agent turn follows, since no conversation asked for it."""

    def __init__(self, inner: Continuation) -> None:
        self._inner = inner

    async def record(self, approval: Approval, note: str, *, answer: bool) -> None:
        if approval.requested_by.startswith(MCP_ASKER_PREFIX):
            log.info("approval %s of %s decided: %s", approval.id, approval.requested_by, note)
            return
        await self._inner.record(approval, note, answer=answer)
