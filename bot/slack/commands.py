"""`/kelpie` slash command: `role`, `help`, `model`, `payload`. Every answer is
ephemeral; the payload is shown only to people allowed to approve in that channel.

A command is handled once its answer is sent: one whose replica died before is answered by
another (`REPLAYED`); its response_url may be stale by then, and the reply falls back to an
ephemeral message when Slack refuses it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from bot.model.outbound import mask_text
from bot.model.router import ResolvedAgentPolicy
from bot.pipeline.harness import ToolRegistry
from bot.pipeline.roles import ChannelBinding, ChannelRoles, offered_tools
from bot.slack import copy
from bot.slack.channels import ChannelDirectory
from bot.slack.inbox import Handled, marking_handled
from bot.slack.people import ApproverDirectory, describe_approvers
from bot.slack.replies import CommandReply
from bot.slack.safe_text import escape_mrkdwn
from bot.toolsets.spec import Tool, ToolKind
from bot.values import SessionInfo

log = logging.getLogger(__name__)

COMMAND = "/kelpie"


class PayloadSource(Protocol):
    async def last_for_session(self, session_id: int) -> str | None: ...


class ModelPolicies(Protocol):
    async def resolve(
        self, tools: Sequence[Tool], profile_name: str | None = None
    ) -> ResolvedAgentPolicy: ...


class RecordSubcommand(Protocol):
    """`/kelpie record [link]` (`bot.slack.record.RecordCommand`): the ephemeral answer."""

    async def __call__(self, channel_id: str, user: str, words: list[str]) -> str: ...


class RecentSessions(Protocol):
    async def latest_in_channel(self, channel_id: str) -> SessionInfo | None: ...


def describe_role(binding: ChannelBinding, registry: ToolRegistry) -> str:
    tools = offered_tools(binding.role, registry.all())
    by_kind: dict[str, list[str]] = {}
    for tool in tools:
        by_kind.setdefault(str(tool.kind), []).append(tool.name)
    tool_lines = "\n".join(f"• {kind}: {', '.join(names)}" for kind, names in by_kind.items())
    namespaces = ", ".join(f"`{ns or '(cluster-scoped)'}`" for ns in binding.role.namespaces)
    lines = [
        f"*Role here:* `{binding.role_name}` · *cluster:* `{binding.cluster}` · "
        f"*default namespace:* `{binding.namespace or '-'}`",
        f"*Namespaces:* {namespaces}",
        f"*Tools:*\n{tool_lines or '• none'}",
    ]
    if any(tool.kind is ToolKind.WRITE for tool in tools):
        lines.append(f"*Who may approve writes:* {describe_approvers(binding.role.approval)}")
    else:
        lines.append("*Writes:* none in this channel.")
    return "\n".join(lines)


def describe_model(policy: ResolvedAgentPolicy) -> str:
    """The model a turn in this channel runs with, its tier and why, and its budgets."""
    lines = [
        f"*Model:* `{policy.model}` · *tier:* `{policy.tier}` ({policy.tier_source})",
        f"*Budgets:* {policy.rounds} rounds · {policy.result_chars:,} chars per tool result · "
        f"{policy.history_chars:,} chars of history",
        "*Why:*",
        *(f"• {line}" for line in policy.provenance),
    ]
    return "\n".join(lines)


def describe_help(binding: ChannelBinding, registry: ToolRegistry) -> str:
    tools = offered_tools(binding.role, registry.all())
    can_write = any(tool.kind is ToolKind.WRITE for tool in tools)
    lines = [
        "*kelpie* answers questions about your Kubernetes cluster in threads.",
        "• Mention me with a question: `@kelpie why is checkout-api crashlooping?`",
        "• Reply in my thread to follow up; a new message interrupts the current answer.",
        "• Ask me to show logs and I post them as a file.",
    ]
    if can_write:
        lines.append(
            "• Ask for a change (scale, restart, …): I post an approval card, and nothing "
            "happens until an allowed person presses Approve."
        )
    else:
        lines.append("• This channel is read-only: I cannot change anything here.")
    lines.append(
        "• `/kelpie role` shows what this channel may do; `/kelpie model` which model "
        "answers and under which tier; `/kelpie payload` the last request I sent to the "
        "model for this channel's latest thread; `/kelpie record [thread link]` posts an "
        "incident record of a thread (default: your latest one here) as a file."
    )
    return "\n".join(lines)


class SlashCommands:
    def __init__(
        self,
        app: AsyncApp,
        channels: ChannelDirectory,
        roles: ChannelRoles,
        registry: ToolRegistry,
        sessions: RecentSessions,
        payloads: PayloadSource,
        approvers: ApproverDirectory,
        models: ModelPolicies,
        handled: Handled,
        record: RecordSubcommand | None = None,
    ) -> None:
        self._record = record
        self._models = models
        self._handled = handled
        self._app = app
        self._channels = channels
        self._roles = roles
        self._registry = registry
        self._sessions = sessions
        self._payloads = payloads
        self._approvers = approvers

    def register(self) -> None:
        self._app.command(COMMAND)(marking_handled(self._handled, self._on_command))

    async def _on_command(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        channel_id = str(body.get("channel_id") or "")
        user = str(body.get("user_id") or "")
        words = str(body.get("text") or "").split()
        sub = words[0].lower() if words else "help"
        is_im = channel_id.startswith("D") or body.get("channel_name") == "directmessage"
        name = None if is_im else await self._channels.name(channel_id)
        binding = self._roles.bind(channel_id, name, is_im)
        reply = CommandReply(
            str(body.get("response_url") or ""), self._app.client, channel_id, user
        )
        if binding is None:
            await reply.send(copy.NOT_ENABLED)
            return
        if sub == "role":
            text = describe_role(binding, self._registry)
        elif sub == "help":
            text = describe_help(binding, self._registry)
        elif sub == "model":
            tools = offered_tools(binding.role, self._registry.all())
            text = describe_model(await self._models.resolve(tools))
        elif sub == "payload":
            text = await self._payload(channel_id, user, binding)
        elif sub == "record" and self._record is not None:
            text = await self._record(channel_id, user, words[1:])
        else:
            text = copy.unknown_subcommand(escape_mrkdwn(sub))
        await reply.send(text)

    async def _payload(self, channel_id: str, user: str, binding: ChannelBinding) -> str:
        """The last payload as ephemeral messages, for an approver of this channel only:
        it holds what people asked and what the cluster answered (masked, but still)."""
        if not any(
            tool.kind is ToolKind.READ for tool in offered_tools(binding.role, self._registry.all())
        ):
            return "This channel's role may not read what kelpie sent to the model."
        if not await self._approvers.is_approver(user, binding.role.approval):
            log.info("user %s asked for a payload in %s and is not an approver", user, channel_id)
            return copy.PAYLOAD_APPROVERS_ONLY
        session = await self._sessions.latest_in_channel(channel_id)
        payload = await self._payloads.last_for_session(session.id) if session else None
        if session is None or payload is None:
            return "kelpie has not sent anything to the model from this channel yet."
        log.info("user %s fetched the payload of session %s", user, session.id)
        return payload_reply(payload)


def payload_reply(payload: str) -> str:
    """The payload, masked again at this exit, escaped, in a code block (the reply splits it
    into pieces, each fenced again)."""
    masked, _ = mask_text(payload)
    return f"{copy.PAYLOAD_TITLE}\n\n```\n{escape_mrkdwn(masked)}\n```"
