"""A Slack-compatible peer on 127.0.0.1 for tests: Web API, Socket Mode, signed HTTP events.

`SlackServer` speaks enough of Slack for the official SDKs (slack_sdk's `AsyncWebClient`,
its aiohttp Socket Mode client, Bolt's `AsyncApp`) to talk to it unchanged:

* the Web API methods the bot uses under `/api/<method>` (form, query and JSON bodies,
  Bearer tokens checked), including the streaming trio chat.startStream / appendStream /
  stopStream with the documented errors, and the three-step `files_upload_v2` dance;
* a Socket Mode WebSocket at `/link` that greets with `hello`, delivers envelopes and
  records their acks;
* `response_url` endpoints at `/response/<id>` for interactive payloads and commands;
* a client that POSTs signed HTTP events to an app, exactly as Slack signs them.

It records every call so a test can assert what a person would see in a thread
(`thread()`, `ephemerals()`, `reactions()`), and it injects faults on request
(429 with Retry-After, `ok:false` errors, expired streams, dropped sockets, archived
channels that refuse new messages with `is_archived`).

It enforces Slack's per-method tier limits and the per-channel posting rate with 429 and
Retry-After (`limits`; tests count them over shorter windows), Slack's size limits with its
error codes, and counts the TCP connections the Web API is called over (`api_connections`).

It deliberately does not emulate message events for
the bot's own posts, modals beyond `views.open` (single-use trigger ids from the
interactive payloads it hands out, the view checked like Slack checks it) and their
`view_submission`, history methods or Enterprise Grid; unknown methods
answer `unknown_method` so a test notices when the bot calls something it does not serve.
"""

# The wait helpers take `timeout=` by design: tests read `wait_ack(id, timeout=5)`.

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from bot.slack.manifest import BOT_SCOPES, manifest

TEAM_ID = "T0TEST"
TEAM_DOMAIN = "kelpie-test"
TEAM_NAME = "Kelpie Test"
ENTERPRISE_ID = None
APP_ID = "A0KELPIE"
BOT_USER_ID = "U0KELPIE"
BOT_ID = "B0KELPIE"
BOT_NAME = "kelpie"
BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
# An app configuration token (created per developer under "Your App Configuration Tokens";
# it reads and writes app manifests and expires after 12 hours).
CONFIG_TOKEN = "xoxe.xoxp-1-test-config-token"
SIGNING_SECRET = "kelpie-test-signing-secret"
VERIFICATION_TOKEN = "kelpie-test-verification-token"

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]
Json = dict[str, Any]

# Fields slack_sdk (or a hand-written call) may send as JSON encoded strings.
_JSON_STRING_FIELDS = frozenset(
    {"blocks", "attachments", "chunks", "files", "metadata", "loading_messages", "view"}
)
_MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_CHUNK_TYPES = frozenset({"markdown_text", "plan_update", "task_update", "blocks"})
_MAX_MARKDOWN = 12_000  # markdown_text per call, and in all in one streamed message
_MAX_UPDATE_TEXT = 4_000  # chat.update text
_MAX_TEXT = 40_000  # chat.postMessage text
_MAX_BLOCKS = 50
_MAX_SECTION = 3_000
_MAX_BLOCKS_TEXT = 12_000  # text in all of a message's blocks
_RESPONSE_URL_USES = 5


@dataclass
class RecordedCall:
    """One Web API call as the server received it."""

    method: str
    params: Json
    time: float
    token: str | None
    status: int = 200
    response: Json = field(default_factory=dict)
    retry_after: int | None = None  # seconds, when answered 429

    @property
    def ok(self) -> bool:
        """Whether the server answered `ok: true`."""
        return bool(self.response.get("ok"))

    @property
    def error(self) -> str | None:
        """The `error` the server answered, if any."""
        return self.response.get("error")


@dataclass
class UploadedFile:
    """A file uploaded through files.getUploadURLExternal + upload URL + completeUpload."""

    id: str
    filename: str
    length: int
    content: bytes = b""
    title: str | None = None
    alt_txt: str | None = None
    snippet_type: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None
    uploaded: bool = False
    completed: bool = False

    @property
    def text(self) -> str:
        """The content decoded as UTF-8 (replacement characters for bad bytes)."""
        return self.content.decode("utf-8", errors="replace")

    def to_slack(self) -> Json:
        """The file object as Slack returns it."""
        return {
            "id": self.id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": self.filename,
            "title": self.title or self.filename,
            "mimetype": "text/plain",
            "filetype": self.snippet_type or "text",
            "pretty_type": "Plain Text",
            "user": BOT_USER_ID,
            "user_team": TEAM_ID,
            "size": len(self.content),
            "is_external": False,
            "url_private": f"https://files.slack.com/files-pri/{TEAM_ID}-{self.id}/{self.filename}",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{BOT_USER_ID}/{self.id}",
            "channels": [self.channel] if self.channel else [],
            "shares": {},
        }


@dataclass
class Message:
    """A message as a person sees it in a channel or thread (after updates and streaming)."""

    channel: str
    ts: str
    text: str = ""
    user: str | None = None
    bot_id: str | None = None
    thread_ts: str | None = None
    blocks: list[Json] = field(default_factory=list)
    attachments: list[Json] = field(default_factory=list)
    metadata: Json | None = None
    kind: Literal["message", "stream", "file"] = "message"
    # Streams: "streaming" while live, then "stopped", "expired" or "stopped_by_user".
    stream_state: str | None = None
    chunks: list[Json] = field(default_factory=list)
    recipient_user_id: str | None = None
    recipient_team_id: str | None = None
    task_display_mode: str | None = None
    files: list[UploadedFile] = field(default_factory=list)
    updates: int = 0
    deleted: bool = False
    # Another app's message (an alerting app): its app id, and its subtype when it came
    # through an incoming webhook ("bot_message", with the webhook's username).
    app_id: str | None = None
    subtype: str | None = None
    username: str | None = None

    @property
    def is_bot(self) -> bool:
        """Whether the bot posted this message."""
        return self.bot_id is not None and self.app_id is None

    @property
    def streaming(self) -> bool:
        """Whether the stream behind this message is still live."""
        return self.stream_state == "streaming"

    @property
    def tasks(self) -> dict[str, Json]:
        """Streamed `task_update` chunks merged by task id, in first-seen order."""
        merged: dict[str, Json] = {}
        for chunk in self.chunks:
            if chunk.get("type") == "task_update":
                merged.setdefault(str(chunk.get("id")), {}).update(chunk)
        return merged

    @property
    def plan_title(self) -> str | None:
        """The latest streamed `plan_update` title, if any."""
        titles = [c.get("title") for c in self.chunks if c.get("type") == "plan_update"]
        return titles[-1] if titles else None

    def to_slack(self) -> Json:
        """The message object as the Web API and interactive payloads show it."""
        msg: Json = {"type": "message", "text": self.text, "ts": self.ts, "team": TEAM_ID}
        if self.user:
            msg["user"] = self.user
        if self.bot_id:
            msg["bot_id"] = self.bot_id
            msg["app_id"] = self.app_id or APP_ID
        if self.bot_id and self.subtype is None:
            # A bot user's message carries its profile; a webhook's has a username instead.
            msg["bot_profile"] = {
                "id": self.bot_id,
                "app_id": self.app_id or APP_ID,
                "name": self.username or BOT_NAME,
                "team_id": TEAM_ID,
                "deleted": False,
            }
        if self.subtype:
            msg["subtype"] = self.subtype
        if self.username and self.subtype:
            msg["username"] = self.username
        if self.thread_ts:
            msg["thread_ts"] = self.thread_ts
        if self.blocks:
            msg["blocks"] = self.blocks
        if self.attachments:
            msg["attachments"] = self.attachments
        if self.metadata:
            msg["metadata"] = self.metadata
        if self.files:
            msg["files"] = [f.to_slack() for f in self.files]
            msg["upload"] = True
        if self.updates:
            msg["edited"] = {"user": self.user or BOT_USER_ID, "ts": self.ts}
        return msg


_SESSION_STATUSES = frozenset({"processing", "active", "suspended", "closed"})


@dataclass
class AgentSession:
    """A thread's agent session as Slack keeps it."""

    title: str | None
    initiator: str | None
    statuses: list[str] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        return self.statuses[-1] if self.statuses else None


@dataclass
class Ephemeral:
    """An ephemeral message: only `user` sees it."""

    channel: str
    user: str
    ts: str
    text: str = ""
    blocks: list[Json] = field(default_factory=list)
    thread_ts: str | None = None
    source: Literal["api", "response_url"] = "api"


@dataclass
class OpenedView:
    """A modal opened with views.open: the person it was opened for and the view as sent."""

    id: str
    user: str
    trigger_id: str
    view: Json


@dataclass
class Ack:
    """A Socket Mode ack as the app sent it."""

    envelope_id: str
    payload: Json | None
    time: float
    raw: Json


@dataclass
class ResponseUrlPost:
    """One POST the app made to a `response_url`."""

    response_id: str
    body: Json
    time: float
    status: int


@dataclass
class _ResponseTarget:
    """Where a `response_url` points: the message or channel it acts on."""

    channel: str
    user: str
    message_ts: str | None
    thread_ts: str | None
    uses: int = 0


