"""Who may approve writes (and stop turns) in a channel: users and Slack user groups.

User group members are resolved with usergroups.users.list at each check (a click, a
`/kelpie payload`), so leaving a group takes effect at once.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ApprovalConfig

log = logging.getLogger(__name__)


class ApproverDirectory:
    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def group_members(self, usergroup: str) -> frozenset[str]:
        # Asked at every click, never cached: someone who just left the group must not
        # approve on the strength of a membership list from minutes ago.
        try:
            response = await self._client.usergroups_users_list(usergroup=usergroup)
        except SlackApiError as error:
            # Fail closed: an unresolvable group approves nobody.
            log.warning(
                "usergroups.users.list %s failed: %s", usergroup, error.response.get("error")
            )
            return frozenset()
        return frozenset(response.get("users") or [])

    async def is_approver(self, user: str, approval: ApprovalConfig) -> bool:
        if user in approval.approvers.users:
            return True
        for group in approval.approvers.usergroups:
            if user in await self.group_members(group):
                return True
        return False

    def describe(self, approval: ApprovalConfig) -> str:
        return describe_approvers(approval)


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
