"""Puts long mrkdwn into a thread in messages (or a file) Slack accepts."""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import copy
from bot.slack.markdown import (
    MAX_BLOCKS,
    split_text,
)
from bot.slack.progress.common import (
    ANSWER_FILE_CHARS,
    MIN_PART_CHARS,
    POST_TEXT_LIMIT,
    SIZE_REFUSALS,
    SLACK_FAILURES,
    SUMMARY_CHARS,
    UPDATE_TEXT_LIMIT,
    Json,
    error_code,
)
from bot.slack.progress.render import answer_messages, footer_blocks, truncate

log = logging.getLogger(__name__)


class ThreadWriter:
    """Puts mrkdwn into a thread in messages Slack accepts: sections of ≤ 3,000 characters,
    ≤ 50 blocks and ≤ 11,500 characters a message, cut at paragraph and code-block
    boundaries. A part Slack still refuses for its size is retried in halves, then as plain
    text; an answer too long for messages goes up as a file with a short summary."""

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        *,
        filename: str = copy.ANSWER_FILE_NAME,
        title: str = copy.ANSWER_FILE_TITLE,
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._filename = filename
        self._title = title

    async def post(
        self, mrkdwn: str, markdown: str | None = None, extra_blocks: list[Json] | None = None
    ) -> None:
        if len(mrkdwn) > ANSWER_FILE_CHARS and await self._upload(mrkdwn, markdown or mrkdwn):
            mrkdwn = summary(mrkdwn, self._title)
        messages = answer_messages(mrkdwn)
        extra = extra_blocks or []
        if extra and len(messages[-1][1]) + len(extra) > MAX_BLOCKS:
            # No room in the last part: the buttons come in a message of their own.
            messages.append((copy.ANSWER_ACTIONS, []))
        for index, (text, blocks) in enumerate(messages):
            last = index == len(messages) - 1
            await self._post_part(text, blocks + extra if last else blocks)

    async def replace(self, ts: str, mrkdwn: str, extra_blocks: list[Json]) -> bool:
        """Make the message at `ts` show `mrkdwn` (and the rest in messages below it)."""
        (text, blocks), *rest = answer_messages(mrkdwn)
        blocks = blocks if rest else blocks + extra_blocks
        try:
            await self._client.chat_update(
                channel=self._channel,
                ts=ts,
                text=truncate(text, UPDATE_TEXT_LIMIT),
                blocks=blocks or footer_blocks(copy.CONTINUED_BELOW),
            )
        except SLACK_FAILURES as error:
            log.warning("could not finish the message %s: %s", ts, error_code(error))
            return False
        for index, (more_text, more_blocks) in enumerate(rest):
            last = index == len(rest) - 1
            await self._post_part(more_text, more_blocks + extra_blocks if last else more_blocks)
        return True

    async def _post_part(self, text: str, blocks: list[Json]) -> None:
        try:
            await self._client.chat_postMessage(
                channel=self._channel,
                thread_ts=self._thread_ts,
                text=truncate(text, POST_TEXT_LIMIT),
                blocks=blocks,
            )
            return
        except SLACK_FAILURES as error:
            code = error_code(error)
            if code not in SIZE_REFUSALS:
                log.error("could not post part of the answer: %s", code)
                return
            log.warning("Slack refused a %d-character part (%s); retrying smaller", len(text), code)
        if len(text) > MIN_PART_CHARS:
            for half in split_text(text, len(text) // 2 + 1):
                for part_text, part_blocks in answer_messages(half):
                    await self._post_part(part_text, part_blocks)
            return
        try:
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=text
            )
        except SLACK_FAILURES as error:
            log.error("could not post part of the answer, even as text: %s", error_code(error))

    async def _upload(self, mrkdwn: str, markdown: str) -> bool:
        try:
            await self._client.files_upload_v2(
                channel=self._channel,
                thread_ts=self._thread_ts,
                content=markdown,
                filename=self._filename,
                title=self._title,
            )
        except SLACK_FAILURES as error:
            log.warning("could not upload the long answer (%s); posting it", error_code(error))
            return False
        return True


def summary(mrkdwn: str, title: str = copy.ANSWER_FILE_TITLE) -> str:
    """The opening of a long text (whole paragraphs where they fit) and where the rest is."""
    opening = split_text(mrkdwn, SUMMARY_CHARS)[0]
    return f"{opening}\n\n{copy.in_file(title, len(mrkdwn))}"
