"""Ephemeral replies: the one sentence only the person who clicked or typed should see."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)


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
