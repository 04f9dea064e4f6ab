"""The Slack app manifest: exactly the scopes, events and features the bot uses."""

from __future__ import annotations

from typing import Any

import yaml

# Each scope is here because a listener or Web API call below needs it.
BOT_SCOPES = [
    "app_mentions:read",  # app_mention events
    "channels:history",  # thread follow-ups without a mention (message.channels)
    "groups:history",  # the same in private channels (message.groups)
    "im:history",  # DMs (message.im)
    "channels:read",  # conversations.info: channel names for role matching
    "groups:read",  # conversations.info for private channels
    "chat:write",  # replies, progress edits, streams, approval cards, ephemeral replies,
    # assistant.threads.setStatus (the working status in DMs), agents.sessions.setStatus
    "assistant:write",  # what declaring the app an agent (features.agent_view) adds
    "reactions:write",  # eyes → white_check_mark / x on the asking message
    "files:write",  # files_upload_v2: output a person asked to see (show_* tools)
    "commands",  # the /kelpie slash command
    "usergroups:read",  # usergroups.users.list: approvers given as user groups
]
AGENT_DESCRIPTION = (
    "Ask about your Kubernetes clusters; kelpie reads them and proposes changes for approval."
)
BOT_EVENTS = [
    "app_mention",
    "message.channels",
    "message.groups",
    "message.im",
    "channel_rename",
    "agent_session_stopped",  # the stop button of a thread's agent session
]


def manifest(
    mode: str, request_url: str = "https://kelpie.example.com/slack/events"
) -> dict[str, Any]:
    socket = mode == "socket"
    slash: dict[str, Any] = {
        "command": "/kelpie",
        "description": "What kelpie may do here: role, help, payload, record",
        "usage_hint": "role | help | payload | record [thread link]",
        "should_escape": False,
    }
    if not socket:
        slash["url"] = request_url
    events: dict[str, Any] = {"bot_events": list(BOT_EVENTS)}
    interactivity: dict[str, Any] = {"is_enabled": True}
    if not socket:
        events["request_url"] = request_url
        interactivity["request_url"] = request_url
    return {
        "display_information": {
            "name": "kelpie",
            "description": "Kubernetes chat-ops: ask about your cluster, approve changes.",
        },
        "features": {
            "bot_user": {"display_name": "kelpie", "always_online": True},
            "slash_commands": [slash],
            "app_home": {"messages_tab_enabled": True, "messages_tab_read_only_enabled": False},
            # An agent app: only agents may create agent sessions (the thread's status and
            # Slack's stop button while kelpie works).
            "agent_view": {"agent_description": AGENT_DESCRIPTION},
        },
        "oauth_config": {"scopes": {"bot": list(BOT_SCOPES)}},
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": socket,
            "token_rotation_enabled": False,
        },
    }


def manifest_yaml(mode: str, request_url: str | None = None) -> str:
    built = manifest(mode, request_url) if request_url else manifest(mode)
    return yaml.safe_dump(built, sort_keys=False)
