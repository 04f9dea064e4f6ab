"""The Slack Web API client every part of kelpie posts through: the masking step in front
of Slack, and no link previews.

Every Web API call's arguments are masked (`bot.model.outbound`) before they leave, file
contents too (`files_upload_v2`: `show_logs`, `/kelpie payload`), so a secret that reached
a message or an upload by any path is still caught at the door. Posts never unfurl: a link
in text from the model or the cluster must not fetch or show a preview.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.model.outbound import mask_value_async

log = logging.getLogger(__name__)

# Methods that post a message and would otherwise unfurl its links.
_POSTS = {"chat.postMessage", "chat.scheduleMessage", "chat.postEphemeral"}
# Arguments that are credentials of the call itself, not content: never rewritten.
_CALL_CREDENTIALS = {"token"}


class SafeWebClient(AsyncWebClient):
    async def api_call(
        self,
        api_method: str,
        *,
        json: dict[str, Any] | None = None,
        data: Any = None,
        params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        json, data, params = await _masked(json), await _masked(data), await _masked(params)
        if api_method in _POSTS:
            body = json if json is not None else data if isinstance(data, dict) else params
            if body is not None:
                body.setdefault("unfurl_links", False)
                body.setdefault("unfurl_media", False)
        return await super().api_call(api_method, json=json, data=data, params=params, **kwargs)

    async def files_upload_v2(self, **kwargs: Any) -> AsyncSlackResponse:
        for key in ("content", "title", "initial_comment"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = (await mask_value_async(kwargs[key]))[0]
        if isinstance(kwargs.get("file_uploads"), list):
            kwargs["file_uploads"] = (await mask_value_async(kwargs["file_uploads"]))[0]
        return await super().files_upload_v2(**kwargs)


async def _masked(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    content = {k: v for k, v in part.items() if k not in _CALL_CREDENTIALS}
    masked, found = await mask_value_async(content)
    if found:
        log.info("masked %d secret(s) in a Slack call", len(found))
    return {**part, **masked}