# Slack's tiers: calls per method, per app, per workspace, per minute [docs.slack.dev].
_TIER_CALLS = {1: 1, 2: 20, 3: 50, 4: 100}
_METHOD_TIERS = {
    "apps.connections.open": 3,
    "apps.manifest.export": 3,
    "chat.postEphemeral": 4,
    "chat.update": 3,
    "chat.delete": 3,
    "chat.startStream": 2,
    "chat.appendStream": 4,
    "chat.stopStream": 2,
    "reactions.add": 3,
    "reactions.remove": 2,
    "users.info": 4,
    "usergroups.users.list": 2,
    "conversations.info": 3,
    "conversations.members": 4,
    "files.getUploadURLExternal": 4,
    "files.completeUploadExternal": 4,
    "agents.sessions.setStatus": 3,
    "agents.sessions.rename": 3,
    "views.open": 4,
}
# Calls that put a new message in a channel: about one a second per channel, short bursts.
_POSTING = frozenset({"chat.postMessage", "chat.startStream"})
# Reading a channel's history: one call a minute, at most 15 messages, for apps outside the
# Marketplace.
_HISTORY = frozenset({"conversations.history"})
_HISTORY_MAX = 15


@dataclass
class RateLimits:
    """What the fake enforces with 429 + Retry-After: `per_tier` calls per method in any
    `window_s` (Slack's minute), and `channel_posts` posts per channel in any
    `channel_window_s`. Tests shrink the windows (`scaled`) to keep Slack's counts fast."""

    per_tier: dict[int, int] = field(default_factory=lambda: dict(_TIER_CALLS))
    window_s: float = 60.0
    channel_posts: int = 10
    channel_window_s: float = 10.0
    # conversations.history / .replies for an app not in the Marketplace: one call a minute
    # (Slack changelog 2025-05), 15 messages at most per call.
    history_calls: int = 1

    def scaled(self, factor: float) -> RateLimits:
        return RateLimits(
            dict(self.per_tier),
            self.window_s * factor,
            self.channel_posts,
            self.channel_window_s * factor,
        )


@dataclass
class _Fault:
    kind: Literal["rate_limit", "error"]
    remaining: int | None
    retry_after: int = 1
    error: str = ""


@dataclass
class _Channel:
    id: str
    name: str
    is_im: bool = False
    user: str | None = None
    is_private: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    is_archived: bool = False

    def to_slack(self) -> Json:
        if self.is_im:
            return {
                "id": self.id,
                "created": self.created,
                "is_im": True,
                "is_org_shared": False,
                "user": self.user,
                "is_user_deleted": False,
                "priority": 0,
            }
        return {
            "id": self.id,
            "name": self.name,
            "name_normalized": self.name,
            "is_channel": not self.is_private,
            "is_group": self.is_private,
            "is_im": False,
            "is_mpim": False,
            "is_private": self.is_private,
            "is_archived": self.is_archived,
            "is_general": self.name == "general",
            "is_shared": False,
            "is_ext_shared": False,
            "is_org_shared": False,
            "is_member": True,
            "created": self.created,
            "creator": "U0ADMIN",
            "context_team_id": TEAM_ID,
            "topic": {"value": "", "creator": "", "last_set": 0},
            "purpose": {"value": "", "creator": "", "last_set": 0},
        }


@dataclass
class _User:
    id: str
    name: str
    real_name: str
    email: str | None = None
    is_bot: bool = False
    deleted: bool = False
    tz: str = "Europe/Amsterdam"
    tz_offset: int = 3600

    def to_slack(self) -> Json:
        return {
            "id": self.id,
            "team_id": TEAM_ID,
            "name": self.name,
            "deleted": self.deleted,
            "real_name": self.real_name,
            "tz": self.tz,
            "tz_label": "Central European Time",
            "tz_offset": self.tz_offset,
            "profile": {
                "real_name": self.real_name,
                "display_name": self.name,
                "real_name_normalized": self.real_name,
                "display_name_normalized": self.name,
                "email": self.email,
                "team": TEAM_ID,
                "image_48": "https://a.slack-edge.com/48.png",
            },
            "is_admin": False,
            "is_owner": False,
            "is_bot": self.is_bot,
            "is_app_user": False,
            "updated": int(time.time()),
        }


Handler = Callable[["SlackServer", RecordedCall], Json]


