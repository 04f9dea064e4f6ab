"""The typed values that cross layers, in the order a tool call lives them.

The call the model asked for, the policy's decision on it, the write's preview, its result
and audit entries, the approval that decides it, and the conversation messages and session
it is recorded in. `store/`, `model/`, `toolsets/`, `pipeline/`, `approvals/`, `agent/` and
`slack/` all import these; this module imports nothing from `bot/` (a test enforces it), so
types flow downward and no lower layer has to import a higher one to name a value.
Behaviour (ports, stages, handlers) lives with its layer, not here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

# --- The call ---


def plural(count: int, noun: str) -> str:
    """ "1 pod", "1,204 pods": the one counting phrase every surface and tool shares."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class ToolCallRequest:
    """One complete tool call the model asked for; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ThinkingBlock:
    """One block of a provider's native reasoning (Anthropic extended thinking).

    Sent back unchanged with the assistant turn it belongs to: the provider checks the
    signature, and refuses a tool-use turn whose thinking is missing from the next request.
    A redacted block carries only encrypted `data`.
    """

    thinking: str = ""
    signature: str | None = None
    redacted_data: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The shape LiteLLM takes in an assistant message's `thinking_blocks`."""
        if self.redacted_data is not None:
            return {"type": "redacted_thinking", "data": self.redacted_data}
        block: dict[str, Any] = {"type": "thinking", "thinking": self.thinking}
        if self.signature is not None:
            block["signature"] = self.signature
        return block

    @classmethod
    def from_openai(cls, block: dict[str, Any]) -> ThinkingBlock:
        if block.get("type") == "redacted_thinking":
            return cls(redacted_data=str(block.get("data") or ""))
        return cls(str(block.get("thinking") or ""), block.get("signature"))


# --- The decision and the result ---


class ToolStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    DENIED = "denied"
    PENDING = "pending"  # a write waiting for a person's approval: the turn ends here


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str = ""

    @classmethod
    def allow(cls, reason: str = "") -> Decision:
        return cls(Verdict.ALLOW, reason)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        return cls(Verdict.DENY, reason)

    @classmethod
    def needs_approval(cls, reason: str = "") -> Decision:
        return cls(Verdict.NEEDS_APPROVAL, reason)


@dataclass(frozen=True)
class StageDecision:
    stage: str
    decision: Decision


@dataclass(frozen=True)
class Refusal:
    """A call the pipeline did not run: the stage that refused it (role, hook, firewall,
    guardian…) and why. A value, not a sentence: the words the model and the thread read
    are rendered from it in one place (`bot.pipeline.flow.refused`)."""

    stage: str
    reason: str


# --- The preview of a write ---


@dataclass(frozen=True)
class WriteTarget:
    """The exact object a write is bound to, as read before the preview."""

    kind: str  # e.g. "Deployment", "Pod", "Node"
    namespace: str  # "" for cluster-scoped objects
    name: str
    uid: str
    resource_version: str

    @property
    def key(self) -> str:
        """One write per object at a time is reserved on this key."""
        return f"{self.kind}/{self.namespace}/{self.name}"


class GitOpsPolicy(StrEnum):
    """What a write to an object that Argo CD or Flux manages gets (`kubernetes.gitops`)."""

    REFUSE = "refuse"  # refused before anything is sent: the controller would revert it
    WARN = "warn"  # proposed, its preview and card saying who manages the object


@dataclass(frozen=True)
class FieldChange:
    field: str  # e.g. "spec.replicas"
    before: str
    after: str

    def render(self) -> str:
        return f"{self.field} {self.before} → {self.after}"


class PreviewSource(StrEnum):
    """Where a card's preview comes from, said on the card: only Kubernetes writes are
    rehearsed by the server; a silence or another MCP server's call is shown as it will be sent."""

    DRY_RUN = "server-side dry run"
    EXACT_CALL = "the exact call, not sent yet"


