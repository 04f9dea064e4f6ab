"""Ephemeral replies: what only the person who clicked or typed should see."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.markdown import split_text

log = logging.getLogger(__name__)

# A reply's pieces: like an answer's messages, well under Slack's limits.
REPLY_PIECE_CHARS = 11_000
# Slack takes five posts on one response_url.
RESPONSE_URL_USES = 5


async def whisper(
    client: AsyncWebClient, channel: str, user: str, text: str, thread_ts: str | None = None
) -> None:
    """Post an ephemeral message; a failure is logged, never raised (the click was acked)."""
    if not channel or not user:
        return
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
    except SlackApiError as error:
        log.warning("ephemeral reply to %s failed: %s", user, error.response.get("error"))


class CommandReply:
    """A slash command's reply, split like answers (at paragraphs, code blocks re-fenced in
    each piece): the first pieces through the command's `respond` (its response_url, which
    works where kelpie is no member), any beyond its five uses as ephemeral messages."""

    def __init__(
        self,
        respond: Callable[..., Awaitable[Any]],
        client: AsyncWebClient,
        channel: str,
        user: str,
    ) -> None:
        self._respond = respond
        self._client = client
        self._channel = channel
        self._user = user

    async def send(self, text: str) -> None:
        for index, piece in enumerate(split_text(text, REPLY_PIECE_CHARS)):
            if index < RESPONSE_URL_USES:
                await self._respond(response_type="ephemeral", text=piece)
            else:
                await whisper(self._client, self._channel, self._user, piece)
