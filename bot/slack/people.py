"""Who may approve writes (and stop turns) in a channel: users and Slack user groups.

User group members are resolved with usergroups.users.list and cached briefly, so a change
in a group is picked up within minutes without a call per click.
"""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ApprovalConfig

log = logging.getLogger(__name__)


class ApproverDirectory:
    def __init__(self, client: AsyncWebClient, ttl_s: float = 120.0) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def group_members(self, usergroup: str) -> frozenset[str]:
        cached = self._groups.get(usergroup)
        if cached is not None and time.monotonic() - cached[0] < self._ttl_s:
            return cached[1]
        try:
            response = await self._client.usergroups_users_list(usergroup=usergroup)
            members = frozenset(response.get("users") or [])
        except SlackApiError as error:
            # Fail closed: an unresolvable group approves nobody (not cached, so it retries).
            log.warning(
                "usergroups.users.list %s failed: %s", usergroup, error.response.get("error")
            )
            return frozenset()
        self._groups[usergroup] = (time.monotonic(), members)
        return members

    async def is_approver(self, user: str, approval: ApprovalConfig) -> bool:
        if user in approval.approvers.users:
            return True
        for group in approval.approvers.usergroups:
            if user in await self.group_members(group):
                return True
        return False

    async def may_approve(self, user: str, approval: ApprovalConfig, requester: str) -> bool:
        """An approver, and not the requester unless the role allows four-eyes exceptions."""
        if user == requester and not approval.allow_requester:
            return False
        return await self.is_approver(user, approval)


def approver_mentions(approval: ApprovalConfig) -> list[str]:
    """Slack mentions of the configured approvers, e.g. ["<@U1>", "<!subteam^S2>"]."""
    names = [f"<@{user}>" for user in approval.approvers.users]
    names += [f"<!subteam^{group}>" for group in approval.approvers.usergroups]
    return names


def describe_approvers(approval: ApprovalConfig) -> str:
    """Who may approve, in one phrase: "<@U1>, <!subteam^S2> (not the person who asked)"."""
    names = approver_mentions(approval)
    if not names:
        return "nobody (no approvers are configured for this channel's role)"
    text = ", ".join(names)
    if not approval.allow_requester:
        text += " (not the person who asked)"
    return text
