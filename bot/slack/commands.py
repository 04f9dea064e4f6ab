"""`/kelpie` slash command: `role`, `help`, `payload`. Answers are ephemeral except the
payload file, which goes into the thread it belongs to."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot.agent.conversation import SessionInfo
from bot.policy.roles import ChannelBinding, ChannelRoles, offered_tools
from bot.slack import copy
from bot.slack.channels import ChannelDirectory
from bot.slack.people import describe_approvers
from bot.tools.harness import ToolRegistry
from bot.tools.spec import ToolKind

log = logging.getLogger(__name__)

COMMAND = "/kelpie"


class PayloadSource(Protocol):
    async def last_for_session(self, session_id: int) -> str | None: ...


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
        "• `/kelpie role` shows what this channel may do; `/kelpie payload` shows "
        "the last request I sent to the model for this channel's latest thread."
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
    ) -> None:
        self._app = app
        self._channels = channels
        self._roles = roles
        self._registry = registry
        self._sessions = sessions
        self._payloads = payloads

    def register(self) -> None:
        self._app.command(COMMAND)(self._on_command)

    async def _on_command(self, ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        channel_id = str(body.get("channel_id") or "")
        user = str(body.get("user_id") or "")
        words = str(body.get("text") or "").split()
        sub = words[0].lower() if words else "help"
        is_im = channel_id.startswith("D") or body.get("channel_name") == "directmessage"
        name = None if is_im else await self._channels.name(channel_id)
        binding = self._roles.bind(channel_id, name, is_im)
        if binding is None:
            await respond(response_type="ephemeral", text=copy.NOT_ENABLED)
            return
        if sub == "role":
            text = describe_role(binding, self._registry)
        elif sub == "help":
            text = describe_help(binding, self._registry)
        elif sub == "payload":
            text = await self._payload(channel_id, user, binding)
        else:
            text = f"Unknown subcommand `{sub}`. Try `/kelpie help`, `/kelpie role`."
        await respond(response_type="ephemeral", text=text)

    async def _payload(self, channel_id: str, user: str, binding: ChannelBinding) -> str:
        if not any(
            tool.kind is ToolKind.READ for tool in offered_tools(binding.role, self._registry.all())
        ):
            return "This channel's role may not read what kelpie sent to the model."
        session = await self._sessions.latest_in_channel(channel_id)
        payload = await self._payloads.last_for_session(session.id) if session else None
        if session is None or payload is None:
            return "kelpie has not sent anything to the model from this channel yet."
        try:
            await self._app.client.files_upload_v2(
                channel=channel_id,
                thread_ts=session.thread_ts,
                content=payload,
                filename=f"kelpie-payload-{session.id}.json",
                title="Last request sent to the model (secrets masked)",
            )
        except SlackApiError as error:
            log.error("payload upload failed: %s", error.response.get("error"))
            return "The payload could not be uploaded to the thread; see kelpie's log."
        log.info("user %s fetched the payload of session %s", user, session.id)
        return "Posted the last request sent to the model in the thread, as a file."
