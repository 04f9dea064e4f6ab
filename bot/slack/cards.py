"""Approval cards in the thread, and the clicks on them.

A card shows what, where, the dry-run preview, the model's reason, who asked and when it
expires, with Approve / Reject buttons whose value is only the approval id. A click is
acked at once; the approval is then loaded from the database (never trusted from the
payload) and the clicker checked against the role's approvers.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.approvals.model import Approval, ApprovalState, ApprovalStore
from bot.approvals.service import ApprovalService, DecideResult
from bot.config import Config
from bot.slack.people import ApproverDirectory, describe_approvers
from bot.slack.replies import whisper
from bot.slack.safe_text import escape_mrkdwn, plain_text

log = logging.getLogger(__name__)

APPROVE_ACTION = "kelpie_approve"
REJECT_ACTION = "kelpie_reject"

_STATE_LINE = {
    ApprovalState.PENDING: ":hourglass_flowing_sand: Waiting for approval",
    ApprovalState.APPROVED: ":white_check_mark: Approved",
    ApprovalState.REJECTED: ":no_entry: Rejected",
    ApprovalState.EXPIRED: ":alarm_clock: Expired with no decision: not executed",
    ApprovalState.CANCELLED: (
        ":heavy_multiplication_x: Cancelled: the turn was interrupted, not executed"
    ),
}


def _when(moment: Any) -> str:
    epoch = int(moment.timestamp())
    return f"<!date^{epoch}^{{date_short_pretty}} {{time}}|{moment.isoformat(timespec='seconds')}>"


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _plain_block(text: str) -> dict[str, Any]:
    """Text from the model or the cluster: shown literally, never as markup."""
    return {"type": "section", "text": plain_text(text)}


def card_blocks(approval: Approval, note: str = "") -> list[dict[str, Any]]:
    plan = approval.plan
    target = plan.target
    where = escape_mrkdwn(
        f"cluster `{plan.cluster}` · {target.kind} `{target.namespace or '-'}/{target.name}`"
    )
    preview = "\n".join(change.render() for change in plan.changes) or "(no field changes)"
    blocks: list[dict[str, Any]] = [
        _text_block(f"*Approval needed:* {escape_mrkdwn(plan.description)}"),
        _text_block(f"*Where:* {where}\n*Tool:* `{escape_mrkdwn(plan.tool)}`"),
        _text_block("*Preview (server-side dry run):*"),
        _plain_block(preview),
    ]
    if approval.reason:
        blocks.append(_plain_block(f"Reason given by the model: {approval.reason}"))
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"Asked by <@{approval.requested_by}> · expires "
                    f"{_when(approval.expires_at)} · approval `{approval.id[:8]}`",
                }
            ],
        }
    )
    state = _STATE_LINE[approval.status]
    if approval.status in (ApprovalState.APPROVED, ApprovalState.REJECTED) and approval.decided_by:
        state += f" by <@{approval.decided_by}>"
        if approval.decided_at:
            state += f" at {_when(approval.decided_at)}"
    if approval.outcome:
        state += f"\n*Outcome:* {escape_mrkdwn(approval.outcome)}"
    if note:
        state += f"\n{note}"
    blocks.append(_text_block(state))
    if approval.status is ApprovalState.PENDING:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"approval:{approval.id}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_ACTION,
                        "text": {"type": "plain_text", "text": "Approve"},
                        "style": "primary",
                        "value": approval.id,
                    },
                    {
                        "type": "button",
                        "action_id": REJECT_ACTION,
                        "text": {"type": "plain_text", "text": "Reject"},
                        "style": "danger",
                        "value": approval.id,
                    },
                ],
            }
        )
    return blocks


def _fallback_text(approval: Approval) -> str:
    return escape_mrkdwn(f"Approval {approval.status}: {approval.plan.description}")


class SlackApprovalCards:
    """ApprovalCards port on Slack messages."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def post(self, approval: Approval) -> str:
        response = await self._client.chat_postMessage(
            channel=approval.channel_id,
            thread_ts=approval.thread_ts,
            text=_fallback_text(approval),
            blocks=card_blocks(approval),
        )
        return str(response["ts"])

    async def update(self, approval: Approval, note: str = "") -> None:
        if approval.card_ts is None:
            return
        await self._client.chat_update(
            channel=approval.channel_id,
            ts=approval.card_ts,
            text=_fallback_text(approval),
            blocks=card_blocks(approval, note),
        )


class ApprovalClicks:
    """The Approve / Reject listeners."""

    def __init__(
        self,
        app: AsyncApp,
        config: Config,
        service: ApprovalService,
        store: ApprovalStore,
        approvers: ApproverDirectory,
    ) -> None:
        self._app = app
        self._config = config
        self._service = service
        self._store = store
        self._approvers = approvers

    def register(self) -> None:
        self._app.action(APPROVE_ACTION)(self._on_approve)
        self._app.action(REJECT_ACTION)(self._on_reject)

    async def _on_approve(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._click(body, approve=True)

    async def _on_reject(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._click(body, approve=False)

    async def _click(self, body: dict[str, Any], *, approve: bool) -> None:
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id")
        actions = body.get("actions") or [{}]
        approval_id = actions[0].get("value")
        if not (
            isinstance(user, str) and isinstance(channel, str) and isinstance(approval_id, str)
        ):
            log.warning("ignoring a malformed approval click")
            return
        approval = await self._store.get(approval_id)
        if approval is None or approval.channel_id != channel:
            log.warning("click on unknown approval %s by %s", approval_id, user)
            await whisper(
                self._app.client, channel, user, "This approval does not exist (any more)."
            )
            return
        role = self._config.roles.get(approval.role)
        if role is None or not await self._approvers.may_approve(
            user, role.approval, approval.requested_by
        ):
            who = describe_approvers(role.approval) if role else "nobody"
            log.info("user %s may not decide approval %s", user, approval.id)
            text = f"You may not decide this change. Who can: {who}."
            await whisper(self._app.client, channel, user, text, approval.thread_ts)
            return
        decided = await self._service.decide(approval.id, user, approve)
        if decided.result is DecideResult.ALREADY_DECIDED and decided.approval is not None:
            await whisper(
                self._app.client,
                channel,
                user,
                f"This approval is already {decided.approval.status}; nothing changed.",
                approval.thread_ts,
            )
