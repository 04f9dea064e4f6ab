"""Short replies outside a turn: ephemeral ones (what only the person who clicked or typed
should see) and one sentence in a thread."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.markdown import split_text
from bot.slack.progress.common import SLACK_FAILURES

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


async def say(client: AsyncWebClient, channel: str, thread_ts: str, text: str) -> None:
    """Post one sentence in a thread; a failure is logged, never raised (the click or
    event that led to it was acked, and what it changed is stored)."""
    try:
        await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text)
    except SLACK_FAILURES as error:
        log.warning("reply in %s failed: %s", channel, error)


class CommandReply:
    """A slash command's reply, split like answers (at paragraphs, code blocks re-fenced in
    each piece): the first pieces through the command's response_url (it works where kelpie
    is no member; Slack takes five posts on one), over the Web API client's kept-alive
    session, and any beyond its five uses, or one it refuses, as ephemeral messages."""

    def __init__(self, response_url: str, client: AsyncWebClient, channel: str, user: str) -> None:
        self._webhook = AsyncWebhookClient(response_url, session=client.session)
        self._client = client
        self._channel = channel
        self._user = user

    async def send(self, text: str) -> None:
        for index, piece in enumerate(split_text(text, REPLY_PIECE_CHARS)):
            if index < RESPONSE_URL_USES and await self._respond(piece):
                continue
            await whisper(self._client, self._channel, self._user, piece)

    async def _respond(self, piece: str) -> bool:
        try:
            sent = await self._webhook.send(text=piece, response_type="ephemeral")
        except SLACK_FAILURES as error:
            log.warning("response_url post failed (%s); replying ephemerally", error)
            return False
        if sent.status_code != 200:
            log.warning("response_url refused a reply (%s %s)", sent.status_code, sent.body)
        return sent.status_code == 200
