"""The Slack app manifest is right: exactly the events kelpie handles, a scope for every Web
API method the code calls (derived from the code itself), no event Slack does not know, and
the committed copy is what `kelpie manifest` prints."""

from __future__ import annotations

import re
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.manifest import BOT_EVENTS, BOT_SCOPES, manifest, manifest_yaml

ROOT = Path(__file__).resolve().parents[1]
BOT = ROOT / "bot"

# The bot scopes each Web API method needs [docs.slack.dev <method>]; an empty set: none (or
# the app-level token's connections:write, which is not a bot scope).
METHOD_SCOPES: dict[str, set[str]] = {
    "auth.test": set(),
    "apps.connections.open": set(),
    # `kelpie check` only, with an app configuration token (no bot scope).
    "apps.manifest.export": set(),
    "chat.postMessage": {"chat:write"},
    "chat.postEphemeral": {"chat:write"},
    "chat.update": {"chat:write"},
    "chat.delete": {"chat:write"},
    "chat.startStream": {"chat:write"},
    "chat.appendStream": {"chat:write"},
    "chat.stopStream": {"chat:write"},
    "assistant.threads.setStatus": {"chat:write"},
    "agents.sessions.setStatus": {"chat:write", "assistant:write"},
    "agents.sessions.rename": {"chat:write", "assistant:write"},
    "reactions.add": {"reactions:write"},
    "reactions.remove": {"reactions:write"},
    "conversations.info": {"channels:read", "groups:read"},
    # Who may decide a memory card: the channel's members (public and private channels).
    "conversations.members": {"channels:read", "groups:read"},
    # An alert header's metadata found again after a crash (public and private channels).
    "conversations.history": {"channels:history", "groups:history"},
    "users.info": {"users:read"},
    "usergroups.users.list": {"usergroups:read"},
    "files.uploadV2": {"files:write"},
    # The feedback form (a modal): no scope [docs.slack.dev views.open].
    "views.open": set(),
}
# Events Slack knows (a manifest naming any other is refused when the app is created).
KNOWN_EVENTS = {
    "app_mention",
    "message.channels",
    "message.groups",
    "message.im",
    "message.mpim",
    "channel_rename",
    "app_home_opened",
    "assistant_thread_started",
    "assistant_thread_context_changed",
    "agent_session_stopped",
}
# The scope Slack requires to receive each event.
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "channel_rename": "channels:read",
}


def called_methods() -> set[str]:
    """Web API methods the code calls: every AsyncWebClient method it calls (`.name(`) or
    names in a string (`getattr(client, "reactions_add")`)."""
    client_methods = {
        name
        for name in dir(AsyncWebClient)
        if not name.startswith("_") and "_" in name and callable(getattr(AsyncWebClient, name))
    } - {"api_call"}
    source = "\n".join(path.read_text() for path in BOT.rglob("*.py"))
    named = set(re.findall(r"[.\"]([a-z]+(?:_[a-zA-Z0-9]+)+)[(\"]", source)) & client_methods
    return {_method(name) for name in named}


def _method(name: str) -> str:
    if name == "files_upload_v2":
        return "files.uploadV2"
    return name.replace("_", ".")


def handled_events() -> set[str]:
    source = "\n".join(path.read_text() for path in BOT.rglob("*.py"))
    return set(re.findall(r"\.event\(\s*\"([a-z_]+)\"", source))


def test_the_code_calls_methods_this_test_knows():
    called = called_methods()
    assert {"chat.postMessage", "agents.sessions.setStatus", "reactions.add"} <= called
    assert called - METHOD_SCOPES.keys() == set(), "add the new method's scopes here"


def test_every_called_method_has_its_scopes_in_the_manifest():
    scopes = set(manifest("socket")["oauth_config"]["scopes"]["bot"])
    missing = {
        method: needed - scopes
        for method in called_methods()
        if (needed := METHOD_SCOPES[method] - scopes)
    }
    # conversations.info needs one of its scopes per channel kind: both are listed.
    assert missing == {}


def test_the_manifest_subscribes_to_exactly_the_handled_events():
    events = set(manifest("socket")["settings"]["event_subscriptions"]["bot_events"])
    assert events <= KNOWN_EVENTS
    as_handled = {event.split(".")[0] for event in events}
    assert as_handled == handled_events()
    scopes = set(BOT_SCOPES)
    assert {EVENT_SCOPES[e] for e in events if e in EVENT_SCOPES} <= scopes
    assert "agent_session_stopped" in events
    assert manifest("socket")["features"]["agent_view"]["agent_description"]


def test_the_committed_manifest_is_what_kelpie_manifest_prints():
    committed = (ROOT / "config" / "slack-app-manifest.yaml").read_text()
    assert committed == manifest_yaml("socket")
    assert list(BOT_EVENTS) == manifest("socket")["settings"]["event_subscriptions"]["bot_events"]
