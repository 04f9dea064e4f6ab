"""Approval cards in the thread, and the clicks on them.

A card shows what, where, the dry-run preview, the model's reason, who asked (every
requester) and when it expires, with Approve / Reject buttons whose value is only the
approval id. A click is acked at once and handed to `ApprovalService.resume`, which loads the
approval from the database (never trusting the payload) and checks the clicker against the
current approvers. Once decided, a card never shows buttons again.

What did not come from kelpie (the model's reason, the preview's values and names read
from the cluster, an outcome quoting the API server) is quoted data, never markup: escaped,
inside code nothing in it can end (`safe_text.quoted`), on one line where it sits among
kelpie's words; a newline and a bold "Pre-approved" in a reason stay inside its block.

Nothing on a card is cut: text longer than a section goes in several, and a preview and
reason too long for one message (Slack refuses ~12,000 characters of blocks) are posted in
full just above the card (as messages, or a file past that), the card showing their opening
and saying where the rest is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.approvals.service import ApprovalService, ResumeResult
from bot.errors import Undeliverable
from bot.slack import copy
from bot.slack.inbox import REPLAYED, Handled, marking_handled
from bot.slack.markdown import SECTION_LIMIT, split_text
from bot.slack.progress.writer import ThreadWriter
from bot.slack.replies import whisper
from bot.slack.safe_text import escape_mrkdwn, one_line, quoted, quoted_inline
from bot.values import Approval, ApprovalDecision, ApprovalState, DecisionKind, shown_person

log = logging.getLogger(__name__)

APPROVE_ACTION = "kelpie_approve"
REJECT_ACTION = "kelpie_reject"
# Preview and reason on the card itself; the rest of the card stays well under Slack's
# ~12,000 characters of blocks a message. Longer ones go in full above the card.
CARD_DETAILS_CHARS = 8_000
OPENING_CHARS = 1_500

# Slack's refusals no retry changes: the channel archived, deleted or without the app, posting
# restricted there, the app's token revoked or its account deactivated. Rate limits, 5xx and
# timeouts are not among them: a later try gets through.
REFUSED_FOR_GOOD = frozenset(
    {
        "is_archived",
        "channel_not_found",
        "not_in_channel",
        "restricted_action",
        "restricted_action_read_only_channel",
        "account_inactive",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
    }
)

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


def _text_blocks(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}}
        for part in split_text(text, SECTION_LIMIT)
    ]


REASON_LABEL = "*Reason given by the model:*"
NOTES_LABEL = ":warning: *Read before approving:*"


def _details(approval: Approval) -> list[str]:
    """The preview, what the approver must know about it (a GitOps controller that may
    revert it), and the model's reason if it gave one, as kelpie shows them: labels of its
    own, and the untrusted text (model, cluster values) as quoted data under each."""
    changes = "\n".join(change.render() for change in approval.plan.changes)
    details = [quoted(changes or "(no field changes)")]
    if approval.plan.notes:
        details += [NOTES_LABEL, quoted("\n".join(approval.plan.notes))]
    if approval.reason:
        details += [REASON_LABEL, quoted(approval.reason)]
    return details


def details_fit(approval: Approval) -> bool:
    # Measured as sent: escaping makes a text up to five times longer.
    return sum(len(text) for text in _details(approval)) <= CARD_DETAILS_CHARS


def details_mrkdwn(approval: Approval) -> str:
    """The whole preview and reason for the thread, quoted as on the card."""
    title = f"*{copy.card_details_title(approval.id[:8])} ({approval.plan.preview}):*"
    return "\n\n".join([title, *_details(approval)])


def _detail_blocks(approval: Approval) -> list[dict[str, Any]]:
    details = _details(approval)
    if details_fit(approval):
        return [block for text in details for block in _text_blocks(text)]
    opening = split_text(details[0], OPENING_CHARS)[0]  # a quoted block too
    chars = sum(len(text) for text in details)
    return _text_blocks(f"{opening}\n\n{copy.card_details_above(chars)}")


def card_blocks(approval: Approval, note: str = "") -> list[dict[str, Any]]:
    plan = approval.plan
    target = plan.target
    # Names come from the cluster or the model: each a code span on one line.
    name = f"{target.namespace or '-'}/{target.name}"
    where = f"cluster {quoted_inline(plan.cluster)} · {one_line(target.kind)} {quoted_inline(name)}"
    blocks: list[dict[str, Any]] = [
        *_text_blocks(f"*Approval needed:* {one_line(plan.description)}"),
        *_text_blocks(f"*Where:* {where}\n*Tool:* {quoted_inline(plan.tool)}"),
        *_text_blocks(f"*Preview ({plan.preview}):*"),
        *_detail_blocks(approval),
    ]
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
        # It may quote the API server (a webhook's message is cluster text).
        state += f"\n*Outcome:* {quoted_inline(approval.outcome)}"
    if note:
        state += f"\n{one_line(note)}"  # may quote a hook's or the firewall's reason
    blocks.extend(_text_blocks(state))
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
    return ", ".join(shown_person(user) for user in people)


def _fallback_text(approval: Approval) -> str:
    return one_line(f"Approval {approval.status}: {approval.plan.description}")


@asynccontextmanager
async def refusing_for_good() -> AsyncIterator[None]:
    """Slack's refusal for good of a post raised as `Undeliverable`, which the approval flow
    does not retry (any other failure raises as it came: a later try may get through)."""
    try:
        yield
    except SlackApiError as error:
        code = str(error.response.get("error") or "")
        if code in REFUSED_FOR_GOOD:
            raise Undeliverable(code) from error
        raise


class SlackApprovalCards:
    """ApprovalCards port on Slack messages. A post Slack refuses for good (the channel
    archived, say) raises `Undeliverable`."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def post(self, approval: Approval) -> str:
        if not details_fit(approval):
            writer = ThreadWriter(
                self._client,
                approval.channel_id,
                approval.thread_ts,
                filename=f"approval-{approval.id[:8]}-preview.txt",
                title=copy.card_details_title(approval.id[:8]),
            )
            await writer.post(details_mrkdwn(approval))
        async with refusing_for_good():
            response = await self._client.chat_postMessage(
                channel=approval.channel_id,
                # No thread (an MCP client's change): the card is a message of its own.
                thread_ts=approval.thread_ts or None,
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

    async def tell(self, approval: Approval, text: str) -> str | None:
        # The sentence quotes the plan and outcome (cluster and model text): never markup.
        async with refusing_for_good():
            response = await self._client.chat_postMessage(
                channel=approval.channel_id,
                thread_ts=approval.thread_ts or approval.card_ts,  # no thread: the card's own
                text=escape_mrkdwn(text),
            )
        ts = response.get("ts")
        return ts if isinstance(ts, str) else None


def _clicked_card(body: dict[str, Any], approval_id: str) -> str | None:
    """The clicked message's ts, when the click came from this approval's buttons."""
    container = body.get("container")
    actions = body.get("actions")
    if not (isinstance(container, dict) and isinstance(actions, list) and actions):
        return None
    ts = container.get("message_ts")
    block = actions[0].get("block_id") if isinstance(actions[0], dict) else None
    return ts if isinstance(ts, str) and block == f"approval:{approval_id}" else None


class ApprovalClicks:
    """The Approve / Reject listeners: one `resume` per click; the service decides once.

    A click is handled once `resume` returned: a click whose replica died before that is
    dispatched again by another one (`REPLAYED`) and goes through `resume` like any click,
    so a card decided meanwhile is not decided twice, and one expired meanwhile expires.
    Nothing depends on the click's response_url or trigger_id, which may be stale by then."""

    def __init__(self, app: AsyncApp, service: ApprovalService, handled: Handled) -> None:
        self._app = app
        self._service = service
        self._handled = handled

    def register(self) -> None:
        self._app.action(APPROVE_ACTION)(marking_handled(self._handled, self._on_approve))
        self._app.action(REJECT_ACTION)(marking_handled(self._handled, self._on_reject))

    async def _on_approve(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        await self._click(body, DecisionKind.APPROVE, replayed=bool(context.get(REPLAYED)))

    async def _on_reject(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        await self._click(body, DecisionKind.REJECT, replayed=bool(context.get(REPLAYED)))

    async def _click(self, body: dict[str, Any], kind: DecisionKind, *, replayed: bool) -> None:
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id")
        actions = body.get("actions") or [{}]
        approval_id = actions[0].get("value")
        if not (
            isinstance(user, str) and isinstance(channel, str) and isinstance(approval_id, str)
        ):
            log.warning("ignoring a malformed approval click")
            return
        decision = ApprovalDecision(kind, user, channel, card_ts=_clicked_card(body, approval_id))
        resumed = await self._service.resume(approval_id, decision)
        approval = resumed.approval
        if approval is None:
            log.warning("click on unknown approval %s by %s", approval_id, user)
            await whisper(self._app.client, channel, user, copy.APPROVAL_UNKNOWN)
            return
        if resumed.result is ResumeResult.NOT_ALLOWED:
            log.info("user %s may not decide approval %s", user, approval.id)
            await whisper(self._app.client, channel, user, resumed.why, approval.thread_ts or None)
        elif resumed.result is ResumeResult.ALREADY_DECIDED:
            if replayed and approval.decided_by == user:
                # Its own decision, claimed before the crash: "already decided" would mislead,
                # and the card may not show the outcome yet.
                await self._service.show_decided(approval)
                return
            text = copy.approval_already(str(approval.status))
            await whisper(self._app.client, channel, user, text, approval.thread_ts or None)
