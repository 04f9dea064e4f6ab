"""Approval cards in the thread, and the clicks on them.

A card shows what, where, the dry-run preview, the model's reason, who asked (every
requester) and when it expires, with Approve / Reject buttons whose value is only the
approval id. A click is acked at once and handed to `ApprovalService.resume`, which loads the
approval from the database (never trusting the payload) and checks the clicker against the
current approvers. Once decided, a card never shows buttons again.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.approvals.service import ApprovalService, ResumeResult
from bot.slack import copy
from bot.slack.replies import whisper
from bot.slack.safe_text import escape_mrkdwn, plain_text
from bot.values import Approval, ApprovalDecision, ApprovalState, DecisionKind

log = logging.getLogger(__name__)

APPROVE_ACTION = "kelpie_approve"
REJECT_ACTION = "kelpie_reject"

_STATE_LINE = {
    ApprovalState.PENDING: ":hourglass_flowing_sand: Waiting for approval",
    ApprovalState.APPROVED: ":white_check_mark: Approved",
    ApprovalState.REJECTED: ":no_entry: Rejected",
    ApprovalState.EXPIRED: ":alarm_clock: Expired with no decision: not executed",
    ApprovalState.CANCELLED: ":heavy_multiplication_x: Withdrawn: not executed",
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
                    "text": f"Asked by {_people(approval)} · expires "
                    f"{_when(approval.expires_at)} · approval `{approval.id[:8]}`",
                }
            ],
        }
    )
    state = _STATE_LINE[approval.status]
    decided = (ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.CANCELLED)
    if approval.status in decided and approval.decided_by:
        state += f" by <@{approval.decided_by}>"
        if approval.decided_at:
            state += f" at {_when(approval.decided_at)}"
    if approval.outcome:
        state += f"\n*Outcome:* {escape_mrkdwn(approval.outcome)}"
    if note:
        state += f"\n{escape_mrkdwn(note)}"  # may quote a hook's or the firewall's reason
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


def _people(approval: Approval) -> str:
    people = approval.requesters or (approval.requested_by,)
    return ", ".join(f"<@{user}>" for user in people)


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

    async def tell(self, approval: Approval, text: str) -> None:
        # The sentence quotes the plan and outcome (cluster and model text): never markup.
        await self._client.chat_postMessage(
            channel=approval.channel_id, thread_ts=approval.thread_ts, text=escape_mrkdwn(text)
        )


class ApprovalClicks:
    """The Approve / Reject listeners: one `resume` per click; the service decides once."""

    def __init__(self, app: AsyncApp, service: ApprovalService) -> None:
        self._app = app
        self._service = service

    def register(self) -> None:
        self._app.action(APPROVE_ACTION)(self._on_approve)
        self._app.action(REJECT_ACTION)(self._on_reject)

    async def _on_approve(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._click(body, DecisionKind.APPROVE)

    async def _on_reject(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._click(body, DecisionKind.REJECT)

    async def _click(self, body: dict[str, Any], kind: DecisionKind) -> None:
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id")
        actions = body.get("actions") or [{}]
        approval_id = actions[0].get("value")
        if not (
            isinstance(user, str) and isinstance(channel, str) and isinstance(approval_id, str)
        ):
            log.warning("ignoring a malformed approval click")
            return
        decision = ApprovalDecision(kind, user, channel)
        resumed = await self._service.resume(approval_id, decision)
        approval = resumed.approval
        if approval is None:
            log.warning("click on unknown approval %s by %s", approval_id, user)
            await whisper(self._app.client, channel, user, copy.APPROVAL_UNKNOWN)
            return
        if resumed.result is ResumeResult.NOT_ALLOWED:
            log.info("user %s may not decide approval %s", user, approval.id)
            await whisper(self._app.client, channel, user, resumed.why, approval.thread_ts)
        elif resumed.result is ResumeResult.ALREADY_DECIDED:
            text = copy.approval_already(str(approval.status))
            await whisper(self._app.client, channel, user, text, approval.thread_ts)
