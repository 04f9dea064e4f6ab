"""Who may approve writes (and stop turns) in a channel: users and Slack user groups.

User group members come from usergroups.users.list, kept for a short while (`ttl_s`) so
that a crowd of clicks does not queue one lookup each behind Slack's rate limit (Tier 2,
20 a minute) and hold up a real approver's click. Only a "no" is answered from what was
kept: someone the kept list names is asked about again at once (one lookup, shared by the
clicks that wait for it), so leaving a group still takes effect at the next click, and
joining one within `ttl_s`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ApprovalConfig

log = logging.getLogger(__name__)

# How long a group's member list answers "not a member" without asking Slack again.
MEMBERS_TTL_S = 30.0


class ApproverDirectory:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl_s: float = MEMBERS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._clock = clock
        self._kept: dict[str, tuple[float, frozenset[str]]] = {}
        self._asking: dict[str, asyncio.Task[frozenset[str]]] = {}

    async def group_members(self, usergroup: str) -> frozenset[str]:
        """The group's members as Slack says now (a lookup already under way is shared)."""
        asking = self._asking.get(usergroup)
        if asking is None:
            asking = asyncio.create_task(self._ask(usergroup))
            self._asking[usergroup] = asking
            asking.add_done_callback(lambda _: self._asking.pop(usergroup, None))
        # Shielded: one click that goes away does not cancel the others' lookup.
        return await asyncio.shield(asking)

    async def _ask(self, usergroup: str) -> frozenset[str]:
        try:
            response = await self._client.usergroups_users_list(usergroup=usergroup)
        except SlackApiError as error:
            # Fail closed: an unresolvable group approves nobody (kept too: a crowd of
            # clicks on a broken group does not ask Slack once each).
            log.warning(
                "usergroups.users.list %s failed: %s", usergroup, error.response.get("error")
            )
            members: frozenset[str] = frozenset()
        else:
            members = frozenset(response.get("users") or [])
        self._kept[usergroup] = (self._clock(), members)
        return members

    def _kept_members(self, usergroup: str) -> frozenset[str] | None:
        kept = self._kept.get(usergroup)
        if kept is None or self._clock() - kept[0] >= self._ttl_s:
            return None
        return kept[1]

    async def in_group(self, user: str, usergroup: str) -> bool:
        kept = self._kept_members(usergroup)
        if kept is not None and user not in kept:
            return False  # no lookup waited on: a crowd of non-members is answered at once
        return user in await self.group_members(usergroup)

    async def is_approver(self, user: str, approval: ApprovalConfig) -> bool:
        if user in approval.approvers.users:
            return True
        for group in approval.approvers.usergroups:
            if await self.in_group(user, group):
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