class Landed(StrEnum):
    """What reading a write's target back after a crash shows: the planned change in place,
    not in place, or nothing that tells (the target unreadable, a change that cannot be
    compared, another MCP server's call, which kelpie has no way to read back)."""

    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    UNKNOWN = "unknown"

    @classmethod
    def seen(cls, in_place: bool) -> Landed:
        """What a target that could be read shows."""
        return cls.APPLIED if in_place else cls.NOT_APPLIED


@dataclass(frozen=True)
class WritePlan:
    """Everything a person needs to approve a write, and everything needed to execute it."""

    tool: str
    description: str  # plain words: "Scale deployment shop/checkout-api from 3 to 5 replicas"
    cluster: str
    target: WriteTarget
    changes: tuple[FieldChange, ...]
    args: dict[str, Any]
    # Sentences the approver must read beside the preview, e.g. that Argo CD manages the
    # target and may revert the change.
    notes: tuple[str, ...] = ()
    preview: PreviewSource = PreviewSource.DRY_RUN


# --- The result and its audit ---


@dataclass(frozen=True)
class Picture:
    """An image a present tool shows in the thread: PNG bytes, a file name, a caption."""

    png: bytes = field(repr=False)
    filename: str
    caption: str


@dataclass(frozen=True)
class ToolOutcome:
    status: ToolStatus
    content: str  # what the model receives as the tool result
    summary: str  # one line for the thread
    attachment: str | None = None
    refusal: Refusal | None = None  # why the pipeline did not run the call, when denied
    end_turn: bool = False  # the tool asked to end the turn (see ToolResult.end_turn)
    acting_as: str | None = None  # who the cluster saw make the calls (audited)
    evidence: str | None = None  # what was asked of which backend (the evidence ledger)
    picture: Picture | None = None  # an image for the thread (see ToolResult.picture)


@dataclass(frozen=True)
class AuditEntry:
    session_id: int
    turn_id: str
    tool_call_id: str
    tool: str
    arguments: dict[str, Any]  # already masked
    stage: str
    decision: str
    reason: str
    slack_user: str


@dataclass(frozen=True)
class WriteOutcome:
    """What an approved write did (the write coordinator's result)."""

    executed: bool
    ok: bool
    message: str  # what the model is told
    summary: str  # one line for the card and the timeline
    outcome_audit_failed: bool = False
    # Not run here: another replica holds the approval now (this one's lease lapsed); that
    # one reconciles it and tells the thread, so nothing is said here.
    superseded: bool = False


@dataclass(frozen=True)
class Effect:
    """What an approved write's target shows now, as the verification watch reads it."""

    settled: bool  # the change took effect and the target is healthy
    failed: bool  # it will not get there by itself (a rollout past its deadline, target gone)
    evidence: str  # what was read, one sentence without a final stop: "3/3 replicas ready…"


# --- The approval: a decision point that ends the turn ---


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"  # withdrawn by a requester (or a permitted stop) before a decision