class SlackServer:
    """A Slack workspace on 127.0.0.1: Web API, Socket Mode, response URLs and signed events.

    Use it as `async with SlackServer() as slack:` or call `start()` / `stop()`.
    `api_url` is the `base_url` for `AsyncWebClient`.
    """

    team_id: ClassVar[str] = TEAM_ID
    team_domain: ClassVar[str] = TEAM_DOMAIN
    app_id: ClassVar[str] = APP_ID
    bot_user_id: ClassVar[str] = BOT_USER_ID
    bot_id: ClassVar[str] = BOT_ID
    bot_token: ClassVar[str] = BOT_TOKEN
    app_token: ClassVar[str] = APP_TOKEN
    signing_secret: ClassVar[str] = SIGNING_SECRET
    verification_token: ClassVar[str] = VERIFICATION_TOKEN

    # Methods that take the app-level token; every other method takes the bot token.
    _APP_TOKEN_METHODS: ClassVar[frozenset[str]] = frozenset({"apps.connections.open"})
    _CONFIG_TOKEN_METHODS: ClassVar[frozenset[str]] = frozenset({"apps.manifest.export"})

    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []
        self.messages: dict[str, dict[str, Message]] = {}
        self.ephemeral_messages: list[Ephemeral] = []
        self.files: dict[str, UploadedFile] = {}
        self.acks: dict[str, Ack] = {}
        self.sent_envelopes: list[Json] = []
        self.response_posts: list[ResponseUrlPost] = []
        # The bot token's scopes, sent in `x-oauth-scopes` as Slack does: the app was
        # installed from kelpie's own manifest unless a test removes some.
        self.granted_scopes: list[str] = list(BOT_SCOPES)
        # Whether the app subscribed to `agent_session_stopped` (Slack shows a stop button on
        # a processing agent session only then).
        self.session_stop_subscribed = True
        # Whether the app is declared an agent (features.agent_view in its configuration).
        self.agent_view = True
        # Agent sessions by (channel, thread_ts): the status history, title and initiator.
        self.agent_sessions: dict[tuple[str, str], AgentSession] = {}
        self.statuses: dict[tuple[str, str], list[str]] = {}
        # Text in all of a message's blocks before Slack answers msg_blocks_too_long (not
        # documented; a test lowers it to see refused messages retried smaller).
        self.max_blocks_text = _MAX_BLOCKS_TEXT
        self._reactions: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._channels: dict[str, _Channel] = {}
        self._users: dict[str, _User] = {}
        self._usergroups: dict[str, list[str]] = {}
        self._members: dict[str, list[str]] = {}
        self._faults: dict[str, list[_Fault]] = {}
        self._delays: dict[str, float] = {}
        self._holds: list[tuple[str, Callable[[Json], bool], asyncio.Event]] = []
        self._held_answers: list[tuple[str, Callable[[Json], bool], asyncio.Event]] = []
        self._response_targets: dict[str, _ResponseTarget] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_cursor = itertools.count()
        self._ack_events: dict[str, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self._last_ts_us = 0
        self._ids = itertools.count(1)
        # Trigger ids handed out in interactive payloads, and the modals opened with them.
        self._triggers: dict[str, str] = {}  # trigger id → the person who clicked
        self._used_triggers: set[str] = set()
        self.views: list[OpenedView] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port: int | None = None
        self.connections_opened = 0
        self.limits = RateLimits()
        self._admitted: dict[str, list[float]] = {}
        # Client ends (host, port) of the TCP connections the Web API was called over.
        self._api_peers: set[Any] = set()
        self._handlers: dict[str, Handler] = {
            "auth.test": SlackServer._auth_test,
            "apps.connections.open": SlackServer._apps_connections_open,
            "apps.manifest.export": SlackServer._apps_manifest_export,
            "chat.postMessage": SlackServer._chat_post_message,
            "chat.update": SlackServer._chat_update,
            "chat.delete": SlackServer._chat_delete,
            "chat.postEphemeral": SlackServer._chat_post_ephemeral,
            "chat.startStream": SlackServer._chat_start_stream,
            "chat.appendStream": SlackServer._chat_append_stream,
            "chat.stopStream": SlackServer._chat_stop_stream,
            "reactions.add": SlackServer._reactions_add,
            "reactions.remove": SlackServer._reactions_remove,
            "users.info": SlackServer._users_info,
            "conversations.info": SlackServer._conversations_info,
            "conversations.history": SlackServer._conversations_history,
            "usergroups.users.list": SlackServer._usergroups_users_list,
            "conversations.members": SlackServer._conversations_members,
            "files.getUploadURLExternal": SlackServer._files_get_upload_url_external,
            "files.completeUploadExternal": SlackServer._files_complete_upload_external,
            "assistant.threads.setStatus": SlackServer._assistant_threads_set_status,
            "agents.sessions.setStatus": SlackServer._agents_sessions_set_status,
            "agents.sessions.rename": SlackServer._agents_sessions_rename,
            "views.open": SlackServer._views_open,
        }
        self.set_user(BOT_USER_ID, BOT_NAME, real_name="Kelpie", is_bot=True)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind a free port on 127.0.0.1 and start serving."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_get("/link", self._handle_socket)
        app.router.add_post("/upload/v1/{file_id}", self._handle_upload)
        app.router.add_post("/response/{response_id}", self._handle_response_url)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Close sockets and the HTTP client, then stop serving."""
        await self.disconnect_all()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SlackServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT` of the running server."""
        if self._port is None:
            raise RuntimeError("SlackServer is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_url(self) -> str:
        """The Web API base URL for `AsyncWebClient(base_url=...)`."""
        return f"{self.base_url}/api/"

    @property
    def socket_url(self) -> str:
        """The Socket Mode WebSocket URL that apps.connections.open hands out."""
        return f"ws://127.0.0.1:{self._port}/link"

    # ------------------------------------------------------------------ workspace setup

    def set_channel(
        self, channel_id: str, name: str, is_im: bool = False, *, user: str | None = None
    ) -> None:
        """Create or rename a conversation; conversations.info shows the change at once."""
        existing = self._channels.get(channel_id)
        self._channels[channel_id] = _Channel(
            id=channel_id,
            name=name,
            is_im=is_im,
            user=user,
            is_private=channel_id.startswith("G"),
            created=existing.created if existing else int(time.time()),
            is_archived=existing.is_archived if existing else False,
        )

    def set_user(
        self,
        user_id: str,
        name: str,
        *,
        real_name: str | None = None,
        email: str | None = None,
        is_bot: bool = False,
        deleted: bool = False,
        tz: str = "Europe/Amsterdam",
    ) -> None:
        """Create or change a user that users.info returns."""
        self._users[user_id] = _User(
            id=user_id,
            name=name,
            real_name=real_name or name.title(),
            email=email,
            is_bot=is_bot,
            deleted=deleted,
            tz=tz,
        )

    def set_members(self, channel_id: str, users: list[str]) -> None:
        """Set who conversations.members says is in `channel_id` (none until set)."""
        self._members[channel_id] = list(users)

    def set_usergroup(self, usergroup_id: str, users: list[str]) -> None:
        """Set the members usergroups.users.list returns for `usergroup_id` (S…)."""
        self._usergroups[usergroup_id] = list(users)

    def dm_channel(self, user: str) -> str:
        """The DM channel id (D…) between the bot and `user`, created on first use."""
        channel_id = "D" + user[1:]
        if channel_id not in self._channels:
            self.set_channel(channel_id, channel_id.lower(), is_im=True, user=user)
        return channel_id

    def _channel(self, channel_id: str) -> _Channel:
        # Unknown ids are created on first use so tests need not declare every channel.
        if channel_id not in self._channels:
            if channel_id.startswith("D"):
                self.set_channel(
                    channel_id, channel_id.lower(), is_im=True, user="U" + channel_id[1:]
                )
            else:
                self.set_channel(channel_id, channel_id.lower())
        return self._channels[channel_id]

    def _resolve_channel(self, channel: str | None) -> str | None:
        """Map `#name`, a user id (opens a DM) or a channel id to a channel id."""
        if not channel:
            return None
        if channel.startswith("#"):
            for ch in self._channels.values():
                if ch.name == channel[1:]:
                    return ch.id
            return None
        if channel[0] in "UW":
            return self.dm_channel(channel)
        return self._channel(channel).id

    # ------------------------------------------------------------------ fault injection

    def rate_limit(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with HTTP 429 and `Retry-After`."""
        self._faults.setdefault(method, []).append(
            _Fault(kind="rate_limit", remaining=times, retry_after=retry_after)
        )

    def fail(self, method: str, error: str = "internal_error", times: int | None = None) -> None:
        """Answer `method` with `{"ok": false, "error": error}`, `times` times (None: always)."""
        self._faults.setdefault(method, []).append(
            _Fault(kind="error", remaining=times, error=error)
        )

    def archive_channel(self, channel_id: str, archived: bool = True) -> None:
        """Archive (or unarchive) a channel: as in Slack, posting a message, an ephemeral or a
        stream in it then answers `is_archived`, and conversations.info shows it archived."""
        self._channel(channel_id).is_archived = archived

    def delay(self, method: str, seconds: float) -> None:
        """Answer `method` only after `seconds` (a slow Slack), until `clear_faults`."""
        self._delays[method] = seconds

    def hold(
        self, method: str, when: Callable[[Json], bool] = lambda params: True
    ) -> asyncio.Event:
        """Keep calls of `method` whose params match `when` waiting (recorded, neither applied
        nor answered) until the returned event is set or `clear_faults`: a moment a test can
        act in. A held call whose caller has gone by then is dropped, never applied."""
        released = asyncio.Event()
        self._holds.append((method, when, released))
        return released

    def hold_answer(
        self, method: str, when: Callable[[Json], bool] = lambda params: True
    ) -> asyncio.Event:
        """Apply calls of `method` whose params match `when` but keep their answer until the
        returned event is set or `clear_faults`: done in Slack, unknown to the caller (a
        crash then leaves it done and unrecorded)."""
        released = asyncio.Event()
        self._held_answers.append((method, when, released))
        return released

    def clear_faults(self, method: str | None = None) -> None:
        """Remove injected faults for `method`, or for every method (releasing held calls)."""
        if method is None:
            self._faults.clear()
            self._delays.clear()
            for _method, _when, released in [*self._holds, *self._held_answers]:
                released.set()
            self._holds.clear()
            self._held_answers.clear()
        else:
            self._faults.pop(method, None)

    def expire_stream(self, ts: str) -> None:
        """End the live stream at `ts` server-side: appends and stops then fail."""
        self._set_stream_state(ts, "expired")

    def stop_stream_by_user(self, ts: str) -> None:
        """Simulate the user pressing stop: further appends answer `stopped_by_user`."""
        self._set_stream_state(ts, "stopped_by_user")

    async def press_session_stop(
        self, channel: str, thread_ts: str, user: str, *, connection: int | None = None
    ) -> None:
        """`user` presses the stop button Slack shows on a processing agent session: Slack
        stops the session's live streams itself and sends `agent_session_stopped` (over the
        `connection`-th Socket Mode connection, if given)."""
        session = self.agent_sessions.get((channel, thread_ts))
        if session is None or session.status != "processing" or not self.session_stop_subscribed:
            raise AssertionError("Slack shows no stop button on this thread now")
        stopped = [
            m.ts
            for m in self.thread(channel, thread_ts)
            if m.kind == "stream" and m.streaming and m.is_bot
        ]
        for ts in stopped:
            self._set_stream_state(ts, "stopped")
        await self.deliver_event(
            {
                "type": "agent_session_stopped",
                "channel": channel,
                "thread_ts": thread_ts,
                "user": user,
                "streaming_message_ts": stopped,
                "event_ts": self._next_ts(),
            },
            connection=connection,
        )

    def session_status(self, channel: str, thread_ts: str) -> str | None:
        """The agent session's current status in the thread (None: no session)."""
        session = self.agent_sessions.get((channel, thread_ts))
        return session.status if session else None

    def _set_stream_state(self, ts: str, state: str) -> None:
        for channel_messages in self.messages.values():
            msg = channel_messages.get(ts)
            if msg is not None and msg.kind == "stream":
                msg.stream_state = state
                self._notify()
                return
        raise KeyError(f"no streamed message with ts {ts}")

    def _take_fault(self, method: str) -> _Fault | None:
        faults = self._faults.get(method)
        if not faults:
            return None
        fault = faults[0]
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining <= 0:
                faults.pop(0)
        return fault

    # ------------------------------------------------------------------ views for tests

    def calls_to(self, method: str) -> list[RecordedCall]:
        """Every recorded call of `method`, in arrival order."""
        return [c for c in self.calls if c.method == method]

    def get_message(self, channel: str, ts: str) -> Message | None:
        """The stored message at `ts` in `channel` (deleted ones included)."""
        return self.messages.get(channel, {}).get(ts)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """What a person sees in the thread: parent first, then replies, oldest first."""
        found = [
            m
            for m in self.messages.get(channel, {}).values()
            if not m.deleted and (m.ts == thread_ts or m.thread_ts == thread_ts)
        ]
        return sorted(found, key=lambda m: _ts_key(m.ts))

    def channel_messages(self, channel: str) -> list[Message]:
        """Top-level (non-reply) messages in `channel`, oldest first."""
        found = [
            m
            for m in self.messages.get(channel, {}).values()
            if not m.deleted and (m.thread_ts is None or m.thread_ts == m.ts)
        ]
        return sorted(found, key=lambda m: _ts_key(m.ts))

    def ephemerals(self, channel: str, user: str | None = None) -> list[Ephemeral]:
        """Ephemeral messages shown in `channel` (optionally to one `user`), in order."""
        return [
            e
            for e in self.ephemeral_messages
            if e.channel == channel and (user is None or e.user == user)
        ]

    def reactions(self, channel: str, ts: str) -> list[str]:
        """Reaction names on the message at `ts`, in the order they were added."""
        return [name for name, _user in self._reactions.get((channel, ts), [])]

    def status(self, channel: str, thread_ts: str) -> str:
        """The assistant thread status currently shown ("" when none)."""
        history = self.statuses.get((channel, thread_ts))
        return history[-1] if history else ""

    @property
    def connection_count(self) -> int:
        """Open Socket Mode connections."""
        return sum(1 for ws in self._sockets if not ws.closed)

    # ------------------------------------------------------------------ waiting

    def _notify(self) -> None:
        self._changed.set()

    async def wait_for(self, predicate: Callable[[SlackServer], Any], timeout: float = 10) -> Any:
        """Wait until `predicate(self)` is truthy and return its value; TimeoutError if not."""
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            value = predicate(self)
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"SlackServer: condition not met within {timeout}s")
            try:
                # Wake on any change, and re-check periodically for state kept outside the server.
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 0.05))
            except TimeoutError:
                pass

    async def wait_for_call(
        self,
        method: str,
        predicate: Callable[[RecordedCall], Any] | None = None,
        timeout: float = 10,
    ) -> RecordedCall:
        """Wait for (or find) the first recorded call of `method` matching `predicate`."""

        def match(server: SlackServer) -> RecordedCall | None:
            for call in server.calls:
                if call.method == method and (predicate is None or predicate(call)):
                    return call
            return None

        try:
            return await self.wait_for(match, timeout=timeout)
        except TimeoutError:
            seen = [c.method for c in self.calls]
            raise TimeoutError(f"no matching {method} call within {timeout}s; saw {seen}") from None

    async def wait_connected(self, timeout: float = 5, count: int = 1) -> None:
        """Wait until at least `count` Socket Mode connections are open."""
        await self.wait_for(lambda s: s.connection_count >= count, timeout=timeout)

    async def wait_ack(self, envelope_id: str, timeout: float = 5) -> Ack:
        """Wait for the app's ack of `envelope_id`; the ack carries any response payload."""
        event = self._ack_events.setdefault(envelope_id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout=timeout)
        except TimeoutError:
            raise TimeoutError(f"envelope {envelope_id} was not acked within {timeout}s") from None
        return self.acks[envelope_id]

    # ------------------------------------------------------------------ ids

    def _next_ts(self) -> str:
        """A unique, increasing Slack timestamp ("seconds.micros")."""
        now_us = int(time.time() * 1_000_000)
        self._last_ts_us = max(now_us, self._last_ts_us + 1)
        return f"{self._last_ts_us // 1_000_000}.{self._last_ts_us % 1_000_000:06d}"

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}0{next(self._ids):08d}"

    # ------------------------------------------------------------------ Web API plumbing

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.transport is not None:
            self._api_peers.add(request.transport.get_extra_info("peername"))
        params = await _read_params(request)
        token = _bearer_token(request) or params.pop("token", None)
        params.pop("token", None)
        call = RecordedCall(method=method, params=params, time=time.monotonic(), token=token)
        self.calls.append(call)
        if method in self._delays:
            self._notify()  # the call is seen while it waits
            await asyncio.sleep(self._delays[method])
        for held, when, released in list(self._holds):
            if held == method and when(params):
                self._notify()
                await released.wait()
                if request.transport is None or request.transport.is_closing():
                    # The caller died while it waited: the call never got through.
                    call.status = 499
                    return web.Response(status=499)
        response = self._dispatch(call)
        call.response = response
        self._notify()
        for held, when, released in list(self._held_answers):
            if held == method and when(params):
                await released.wait()
        headers = {"x-oauth-scopes": ",".join(self.granted_scopes)}
        if call.status == 429:
            call.retry_after = int(response.pop("_retry_after"))
            headers["Retry-After"] = str(call.retry_after)
        return web.json_response(response, status=call.status, headers=headers)

    def _dispatch(self, call: RecordedCall) -> Json:
        handler = self._handlers.get(call.method)
        if handler is None:
            return _error("unknown_method")
        auth_error = self._check_token(call)
        if auth_error:
            return _error(auth_error)
        wait = self._rate_limited(call)
        if wait is not None:
            call.status = 429
            return {"ok": False, "error": "ratelimited", "_retry_after": wait}
        fault = self._take_fault(call.method)
        if fault is not None and fault.kind == "rate_limit":
            call.status = 429
            return {"ok": False, "error": "ratelimited", "_retry_after": fault.retry_after}
        if fault is not None:
            return _error(fault.error)
        return handler(self, call)

    def _rate_limited(self, call: RecordedCall) -> int | None:
        """Retry-After seconds when the call is over its method's or its channel's limit;
        otherwise None, and the call counts against both."""
        windows: list[tuple[str, int, float]] = []
        tier = _METHOD_TIERS.get(call.method)
        if tier is not None:
            windows.append((call.method, self.limits.per_tier[tier], self.limits.window_s))
        if call.method in _HISTORY:
            windows.append((call.method, self.limits.history_calls, self.limits.window_s))
        channel = call.params.get("channel")
        if call.method in _POSTING and channel:
            posts, span = self.limits.channel_posts, self.limits.channel_window_s
            windows.append((f"post:{channel}", posts, span))
        wait = 0.0
        for key, count, span in windows:
            starts = [t for t in self._admitted.get(key, []) if t > call.time - span]
            self._admitted[key] = starts
            if len(starts) >= count:
                wait = max(wait, starts[-count] + span - call.time)
        if wait > 0:
            return max(1, math.ceil(wait))
        for key, _count, _span in windows:
            self._admitted[key].append(call.time)
        return None

    @property
    def api_connections(self) -> int:
        """TCP connections the Web API has been called over so far."""
        return len(self._api_peers)

    def _check_token(self, call: RecordedCall) -> str | None:
        if not call.token:
            return "not_authed"
        expected = BOT_TOKEN
        if call.method in self._APP_TOKEN_METHODS:
            expected = APP_TOKEN
        elif call.method in self._CONFIG_TOKEN_METHODS:
            expected = CONFIG_TOKEN
        if call.token == expected:
            return None
        if call.token in (APP_TOKEN, BOT_TOKEN, CONFIG_TOKEN):
            return "not_allowed_token_type"
        return "invalid_auth"

    def _store(self, msg: Message) -> Message:
        self.messages.setdefault(msg.channel, {})[msg.ts] = msg
        if msg.is_bot and msg.thread_ts:
            # Slack clears the assistant status once the app replies in the thread.
            self.statuses.pop((msg.channel, msg.thread_ts), None)
        self._notify()
        return msg

    def post_user_message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> Message:
        """Store a message a person wrote (the event builders call this for you)."""
        existing = self.get_message(channel, ts) if ts else None
        if existing is not None:
            return existing
        return self._store(
            Message(
                channel=channel, ts=ts or self._next_ts(), text=text, user=user, thread_ts=thread_ts
            )
        )

    # ------------------------------------------------------------------ Web API methods

    def _auth_test(self, call: RecordedCall) -> Json:
        return {
            "ok": True,
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": TEAM_NAME,
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "is_enterprise_install": False,
        }

    def _apps_manifest_export(self, call: RecordedCall) -> Json:
        """The app's configuration as it stands: the scopes granted, the events subscribed
        and whether it is declared an agent."""
        if call.params.get("app_id") != APP_ID:
            return _error("invalid_app_id")
        current = manifest("socket")
        current["oauth_config"]["scopes"]["bot"] = list(self.granted_scopes)
        events = current["settings"]["event_subscriptions"]
        if not self.session_stop_subscribed:
            events["bot_events"].remove("agent_session_stopped")
        if not self.agent_view:
            current["features"].pop("agent_view")
        return {"ok": True, "manifest": current}

    def _apps_connections_open(self, call: RecordedCall) -> Json:
        self.connections_opened += 1
        return {"ok": True, "url": f"{self.socket_url}?ticket={uuid.uuid4()}&app_id={APP_ID}"}

    def _bot_message_fields(self, p: Json) -> Json:
        return {
            "text": p.get("text") or p.get("markdown_text") or "",
            "blocks": _as_list(p.get("blocks")),
            "attachments": _as_list(p.get("attachments")),
            "metadata": p.get("metadata") if isinstance(p.get("metadata"), dict) else None,
        }

    def _chat_post_message(self, call: RecordedCall) -> Json:
        p = call.params
        channel = self._resolve_channel(p.get("channel"))
        if channel is None:
            return _error("channel_not_found")
        if self._channel(channel).is_archived:
            return _error("is_archived")
        if not (p.get("text") or p.get("blocks") or p.get("attachments") or p.get("markdown_text")):
            return _error("no_text")
        size_error = _size_error(p, _MAX_TEXT, self.max_blocks_text)
        if size_error:
            return _error(size_error)
        msg = self._store(
            Message(
                channel=channel,
                ts=self._next_ts(),
                user=BOT_USER_ID,
                bot_id=BOT_ID,
                thread_ts=p.get("thread_ts") or None,
                **self._bot_message_fields(p),
            )
        )
        return {"ok": True, "channel": channel, "ts": msg.ts, "message": msg.to_slack()}

    def _chat_update(self, call: RecordedCall) -> Json:
        p = call.params
        msg = self.get_message(str(p.get("channel")), str(p.get("ts")))
        if msg is None or msg.deleted:
            return _error("message_not_found")
        if not msg.is_bot:
            return _error("cant_update_message")
        if msg.streaming:
            return _error("streaming_state_conflict")
        size_error = _size_error(p, _MAX_UPDATE_TEXT, self.max_blocks_text)
        if size_error:
            return _error(size_error)
        if not (p.get("text") or p.get("blocks") or p.get("attachments") or p.get("markdown_text")):
            return _error("no_text")
        fields = self._bot_message_fields(p)
        msg.text = fields["text"]
        # chat.update keeps blocks/attachments unless new ones are given.
        if "blocks" in p:
            msg.blocks = fields["blocks"]
        if "attachments" in p:
            msg.attachments = fields["attachments"]
        if fields["metadata"] is not None:
            msg.metadata = fields["metadata"]
        if msg.stream_state in ("expired", "stopped_by_user"):
            msg.stream_state = "stopped"
        msg.updates += 1
        self._notify()
        return {
            "ok": True,
            "channel": msg.channel,
            "ts": msg.ts,
            "text": msg.text,
            "message": msg.to_slack(),
        }

    def _chat_delete(self, call: RecordedCall) -> Json:
        p = call.params
        msg = self.get_message(str(p.get("channel")), str(p.get("ts")))
        if msg is None or msg.deleted:
            return _error("message_not_found")
        if not msg.is_bot:
            return _error("cant_delete_message")
        msg.deleted = True
        self._notify()
        return {"ok": True, "channel": msg.channel, "ts": msg.ts}

    def _chat_post_ephemeral(self, call: RecordedCall) -> Json:
        p = call.params
        channel = self._resolve_channel(p.get("channel"))
        if channel is None:
            return _error("channel_not_found")
        if self._channel(channel).is_archived:
            return _error("is_archived")
        if not p.get("user"):
            return _error("user_not_in_channel")
        if not (p.get("text") or p.get("blocks") or p.get("attachments") or p.get("markdown_text")):
            return _error("no_text")
        size_error = _size_error(p, _MAX_TEXT, self.max_blocks_text)
        if size_error:
            return _error(size_error)
        eph = Ephemeral(
            channel=channel,
            user=str(p["user"]),
            ts=self._next_ts(),
            text=p.get("text") or p.get("markdown_text") or "",
            blocks=_as_list(p.get("blocks")),
            thread_ts=p.get("thread_ts") or None,
        )
        self.ephemeral_messages.append(eph)
        self._notify()
        return {"ok": True, "message_ts": eph.ts}

    def _apply_stream_content(self, msg: Message, p: Json) -> str | None:
        """Append `markdown_text` and `chunks` to a streamed message; an error code or None."""
        markdown = p.get("markdown_text")
        if markdown is not None and len(markdown) > _MAX_MARKDOWN:
            return "msg_too_long"
        chunks = p.get("chunks")
        if chunks is not None:
            if not isinstance(chunks, list):
                return "invalid_chunks"
            for chunk in chunks:
                if not isinstance(chunk, dict) or chunk.get("type") not in _CHUNK_TYPES:
                    return "invalid_chunks"
                if (
                    chunk["type"] == "markdown_text"
                    and len(chunk.get("text") or "") > _MAX_MARKDOWN
                ):
                    return "msg_too_long"
        added = len(markdown or "") + sum(
            len(c.get("text") or "") for c in chunks or [] if c["type"] == "markdown_text"
        )
        if len(msg.text) + added > _MAX_MARKDOWN:
            return "msg_too_long"  # one streamed message holds about 12,000 characters
        blocks = _as_list(p.get("blocks")) + [
            b for c in chunks or [] if c["type"] == "blocks" for b in _as_list(c.get("blocks"))
        ]
        blocks_error = _blocks_error(msg.blocks + blocks, self.max_blocks_text) if blocks else None
        if blocks_error:
            return blocks_error
        if markdown:
            msg.chunks.append({"type": "markdown_text", "text": markdown})
            msg.text += markdown
        for chunk in chunks or []:
            msg.chunks.append(chunk)
            if chunk["type"] == "markdown_text":
                msg.text += chunk.get("text") or ""
            elif chunk["type"] == "blocks":
                msg.blocks.extend(_as_list(chunk.get("blocks")))
        self._notify()
        return None

    def _chat_start_stream(self, call: RecordedCall) -> Json:
        p = call.params
        channel = self._resolve_channel(p.get("channel"))
        if channel is None:
            return _error("channel_not_found")
        if self._channel(channel).is_archived:
            return _error("is_archived")
        if not p.get("thread_ts"):
            return _error("invalid_arguments")
        if not self._channel(channel).is_im:
            if not p.get("recipient_user_id"):
                return _error("missing_recipient_user_id")
            if not p.get("recipient_team_id"):
                return _error("missing_recipient_team_id")
        if "is_stoppable" in p:
            return _error("invalid_arguments")  # gone: the stop button is the agent session's
        msg = Message(
            channel=channel,
            ts=self._next_ts(),
            user=BOT_USER_ID,
            bot_id=BOT_ID,
            thread_ts=str(p["thread_ts"]),
            kind="stream",
            stream_state="streaming",
            recipient_user_id=p.get("recipient_user_id"),
            recipient_team_id=p.get("recipient_team_id"),
            task_display_mode=p.get("task_display_mode"),
        )
        error = self._apply_stream_content(msg, p)
        if error:
            return _error(error)
        self._store(msg)
        return {"ok": True, "channel": channel, "ts": msg.ts}

    def _live_stream(self, p: Json) -> Message | str:
        msg = self.get_message(str(p.get("channel")), str(p.get("ts")))
        if msg is None or msg.deleted:
            return "message_not_found"
        if msg.kind != "stream" or not msg.is_bot:
            return (
                "message_not_owned_by_app" if not msg.is_bot else "message_not_in_streaming_state"
            )
        if msg.stream_state == "stopped_by_user":
            return "stopped_by_user"
        if not msg.streaming:
            return "message_not_in_streaming_state"
        return msg

    def _chat_append_stream(self, call: RecordedCall) -> Json:
        found = self._live_stream(call.params)
        if isinstance(found, str):
            return _error(found)
        error = self._apply_stream_content(found, call.params)
        if error:
            return _error(error)
        return {"ok": True, "channel": found.channel, "ts": found.ts}

    def _chat_stop_stream(self, call: RecordedCall) -> Json:
        p = call.params
        found = self._live_stream(p)
        if isinstance(found, str):
            return _error(found)
        error = self._apply_stream_content(found, p) or _blocks_error(_as_list(p.get("blocks")))
        if error:
            return _error(error)
        found.blocks.extend(_as_list(p.get("blocks")))
        if isinstance(p.get("metadata"), dict):
            found.metadata = p["metadata"]
        found.stream_state = "stopped"
        self._notify()
        return {"ok": True, "channel": found.channel, "ts": found.ts, "message": found.to_slack()}

    def _reactions_add(self, call: RecordedCall) -> Json:
        p = call.params
        channel, ts, name = str(p.get("channel")), str(p.get("timestamp")), p.get("name")
        msg = self.get_message(channel, ts)
        if msg is None or msg.deleted:
            return _error("message_not_found")
        if not name:
            return _error("invalid_name")
        reactions = self._reactions.setdefault((channel, ts), [])
        if (name, BOT_USER_ID) in reactions:
            return _error("already_reacted")
        reactions.append((name, BOT_USER_ID))
        self._notify()
        return {"ok": True}

    def _reactions_remove(self, call: RecordedCall) -> Json:
        p = call.params
        key = (str(p.get("channel")), str(p.get("timestamp")))
        reactions = self._reactions.get(key, [])
        entry = (p.get("name"), BOT_USER_ID)
        if entry not in reactions:
            return _error("no_reaction")
        reactions.remove(entry)
        self._notify()
        return {"ok": True}

    def _users_info(self, call: RecordedCall) -> Json:
        user_id = str(call.params.get("user") or "")
        if not user_id or user_id[0] not in "UW":
            return _error("user_not_found")
        if user_id not in self._users:
            self.set_user(user_id, user_id.lower())
        return {"ok": True, "user": self._users[user_id].to_slack()}

    def _conversations_info(self, call: RecordedCall) -> Json:
        channel_id = str(call.params.get("channel") or "")
        if not channel_id or channel_id[0] not in "CGD":
            return _error("channel_not_found")
        return {"ok": True, "channel": self._channel(channel_id).to_slack()}

    def _conversations_history(self, call: RecordedCall) -> Json:
        """Top-level messages newest first, within (oldest, latest], at most 15; each
        message's `metadata` only with `include_all_metadata` (as Slack does)."""
        p = call.params
        channel = self._resolve_channel(p.get("channel"))
        if channel is None:
            return _error("channel_not_found")
        oldest = _ts_key(str(p.get("oldest") or "0"))
        latest = _ts_key(str(p["latest"])) if p.get("latest") else None
        found = [
            m
            for m in reversed(self.channel_messages(channel))
            if _ts_key(m.ts) > oldest and (latest is None or _ts_key(m.ts) <= latest)
        ]
        limit = min(int(p.get("limit") or _HISTORY_MAX), _HISTORY_MAX)
        shown = []
        for message in found[:limit]:
            item = message.to_slack()
            if not _truthy(p.get("include_all_metadata")):
                item.pop("metadata", None)
            shown.append(item)
        more = len(found) > limit
        return {
            "ok": True,
            "messages": shown,
            "has_more": more,
            "pin_count": 0,
            "response_metadata": {"next_cursor": "bmV4dA==" if more else ""},
        }

    def _conversations_members(self, call: RecordedCall) -> Json:
        """Slack's paging: `limit` members a page, `next_cursor` the next page's offset."""
        channel_id = str(call.params.get("channel") or "")
        if not channel_id or channel_id[0] not in "CGD":
            return _error("channel_not_found")
        members = self._members.get(channel_id, [])
        start = int(call.params.get("cursor") or 0)
        limit = int(call.params.get("limit") or 100)
        page = members[start : start + limit]
        more = start + limit < len(members)
        cursor = str(start + limit) if more else ""
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    def _usergroups_users_list(self, call: RecordedCall) -> Json:
        group = str(call.params.get("usergroup") or "")
        if group not in self._usergroups:
            return _error("no_such_subteam")
        return {"ok": True, "users": list(self._usergroups[group])}

    def _files_get_upload_url_external(self, call: RecordedCall) -> Json:
        p = call.params
        if not p.get("filename") or p.get("length") in (None, ""):
            return _error("invalid_arguments")
        file_id = self._next_id("F")
        self.files[file_id] = UploadedFile(
            id=file_id,
            filename=str(p["filename"]),
            length=int(p["length"]),
            alt_txt=p.get("alt_txt"),
            snippet_type=p.get("snippet_type"),
        )
        return {
            "ok": True,
            "upload_url": f"{self.base_url}/upload/v1/{file_id}",
            "file_id": file_id,
        }

    def _files_complete_upload_external(self, call: RecordedCall) -> Json:
        p = call.params
        entries = p.get("files")
        if not isinstance(entries, list) or not entries:
            return _error("invalid_arguments")
        uploaded: list[UploadedFile] = []
        for entry in entries:
            f = self.files.get(str(entry.get("id")))
            if f is None or not f.uploaded:
                return _error("file_not_found")
            uploaded.append(f)
        channel = self._resolve_channel(p.get("channel_id") or p.get("channels", "").split(",")[0])
        thread_ts = p.get("thread_ts") or None
        for entry, f in zip(entries, uploaded, strict=True):
            f.title = entry.get("title") or f.filename
            f.channel = channel
            f.thread_ts = thread_ts
            f.initial_comment = p.get("initial_comment")
            f.completed = True
        if channel is not None:
            self._store(
                Message(
                    channel=channel,
                    ts=self._next_ts(),
                    user=BOT_USER_ID,
                    bot_id=BOT_ID,
                    thread_ts=thread_ts,
                    text=p.get("initial_comment") or "",
                    kind="file",
                    files=uploaded,
                )
            )
        return {"ok": True, "files": [f.to_slack() for f in uploaded]}

    def _assistant_threads_set_status(self, call: RecordedCall) -> Json:
        p = call.params
        if not p.get("channel_id") or not p.get("thread_ts") or "status" not in p:
            return _error("invalid_arguments")
        loading = p.get("loading_messages")
        if isinstance(loading, list) and len(loading) > 10:
            return _error("invalid_arguments")
        history = self.statuses.setdefault((str(p["channel_id"]), str(p["thread_ts"])), [])
        history.append(str(p["status"]))
        self._notify()
        return {"ok": True}

    def _agents_sessions_set_status(self, call: RecordedCall) -> Json:
        p = call.params
        channel, thread_ts, status = p.get("channel_id"), p.get("thread_ts"), p.get("status")
        if not channel or not thread_ts or status not in _SESSION_STATUSES:
            return _error("invalid_arguments")
        if self._resolve_channel(channel) is None:
            return _error("channel_not_found")
        title = p.get("title")
        if title is not None and (not isinstance(title, str) or len(title) > 200):
            return _error("invalid_arguments")
        key = (str(channel), str(thread_ts))
        session = self.agent_sessions.get(key)
        if session is None:
            # Title and initiator count only when the session is created.
            session = AgentSession(title=title, initiator=p.get("initiator_user_id"))
            self.agent_sessions[key] = session
        session.statuses.append(str(status))
        self._notify()
        if not self.session_stop_subscribed:
            warning = "missing_agent_session_stopped_event_subscription"
            return {"ok": True, "warning": warning, "response_metadata": {"warnings": [warning]}}
        return {"ok": True}

    def _agents_sessions_rename(self, call: RecordedCall) -> Json:
        p = call.params
        session = self.agent_sessions.get((str(p.get("channel_id")), str(p.get("thread_ts"))))
        title = p.get("title")
        if session is None:
            return _error("session_not_found")
        if not isinstance(title, str) or not title or len(title) > 200:
            return _error("invalid_arguments")
        session.title = title
        return {"ok": True}

    # ------------------------------------------------------------------ uploads and response URLs

    async def _handle_upload(self, request: web.Request) -> web.StreamResponse:
        f = self.files.get(request.match_info["file_id"])
        if f is None:
            return web.Response(status=404, text="file_not_found")
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            part = next(iter(form.values()), b"")
            data = part.file.read() if isinstance(part, web.FileField) else str(part).encode()
        else:
            data = await request.read()
        f.content = data
        f.uploaded = True
        self._notify()
        return web.Response(text=f"OK - {len(data)}")

    async def _handle_response_url(self, request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["response_id"]
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = {"text": await request.text()}
        target = self._response_targets.get(response_id)
        status = 200
        # Slack refuses an oversized message here as on chat.postMessage.
        too_long = _size_error(body, _MAX_TEXT, _MAX_BLOCKS_TEXT)
        if target is None:
            status = 404
        elif target.uses >= _RESPONSE_URL_USES:
            status = 404
        elif too_long is not None:
            status = 400
        post = ResponseUrlPost(
            response_id=response_id, body=body, time=time.monotonic(), status=status
        )
        self.response_posts.append(post)
        self._notify()
        if target is None or status != 200:
            reason = (
                "invalid_url" if target is None else too_long if status == 400 else "expired_url"
            )
            return web.Response(status=status, text=reason)
        target.uses += 1
        self._apply_response(target, body)
        self._notify()
        return web.Response(text="ok")

    def _apply_response(self, target: _ResponseTarget, body: Json) -> None:
        """What Slack does with a response_url POST: replace, delete, post or whisper."""
        original = (
            self.get_message(target.channel, target.message_ts) if target.message_ts else None
        )
        if _truthy(body.get("delete_original")):
            if original is not None:
                original.deleted = True
            return
        if _truthy(body.get("replace_original")) and original is not None:
            original.text = body.get("text") or ""
            original.blocks = _as_list(body.get("blocks"))
            original.attachments = _as_list(body.get("attachments"))
            original.updates += 1
            return
        thread_ts = body.get("thread_ts") or target.thread_ts
        if body.get("response_type") == "in_channel":
            self._store(
                Message(
                    channel=target.channel,
                    ts=self._next_ts(),
                    user=BOT_USER_ID,
                    bot_id=BOT_ID,
                    thread_ts=thread_ts,
                    text=body.get("text") or "",
                    blocks=_as_list(body.get("blocks")),
                )
            )
            return
        self.ephemeral_messages.append(
            Ephemeral(
                channel=target.channel,
                user=target.user,
                ts=self._next_ts(),
                text=body.get("text") or "",
                blocks=_as_list(body.get("blocks")),
                thread_ts=thread_ts,
                source="response_url",
            )
        )

    def _new_response_url(self, target: _ResponseTarget) -> str:
        response_id = uuid.uuid4().hex
        self._response_targets[response_id] = target
        return f"{self.base_url}/response/{response_id}"

    def responses_to(self, response_url: str) -> list[ResponseUrlPost]:
        """POSTs the app made to one `response_url`."""
        response_id = response_url.rstrip("/").rsplit("/", 1)[-1]
        return [r for r in self.response_posts if r.response_id == response_id]

    # ------------------------------------------------------------------ Socket Mode

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": self.connection_count,
                "debug_info": {
                    "host": "applink-kelpie-test",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": APP_ID},
            }
        )
        self._notify()
        try:
            async for raw in ws:
                if raw.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    message = json.loads(raw.data)
                except json.JSONDecodeError:
                    continue
                envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
                if envelope_id:
                    self.acks[envelope_id] = Ack(
                        envelope_id=envelope_id,
                        payload=message.get("payload"),
                        time=time.monotonic(),
                        raw=message,
                    )
                    self._ack_events.setdefault(envelope_id, asyncio.Event()).set()
                    self._notify()
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
            self._notify()
        return ws

    async def deliver(
        self,
        type: EnvelopeType,
        payload: Json,
        *,
        envelope_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float = 5,
        connection: int | None = None,
    ) -> str:
        """Send one envelope to one open connection (round robin, or the `connection`-th
        open one, in the order they connected: with several replicas, a test chooses which
        one gets it); return its envelope_id."""
        await self.wait_connected(timeout=timeout)
        live = [ws for ws in self._sockets if not ws.closed]
        ws = (
            live[connection]
            if connection is not None
            else live[next(self._socket_cursor) % len(live)]
        )
        envelope_id = envelope_id or str(uuid.uuid4())
        self._ack_events.setdefault(envelope_id, asyncio.Event())
        envelope: Json = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": type,
            "accepts_response_payload": type != "events_api",
        }
        if type == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason or ("timeout" if retry_attempt else "")
        self.sent_envelopes.append(envelope)
        await ws.send_json(envelope)
        return envelope_id

    async def deliver_event(
        self,
        event: Json,
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        connection: int | None = None,
    ) -> str:
        """Deliver `event` wrapped in an `event_callback` body over Socket Mode."""
        return await self.deliver(
            "events_api",
            self.event_envelope_payload(event, event_id=event_id),
            retry_attempt=retry_attempt,
            connection=connection,
        )

    async def disconnect_all(self, *, reason: str | None = None) -> None:
        """Drop every Socket Mode connection.

        With `reason` (e.g. "refresh_requested", "too_many_websockets") Slack's
        `{"type": "disconnect"}` message goes first, as Slack does before rotating a socket;
        without it the socket is simply closed.
        """
        for ws in list(self._sockets):
            if ws.closed:
                continue
            if reason is not None:
                await ws.send_json(
                    {
                        "type": "disconnect",
                        "reason": reason,
                        "debug_info": {"host": "applink-kelpie-test"},
                    }
                )
            await ws.close()
        self._notify()

    # ------------------------------------------------------------------ payload builders

    def event_envelope_payload(self, event: Json, event_id: str | None = None) -> Json:
        """The Events API `event_callback` body around `event`."""
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "context_team_id": TEAM_ID,
            "context_enterprise_id": None,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{uuid.uuid4().hex}",
        }

    def mention(
        self,
        channel: str,
        user: str,
        text: str,
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> Json:
        """An `app_mention` event (stored as the person's message); adds `<@U0KELPIE>` if absent."""
        if f"<@{BOT_USER_ID}>" not in text:
            text = f"<@{BOT_USER_ID}> {text}"
        msg = self.post_user_message(channel, user, text, ts=ts, thread_ts=thread_ts)
        event: Json = {
            "type": "app_mention",
            "user": user,
            "text": text,
            "ts": msg.ts,
            "client_msg_id": str(uuid.uuid4()),
            "team": TEAM_ID,
            "blocks": _rich_text_blocks(text),
            "channel": channel,
            "event_ts": msg.ts,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def message(
        self,
        channel: str,
        user: str,
        text: str,
        ts: str | None = None,
        thread_ts: str | None = None,
        *,
        channel_type: str | None = None,
        subtype: str | None = None,
    ) -> Json:
        """A `message` event from a person (stored as their message)."""
        msg = self.post_user_message(channel, user, text, ts=ts, thread_ts=thread_ts)
        if channel_type is None:
            channel_type = {"D": "im", "G": "group"}.get(channel[:1], "channel")
        event: Json = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": msg.ts,
            "client_msg_id": str(uuid.uuid4()),
            "team": TEAM_ID,
            "blocks": _rich_text_blocks(text),
            "channel": channel,
            "event_ts": msg.ts,
            "channel_type": channel_type,
        }
        if subtype:
            event["subtype"] = subtype
        if thread_ts:
            event["thread_ts"] = thread_ts
            parent = self.get_message(channel, thread_ts)
            if parent is not None and parent.user:
                event["parent_user_id"] = parent.user
        return event

    def bot_message(
        self,
        channel: str,
        text: str,
        *,
        bot_id: str,
        app_id: str,
        attachments: list[Json] | None = None,
        webhook: bool = True,
        username: str = "Alertmanager",
        thread_ts: str | None = None,
    ) -> Json:
        """A `message` event for another app's message (stored in the channel), as the Events
        API sends it to an app subscribed to `message.channels`: from an incoming webhook
        (`webhook`: subtype `bot_message`, a username, no user) or from a bot user's
        chat.postMessage (no subtype; its bot user and `bot_profile`)."""
        bot_user = f"U{bot_id[1:]}"
        msg = self._store(
            Message(
                channel=channel,
                ts=self._next_ts(),
                text=text,
                user=None if webhook else bot_user,
                bot_id=bot_id,
                app_id=app_id,
                subtype="bot_message" if webhook else None,
                username=username,
                thread_ts=thread_ts,
                attachments=list(attachments or []),
            )
        )
        event = msg.to_slack()
        event |= {"channel": channel, "event_ts": msg.ts, "channel_type": "channel"}
        return event

    def im_message(
        self,
        user: str,
        text: str,
        ts: str | None = None,
        thread_ts: str | None = None,
        *,
        channel: str | None = None,
    ) -> Json:
        """A `message` event in the DM between `user` and the bot (`channel_type: im`)."""
        channel = channel or self.dm_channel(user)
        return self.message(channel, user, text, ts=ts, thread_ts=thread_ts, channel_type="im")

    def block_action(
        self,
        user: str,
        channel: str,
        message_ts: str,
        action_id: str,
        value: str,
        *,
        block_id: str | None = None,
    ) -> Json:
        """A `block_actions` payload for a button click on the message at `message_ts`."""
        original = self.get_message(channel, message_ts)
        message = (
            original.to_slack()
            if original
            else {"type": "message", "ts": message_ts, "text": "", "team": TEAM_ID}
        )
        thread_ts = original.thread_ts if original else None
        element = _find_action(original.blocks if original else [], action_id)
        if block_id is None:
            block_id = element[0] if element else "actions"
        button_text = (element[1].get("text") if element else None) or {
            "type": "plain_text",
            "text": value,
            "emoji": True,
        }
        container: Json = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if thread_ts:
            container["thread_ts"] = thread_ts
        response_url = self._new_response_url(
            _ResponseTarget(channel=channel, user=user, message_ts=message_ts, thread_ts=thread_ts)
        )
        user_name = self._users[user].name if user in self._users else user.lower()
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user_name, "name": user_name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "container": container,
            "trigger_id": self._new_trigger(user),
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": self._channel(channel).name},
            "message": message,
            "state": {"values": {}},
            "response_url": response_url,
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": button_text,
                    "value": value,
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def feedback_click(self, user: str, channel: str, message_ts: str, *, positive: bool) -> Json:
        """A `block_actions` payload for a click on the 👍 (or 👎) of the feedback buttons
        in the message at `message_ts`; fails when that message shows none."""
        original = self.get_message(channel, message_ts)
        assert original is not None, f"no message {message_ts} in {channel}"
        found = _find_feedback_buttons(original.blocks)
        assert found is not None, f"message {message_ts} shows no feedback buttons"
        block_id, element = found
        button = element["positive_button" if positive else "negative_button"]
        payload = self.block_action(
            user, channel, message_ts, str(element.get("action_id") or ""), button["value"]
        )
        payload["actions"][0].update(
            {"type": "feedback_buttons", "block_id": block_id, "text": button["text"]}
        )
        return payload

    def ephemeral_click(self, ephemeral: Ephemeral, action_id: str) -> Json:
        """A `block_actions` payload for a button in an ephemeral message: Slack sends the
        container (is_ephemeral) and no `message`."""
        found = _find_action(ephemeral.blocks, action_id)
        assert found is not None, f"the ephemeral shows no {action_id} button"
        block_id, element = found
        container: Json = {
            "type": "message",
            "message_ts": ephemeral.ts,
            "channel_id": ephemeral.channel,
            "is_ephemeral": True,
        }
        if ephemeral.thread_ts:
            container["thread_ts"] = ephemeral.thread_ts
        name = self._users[ephemeral.user].name if ephemeral.user in self._users else "person"
        return {
            "type": "block_actions",
            "user": {"id": ephemeral.user, "username": name, "name": name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "container": container,
            "trigger_id": self._new_trigger(ephemeral.user),
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "channel": {"id": ephemeral.channel, "name": self._channel(ephemeral.channel).name},
            "state": {"values": {}},
            "response_url": self._new_response_url(
                _ResponseTarget(
                    channel=ephemeral.channel,
                    user=ephemeral.user,
                    message_ts=None,
                    thread_ts=ephemeral.thread_ts,
                )
            ),
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": element.get("text"),
                    "value": element.get("value", ""),
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def view_submission(self, opened: OpenedView, values: dict[str, str]) -> Json:
        """A `view_submission` payload for `opened`, its text inputs filled in: `values`
        maps each input's action_id to what the person typed."""
        state: dict[str, Json] = {}
        for block in opened.view.get("blocks") or []:
            element = block.get("element") if block.get("type") == "input" else None
            if isinstance(element, dict) and element.get("action_id") in values:
                state[str(block["block_id"])] = {
                    str(element["action_id"]): {
                        "type": element.get("type"),
                        "value": values[str(element["action_id"])],
                    }
                }
        name = self._users[opened.user].name if opened.user in self._users else "person"
        view = {
            **opened.view,
            "id": opened.id,
            "team_id": TEAM_ID,
            "app_id": APP_ID,
            "state": {"values": state},
            "hash": uuid.uuid4().hex[:16],
        }
        return {
            "type": "view_submission",
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "user": {"id": opened.user, "username": name, "name": name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "trigger_id": self._new_trigger(opened.user),
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
        }

    def _new_trigger(self, user: str) -> str:
        trigger = f"{next(self._ids)}.{TEAM_ID}.{uuid.uuid4().hex}"
        self._triggers[trigger] = user
        return trigger

    def _views_open(self, call: RecordedCall) -> Json:
        """A modal, opened once per trigger id this server handed out (Slack: a trigger id
        from an interaction, valid once, for 3 s; the fake does not time it)."""
        p = call.params
        trigger = str(p.get("trigger_id") or "")
        if trigger not in self._triggers:
            return _error("invalid_trigger_id")
        if trigger in self._used_triggers:
            return _error("exchanged_trigger_id")
        view = p.get("view")
        if not isinstance(view, dict) or _view_error(view):
            return _error("invalid_arguments")
        self._used_triggers.add(trigger)
        opened = OpenedView(
            id=self._next_id("V"), user=self._triggers[trigger], trigger_id=trigger, view=view
        )
        self.views.append(opened)
        self._notify()
        return {"ok": True, "view": {**view, "id": opened.id, "state": {"values": {}}}}

    def slash_command(self, command: str, text: str, user: str, channel: str) -> Json:
        """A slash command payload (Socket Mode dict; `post_signed` form-encodes it)."""
        response_url = self._new_response_url(
            _ResponseTarget(channel=channel, user=user, message_ts=None, thread_ts=None)
        )
        user_name = self._users[user].name if user in self._users else user.lower()
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "team_domain": TEAM_DOMAIN,
            "channel_id": channel,
            "channel_name": self._channel(channel).name,
            "user_id": user,
            "user_name": user_name,
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": f"{next(self._ids)}.{TEAM_ID}.{uuid.uuid4().hex}",
        }

    # ------------------------------------------------------------------ HTTP event delivery

    @staticmethod
    def encode_http_body(body: Json | str) -> tuple[str, str]:
        """Encode a payload as Slack sends it over HTTP: (raw body, content type).

        Interactive payloads go as a `payload=` form field, slash commands as a form,
        Events API bodies as JSON; a `str` is sent as-is (form if it looks like one).
        """
        if isinstance(body, str):
            looks_json = body.lstrip().startswith("{")
            return body, "application/json" if looks_json else "application/x-www-form-urlencoded"
        if "command" in body and "event" not in body:
            return urlencode(
                {k: str(v) for k, v in body.items()}
            ), "application/x-www-form-urlencoded"
        if body.get("type") in _INTERACTIVE_TYPES:
            return urlencode({"payload": json.dumps(body)}), "application/x-www-form-urlencoded"
        return json.dumps(body), "application/json"

    async def post_signed(
        self,
        url: str,
        body: Json | str,
        *,
        signing_secret: str | None = None,
        timestamp: int | None = None,
        content_type: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        """POST `body` to the app at `url`, signed like Slack (`v0=` HMAC-SHA256).

        `signing_secret` and `timestamp` (Unix seconds) default to the workspace secret and
        now; pass others to send a bad or stale signature.
        """
        raw, detected_type = self.encode_http_body(body)
        ts = str(int(time.time()) if timestamp is None else timestamp)
        verifier = SignatureVerifier(signing_secret or SIGNING_SECRET)
        signature = verifier.generate_signature(timestamp=ts, body=raw) or ""
        request_headers = {
            "Content-Type": content_type or detected_type,
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": signature,
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        if retry_num is not None:
            request_headers["X-Slack-Retry-Num"] = str(retry_num)
            request_headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        request_headers.update(headers or {})
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            url, data=raw.encode("utf-8"), headers=request_headers
        ) as response:
            return response.status, await response.text()


_INTERACTIVE_TYPES = frozenset(
    {
        "block_actions",
        "block_suggestion",
        "view_submission",
        "view_closed",
        "shortcut",
        "message_action",
        "interactive_message",
        "dialog_submission",
    }
)


def _error(code: str) -> Json:
    return {"ok": False, "error": code}


def _size_error(p: Json, text_limit: int, blocks_text: int) -> str | None:
    """Slack's error for a message over its size limits, or None."""
    if len(p.get("markdown_text") or "") > _MAX_MARKDOWN:
        return "msg_too_long"
    if len(str(p.get("text") or "")) > text_limit:
        return "msg_too_long"
    return _blocks_error(_as_list(p.get("blocks")), blocks_text)


def _blocks_error(blocks: list[Json], blocks_text: int = _MAX_BLOCKS_TEXT) -> str | None:
    """`invalid_blocks` for a block over its own limit (or more than 50 blocks),
    `msg_blocks_too_long` for blocks each within limits but too much text in all."""
    if len(blocks) > _MAX_BLOCKS:
        return "invalid_blocks"
    total = 0
    for block in blocks:
        if block.get("type") == "context_actions" and _context_actions_error(block):
            return "invalid_blocks"
        if _misplaced_feedback(block):
            return "invalid_blocks"
        texts = [block.get("text")] if isinstance(block.get("text"), dict) else []
        texts += [e for e in block.get("elements") or [] if isinstance(e, dict) and "text" in e]
        for item in texts:
            text = item.get("text") if isinstance(item, dict) else None
            if not isinstance(text, str):
                continue
            if block.get("type") == "section" and len(text) > _MAX_SECTION:
                return "invalid_blocks"
            total += len(text)
    return "msg_blocks_too_long" if total > blocks_text else None


def _context_actions_error(block: Json) -> str | None:
    """`invalid_blocks` for a `context_actions` block Slack would refuse: 1–5 elements, each
    `feedback_buttons` (both buttons, plain_text ≤ 75, a value ≤ 2,000) or `icon_button`."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 1 <= len(elements) <= 5:
        return "invalid_blocks"
    if len(str(block.get("block_id") or "")) > 255:
        return "invalid_blocks"
    for element in elements:
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == "icon_button":
            continue
        if kind != "feedback_buttons" or len(str(element.get("action_id") or "")) > 255:
            return "invalid_blocks"
        for side in ("positive_button", "negative_button"):
            button = element.get(side)
            if not isinstance(button, dict) or not _feedback_button_ok(button):
                return "invalid_blocks"
    return None


def _feedback_button_ok(button: Json) -> bool:
    text = button.get("text")
    value = button.get("value")
    if len(str(button.get("accessibility_label") or "")) > 75:
        return False
    return (
        isinstance(text, dict)
        and text.get("type") == "plain_text"
        and isinstance(text.get("text"), str)
        and 0 < len(text["text"]) <= 75
        and isinstance(value, str)
        and 0 < len(value) <= 2000
    )


def _misplaced_feedback(block: Json) -> bool:
    """Feedback buttons go in a context_actions block only."""
    if block.get("type") == "context_actions":
        return False
    elements = block.get("elements") if isinstance(block.get("elements"), list) else []
    accessory = block.get("accessory")
    return any(
        isinstance(e, dict) and e.get("type") == "feedback_buttons" for e in [*elements, accessory]
    )


def _view_error(view: Json) -> str | None:
    """What Slack refuses in a modal views.open is given (`invalid_arguments`), or None."""
    if view.get("type") != "modal":
        return "type"
    for key, limit in (("title", 24), ("submit", 24), ("close", 24)):
        text = view.get(key)
        if key == "title" or text is not None:
            if not isinstance(text, dict) or text.get("type") != "plain_text":
                return key
            if not 0 < len(str(text.get("text") or "")) <= limit:
                return key
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 100:
        return "blocks"
    inputs = [b for b in blocks if isinstance(b, dict) and b.get("type") == "input"]
    if inputs and view.get("submit") is None:
        return "submit"  # a modal with inputs needs a submit button
    for block in inputs:
        element = block.get("element")
        if not isinstance(element, dict) or not element.get("action_id"):
            return "element"
        if len(str((block.get("label") or {}).get("text") or "")) not in range(1, 2001):
            return "label"
    if len(str(view.get("private_metadata") or "")) > 3000:
        return "private_metadata"
    if len(str(view.get("callback_id") or "")) > 255:
        return "callback_id"
    return None


def _find_feedback_buttons(blocks: list[Json]) -> tuple[str, Json] | None:
    for block in blocks:
        if block.get("type") != "context_actions":
            continue
        for element in block.get("elements") or []:
            if isinstance(element, dict) and element.get("type") == "feedback_buttons":
                return str(block.get("block_id") or "context_actions"), element
    return None


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _as_list(value: Any) -> list[Json]:
    return list(value) if isinstance(value, list) else []


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros or 0)


def _bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


async def _read_params(request: web.Request) -> Json:
    """Merge query string, form and JSON body, decoding fields sent as JSON strings."""
    params: Json = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError:
                body = {}
            if isinstance(body, dict):
                params.update(body)
        else:
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    params[key] = value.file.read()
                elif isinstance(value, str):
                    params[key] = value
                else:
                    params[key] = bytes(value)
    for key in _JSON_STRING_FIELDS & params.keys():
        value = params[key]
        if isinstance(value, str) and value[:1] in ("[", "{"):
            try:
                params[key] = json.loads(value)
            except json.JSONDecodeError:
                pass
    return params


def _rich_text_blocks(text: str) -> list[Json]:
    """The `rich_text` block Slack attaches to a typed message, with user mentions split out."""
    elements: list[Json] = []
    pos = 0
    for match in _MENTION_RE.finditer(text):
        if match.start() > pos:
            elements.append({"type": "text", "text": text[pos : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    return [
        {
            "type": "rich_text",
            "block_id": uuid.uuid4().hex[:5],
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]


def _find_action(blocks: list[Json], action_id: str) -> tuple[str, Json] | None:
    """(block_id, element) of the interactive element with `action_id`, if present."""
    for block in blocks:
        candidates = list(block.get("elements") or [])
        if isinstance(block.get("accessory"), dict):
            candidates.append(block["accessory"])
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id") or "actions"), element
    return None