class DecisionKind(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    EXPIRE = "expire"
    WITHDRAW = "withdraw"
    # Start-up: an approval recorded as approved whose outcome never was (a crash between
    # the click and the outcome audit). The target is read back; nothing is retried.
    RECONCILE = "reconcile"


# What each decision moves a pending approval to (RECONCILE moves nothing: it is approved).
DECISION_STATE = {
    DecisionKind.APPROVE: ApprovalState.APPROVED,
    DecisionKind.REJECT: ApprovalState.REJECTED,
    DecisionKind.EXPIRE: ApprovalState.EXPIRED,
    DecisionKind.WITHDRAW: ApprovalState.CANCELLED,
}


@dataclass(frozen=True)
class ApprovalDecision:
    kind: DecisionKind
    by: str | None = None  # the person; None for the sweeper and reconciliation
    # Where a click came from: a click from any other channel decides nothing.
    channel_id: str | None = None
    # The message clicked, when it is the card: its ts, should the card's not be stored
    # (kelpie stopped between posting the card and storing it).
    card_ts: str | None = None


@dataclass(frozen=True)
class Approval:
    id: str
    session_id: int
    turn_id: str
    tool_call_id: str
    plan: WritePlan
    reason: str
    role: str
    channel_id: str
    thread_ts: str
    requested_by: str
    status: ApprovalState
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    card_ts: str | None = None
    outcome: str | None = None
    # Everyone who wrote in the thread since the session's last decided approval: with
    # `allow_requester: false` none of them may approve.
    requesters: tuple[str, ...] = ()


def plan_to_json(plan: WritePlan) -> str:
    return json.dumps(asdict(plan), sort_keys=True)


def plan_from_json(text: str) -> WritePlan:
    data: dict[str, Any] = json.loads(text)
    return WritePlan(
        tool=data["tool"],
        description=data["description"],
        cluster=data["cluster"],
        target=WriteTarget(**data["target"]),
        changes=tuple(FieldChange(**change) for change in data["changes"]),
        args=data["args"],
        notes=tuple(data.get("notes") or ()),  # absent from plans stored before notes
        preview=PreviewSource(data.get("preview") or PreviewSource.DRY_RUN),
    )


@dataclass(frozen=True)
class WriteAudit:
    approval_id: str
    phase: str  # intent | outcome
    tool: str
    target: str
    target_uid: str
    requested_by: str
    approved_by: str
    preview: str
    result: str = ""
    ok: bool = True


# --- The conversation the call is recorded in ---


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    slack_user: str | None = None
    slack_ts: str | None = None
    # False for a partial answer of a turn that did not finish: kept for the record only.
    complete: bool = True
    # The provider's signed reasoning behind an assistant turn, sent back with it, also
    # after a restart (stored only when the masker finds nothing in it: see
    # `outbound.storable_thinking`).
    thinking: tuple[ThinkingBlock, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        # Beside tool calls an absent text is None, not "": Gemini refuses an empty text part.
        content = self.content or (None if self.tool_calls else "")
        message: dict[str, Any] = {"role": str(self.role), "content": content}
        if self.thinking:
            message["thinking_blocks"] = [block.to_openai() for block in self.thinking]
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        if self.role is Role.TOOL:
            message["tool_call_id"] = self.tool_call_id
            message["name"] = self.tool_name
        return message


def tool_calls_to_json(calls: tuple[ToolCallRequest, ...]) -> str | None:
    if not calls:
        return None
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls])


def tool_calls_from_json(text: str | None) -> tuple[ToolCallRequest, ...]:
    if not text:
        return ()
    return tuple(ToolCallRequest(**item) for item in json.loads(text))


def thinking_to_json(blocks: tuple[ThinkingBlock, ...]) -> str | None:
    if not blocks:
        return None
    return json.dumps([block.to_openai() for block in blocks])


def thinking_from_json(text: str | None) -> tuple[ThinkingBlock, ...]:
    if not text:
        return ()
    return tuple(ThinkingBlock.from_openai(item) for item in json.loads(text))


@dataclass(frozen=True)
class SessionInfo:
    """The session row as the agent sees it: where the thread lives and what it may do."""

    id: int
    session_key: str
    team_id: str
    channel_id: str
    thread_ts: str
    is_dm: bool
    role: str
    cluster: str
    namespace: str | None
    started_by: str
    created: bool = field(default=False, compare=False)


# --- The turn (bot/store/turns.py keeps it; bot/agent/takeover.py takes over a dead one's) ---


class TurnState(StrEnum):
    QUEUED = "queued"  # accepted and stored, waiting for its thread or a free slot
    RUNNING = "running"  # on the replica that owns its lease (at most one per thread)
    AWAITING_APPROVAL = "awaiting_approval"  # ended at an approval card
    DONE = "done"
    INTERRUPTED = "interrupted"  # a person's stop or newer message, a shutdown, or a crash
    FAILED = "failed"


class TurnClaim(StrEnum):
    """What a turn's claim on its thread found (`TurnLedger.claim`)."""

    RUNNING = "running"  # the turn is ours and runs now
    WAIT = "wait"  # another turn of its thread runs (on any replica): ask again later
    # No longer ours to run: a person stopped it while it was queued, or another replica
    # took it over; it never runs here.
    GONE = "gone"


@dataclass(frozen=True)
class Admission:
    """What a turn was admitted under: the role, cluster and default namespace its
    message was given, and whether its asker is from another organisation (Slack Connect:
    `slack.external_users_role`). Kept with the turn, so that whoever runs it (a restart,
    another replica, the turn after a decision) runs it under no more than this."""

    role: str
    cluster: str
    namespace: str | None
    external: bool = False


@dataclass(frozen=True)
class AcceptedTurn:
    """A person's message stored as a new turn: in its thread's session (created with it
    when new), and whether the turn is already claimed as running here."""

    session: SessionInfo
    claimed: bool


@dataclass(frozen=True)
class OrphanTurn:
    """A turn whose replica died (its lease expired), now claimed by this one to close."""

    turn_id: str
    session_id: int
    state: TurnState
    asker: str
    team_id: str
    channel_id: str
    thread_ts: str
    open_messages: tuple[str, ...]  # the messages it showed in and never closed
    stopped_by: str | None = None  # a person's stop asked before its replica died
    # Its answer was stored before it died: a message of it that Slack says is over shows
    # that answer, and is left as it is.
    answered: bool = False
    # This process ran it and could not store its end: released, not lost in a crash.
    released: bool = False


@dataclass(frozen=True)
class PendingClosing:
    """What a finished turn's thread must still be told (its closing Slack calls, as JSON:
    the end's progress edit, its reaction, its session going idle), left for later while
    the workspace's budget had none and not yet accepted by Slack; claimed by this replica
    (its own leftovers after a restart, or a dead replica's) to send."""

    turn_id: str
    calls_json: str
    ended_at: datetime | None


@dataclass(frozen=True)
class RemoteTurn:
    """A turn running on another replica, as a stop pressed here sees it."""

    turn_id: str
    session_key: str
    asker: str
    role: str
    team_id: str
    channel_id: str
    thread_ts: str


@dataclass(frozen=True)
class TurnInterrupt:
    """Another replica asked this one to interrupt its running turn `turn_id`: a newer
    message there (`stopped_by` None) or a person's stop."""

    session_key: str
    turn_id: str
    stopped_by: str | None = None


class Wake(StrEnum):
    """What a write on one replica may wake the others for (a PostgreSQL NOTIFY channel)."""

    TURN_ENDED = "kelpie_turn_ended"  # a turn waiting for its thread may claim it now
    INTERRUPT = "kelpie_interrupt"  # a replica asked the one running a turn to interrupt it


@dataclass(frozen=True)
class OrphanDelivery:
    """A Slack delivery acknowledged by a replica that died before handling it."""

    key: str
    kind: str
    body_json: str


def ts_after(ts: str | None, than: str | None) -> bool:
    """Whether Slack timestamp `ts` ("seconds.micros", Slack's clock) is later than `than`,
    compared as numbers; False when either is missing or malformed."""
    try:
        return ts is not None and than is not None and Decimal(ts) > Decimal(than)
    except InvalidOperation:
        return False


# The asker of a turn an alert started (followed by the receiver type): no Slack user has
# such an id, so nobody can click as the alert and it approves nothing.
ALERT_ASKER_PREFIX = "alert-"
# The asker of a call through kelpie's MCP server (followed by the client's name): likewise
# no Slack user, so the client never approves its own change.
MCP_ASKER_PREFIX = "mcp-"


def shown_person(user: str) -> str:
    """A turn's asker as Slack shows it: a mention, or which alert or MCP client asked."""
    if user.startswith(ALERT_ASKER_PREFIX):
        return f"the alert ({user.removeprefix(ALERT_ASKER_PREFIX)})"
    if user.startswith(MCP_ASKER_PREFIX):
        return f"the MCP client {user.removeprefix(MCP_ASKER_PREFIX)}"
    return f"<@{user}>"


class FeedbackValue(StrEnum):
    """A person's rating of one answer (Slack's feedback buttons)."""

    POSITIVE = "positive"
    NEGATIVE = "negative"


@dataclass(frozen=True)
class Feedback:
    """One click on an answer's feedback buttons: where, which turn, who, what it cited."""

    team_id: str
    channel_id: str
    thread_ts: str
    turn_id: str
    message_ts: str
    user: str
    value: FeedbackValue
    evidence: tuple[str, ...] = ()
