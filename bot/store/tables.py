"""Database tables (SQLModel). Append-mostly: rows are added as a turn goes, never rewritten
except where a state machine needs it (approvals, later)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Index, UniqueConstraint, text
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime) -> datetime:
    # SQLite returns naive datetimes; everything we store is UTC.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class SessionRow(SQLModel, table=True):
    __tablename__ = "sessions"
    # Feedback names its thread, not its session: retention finds one from the other.
    __table_args__ = (Index("ix_sessions_thread", "channel_id", "thread_ts"),)

    id: int | None = Field(default=None, primary_key=True)
    session_key: str = Field(unique=True, index=True)
    team_id: str
    channel_id: str
    thread_ts: str
    is_dm: bool = False
    role: str
    cluster: str
    namespace: str | None = None
    started_by: str
    created_at: datetime = Field(default_factory=utcnow, index=True)


class MessageRow(SQLModel, table=True):
    """One conversation message in OpenAI shape (role, content, tool_calls, tool_call_id)."""

    __tablename__ = "messages"

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    turn_id: str = Field(index=True)
    role: str
    content: str | None = None
    tool_calls_json: str | None = None
    # The provider's signed reasoning of an assistant turn (`thinking_blocks` JSON).
    thinking_json: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    slack_user: str | None = None
    slack_ts: str | None = None
    # False for a partial answer of an interrupted/failed turn: stored, never replayed.
    complete: bool = True
    created_at: datetime = Field(default_factory=utcnow)


class InboundEventRow(SQLModel, table=True):
    """A request from Slack, recorded before it is acknowledged. The key (Slack's event id,
    or the trigger id of a click or command) makes a repeated delivery a no-op, on any
    replica. The content is what a replay needs, masked (`bot.slack.at_rest`), and is
    dropped once the delivery was handled (`DROPPED_WHEN_HANDLED`)."""

    __tablename__ = "inbound_events"

    __table_args__ = (Index("ix_inbound_events_unhandled", "handled_at", "lease_expires_at"),)

    key: str = Field(primary_key=True)
    kind: str
    body_json: str
    received_at: datetime = Field(default_factory=utcnow, index=True)
    # The replica that acknowledged it holds it (lease renewed by its heartbeat) until its
    # listener has handled it; a delivery whose replica died is taken over by another.
    owner: str | None = None
    lease_expires_at: datetime | None = None
    handled_at: datetime | None = None


# What marking a delivery handled writes besides the time: its content is dropped, so a
# command's response_url or a question's words live no longer than their handling.
DROPPED_WHEN_HANDLED: dict[str, object] = {"body_json": ""}


_RUNNING = text("state = 'running'")
_CLOSING = text("closing_calls IS NOT NULL")


class TurnRow(SQLModel, table=True):
    """One turn: its state (`bot.values.TurnState`), the replica that owns it and that
    replica's lease (renewed by its heartbeat; expired once it died), and the messages it
    shows in that are still open, so whoever takes over a dead turn can close them."""

    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("event_key", name="uq_turns_event_key"),
        Index("ix_turns_lease", "state", "lease_expires_at"),
        # One running turn per thread, whatever replica runs it.
        Index(
            "ux_turns_one_running_per_session",
            "session_id",
            unique=True,
            sqlite_where=_RUNNING,
            postgresql_where=_RUNNING,
        ),
        # Finished turns whose closing Slack calls are still to go out: few, so a partial
        # index keeps the heartbeat's look for a dead replica's leftovers cheap.
        Index(
            "ix_turns_closing",
            "lease_expires_at",
            sqlite_where=_CLOSING,
            postgresql_where=_CLOSING,
        ),
    )

    turn_id: str = Field(primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    state: str
    asker: str
    event_key: str | None = None  # the Slack delivery that started it: accepted once
    owner: str
    heartbeat_at: datetime
    lease_expires_at: datetime
    # The `ts` of each message the turn opened and has not closed yet (a JSON list): a long
    # answer goes on in a second stream message, and a crash may leave either one live.
    open_messages: str = "[]"
    # A newer message or a stop reached another replica: the owner interrupts the turn at
    # its next beat; a stop says who pressed it.
    interrupt_requested: bool = False
    stopped_by: str | None = None
    # A finished turn's closing Slack calls (JSON) left for later while the workspace's
    # budget had no room, stored with its end and cleared once Slack accepted them: until
    # then the owner's lease is renewed, and whoever outlives it sends them.
    closing_calls: str | None = None
    # What the turn was admitted under (`bot.values.Admission`): whoever runs it runs it
    # under no more than this. NULL: a turn stored before turns kept it (its session's).
    role: str | None = None
    cluster: str | None = None
    namespace: str | None = None
    external: bool | None = None
    created_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None


class UsageRow(SQLModel, table=True):
    __tablename__ = "usage"

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    turn_id: str = Field(index=True)
    round_index: int
    model: str
    input_tokens: int
    output_tokens: int
    estimated: bool
    created_at: datetime = Field(default_factory=utcnow)


class ToolAuditRow(SQLModel, table=True):
    """One row per pipeline decision of a tool call (append-only): allows, denials, errors."""

    __tablename__ = "tool_audit"

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    turn_id: str = Field(index=True)
    tool_call_id: str = Field(index=True)
    tool: str
    arguments_json: str  # secrets masked
    stage: str
    decision: str
    reason: str = ""
    slack_user: str
    created_at: datetime = Field(default_factory=utcnow, index=True)
    # The audit chain (`bot.store.chain`): the row's place, the hash of the row before it
    # and its own hash over that and what it records. NULL: written outside kelpie.
    chain_seq: int | None = Field(default=None, unique=True, index=True)
    prev_hash: str | None = None
    row_hash: str | None = None


class ApprovalRow(SQLModel, table=True):
    """A proposed write waiting for (or past) a person's decision.

    `status` moves only pending → approved | rejected | expired | cancelled, by a
    compare-and-set update, so concurrent clicks make exactly one decision.
    """

    __tablename__ = "approvals"

    id: str = Field(primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    turn_id: str
    tool_call_id: str
    tool: str
    plan_json: str  # the WritePlan: target uid/resourceVersion, changes, arguments
    reason: str = ""
    role: str
    cluster: str
    channel_id: str
    thread_ts: str
    requested_by: str
    requesters_json: str = "[]"  # everyone who asked: none of them approves (four eyes)
    status: str = Field(index=True)
    decided_by: str | None = None
    decided_at: datetime | None = None
    expires_at: datetime
    card_ts: str | None = None
    outcome: str | None = None
    # Approved, no outcome yet: the replica executing it and its lease, renewed by that
    # replica's heartbeat; once it expires another replica may reconcile the row.
    owner: str | None = None
    lease_expires_at: datetime | None = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=utcnow, index=True)


class WriteAuditRow(SQLModel, table=True):
    """Intent (before the change) and outcome (after) of every approved write; append-only."""

    __tablename__ = "write_audit"

    id: int | None = Field(default=None, primary_key=True)
    approval_id: str = Field(foreign_key="approvals.id", index=True)
    phase: str  # intent | outcome
    tool: str
    target: str  # Kind/namespace/name
    target_uid: str
    requested_by: str
    approved_by: str
    preview: str
    result: str = ""
    ok: bool = True
    created_at: datetime = Field(default_factory=utcnow)
    chain_seq: int | None = Field(default=None, unique=True, index=True)  # see ToolAuditRow
    prev_hash: str | None = None
    row_hash: str | None = None


class PayloadRow(SQLModel, table=True):
    """The last request sent to the model for a session, after masking (`/kelpie payload`).

    One row per session, replaced by each request: the exact JSON handed to the provider
    gateway, plus what was masked (kind and where, never the value).
    """

    __tablename__ = "model_payloads"

    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    turn_id: str
    round_index: int
    model: str
    payload_json: str
    masked_count: int = 0
    created_at: datetime = Field(default_factory=utcnow)


class WriteReservationRow(SQLModel, table=True):
    """One write per object at a time, across replicas: the primary key is the target."""

    __tablename__ = "write_reservations"

    target: str = Field(primary_key=True)  # cluster/Kind/namespace/name
    approval_id: str
    created_at: datetime = Field(default_factory=utcnow)


class VerifyWatchRow(SQLModel, table=True):
    """An approved write's effect being followed (`agent.verify_s`): stored before the watch
    starts, leased to the replica watching it (renewed at every poll), so a restart or
    another replica resumes it once that lease expired. `state` moves only watching →
    concluded (the verdict stored, by a compare-and-set: only its winner says it) → done
    (said), or → undeliverable (the thread refused the verdict for good: `verdict_error`);
    a concluded watch taken over after a crash says its stored verdict, unless `verdict_ts`
    shows it was said already."""

    __tablename__ = "verify_watches"

    approval_id: str = Field(foreign_key="approvals.id", primary_key=True)
    state: str = Field(index=True)  # watching | concluded | done | undeliverable
    deadline: datetime
    owner: str | None = None
    lease_expires_at: datetime | None = Field(default=None, index=True)
    verdict: str | None = None  # the thread's message, once concluded
    verdict_ts: str | None = None  # its ts in the thread, once said
    verdict_error: str | None = None  # why the thread refused it for good (undeliverable)
    created_at: datetime = Field(default_factory=utcnow)


class AlertGroupRow(SQLModel, table=True):
    """One alert group (a receiver's `groupKey`) and its Slack thread: the unique key makes
    one group one thread across replicas; the first to insert the row posts its header."""

    __tablename__ = "alert_groups"

    key: str = Field(primary_key=True)  # receiver type + ":" + groupKey
    channel_id: str = Field(index=True)
    thread_ts: str | None = None  # the header's ts, once posted
    status: str  # firing | resolved
    alerts_json: str  # the current alerts' fingerprints, sorted (a JSON list)
    firing_count: int = 0
    fired_at: datetime  # since when the group fires (its earliest startsAt)
    resolved_at: datetime | None = None
    investigated_at: datetime | None = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=utcnow)


class FeedbackRow(SQLModel, table=True):
    """A person's 👍/👎 on one answer (Slack's feedback buttons): append-only, one row per
    person per answer (the unique key makes a second click, on any replica, a no-op). A 👎
    may get its reason later (masked, like everything kelpie keeps)."""

    __tablename__ = "feedback"
    __table_args__ = (
        UniqueConstraint("turn_id", "slack_user", name="uq_feedback_turn_user"),
        Index("ix_feedback_thread", "channel_id", "thread_ts"),
    )

    id: int | None = Field(default=None, primary_key=True)
    team_id: str
    channel_id: str
    thread_ts: str
    turn_id: str = Field(index=True)
    message_ts: str  # the answer's message the buttons were on
    slack_user: str
    value: str  # positive | negative (`bot.values.FeedbackValue`)
    evidence_json: str = "[]"  # the [E#] references the answer cited
    reason: str | None = None
    reason_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class FeedbackFixtureRow(SQLModel, table=True):
    """What a 👎'd turn's read tools read, re-read (masked) when the 👎 was given, while the
    incident is likely still there: `kelpie eval export` prefers it to a later re-read."""

    __tablename__ = "feedback_fixtures"
    __table_args__ = (Index("ix_feedback_fixtures_thread", "channel_id", "thread_ts"),)

    turn_id: str = Field(primary_key=True)
    channel_id: str
    thread_ts: str
    objects_json: str  # masked Kubernetes objects (never a Secret)
    logs_json: str  # masked log entries
    missing_json: str  # reads not captured, each with why
    captured_at: datetime = Field(default_factory=utcnow)


class AuditChainHeadRow(SQLModel, table=True):
    """The audit chain's head (one row, id 1): the last row's place and hash. Appending
    locks it first, so replicas append one after another and the chain never forks."""

    __tablename__ = "audit_chain_head"

    id: int = Field(primary_key=True)
    seq: int
    hash: str


class AuditCheckpointRow(SQLModel, table=True):
    """A row retention appends to the chain when it prunes its start: through which place
    rows were removed, how many, and the hash of the last one removed, from which the
    remaining chain still verifies."""

    __tablename__ = "audit_checkpoints"

    id: int | None = Field(default=None, primary_key=True)
    pruned_through: int
    pruned_rows: int
    anchor_hash: str
    created_at: datetime = Field(default_factory=utcnow)
    chain_seq: int | None = Field(default=None, unique=True, index=True)
    prev_hash: str | None = None
    row_hash: str | None = None


class ThreadSummaryRow(SQLModel, table=True):
    """A long thread's older rounds summarized (`bot.agent.compaction`): the summary of the
    session's messages through `through_message_id`, made by the low tier and kept, so the
    next turn summarizes only what came since. The messages themselves are never changed."""

    __tablename__ = "thread_summaries"

    session_id: int = Field(foreign_key="sessions.id", primary_key=True)
    through_message_id: int = Field(primary_key=True)
    text: str
    model: str
    created_at: datetime = Field(default_factory=utcnow)


class IncidentMemoryRow(SQLModel, table=True):
    """A memory of an incident kelpie proposed when a thread ended with a resolution, and
    what a person in the channel decided of it (proposed → remembered | discarded, once;
    the decision is a row of the audit chain too).
    Only remembered rows are searched (`read/past_incidents`): FTS5 on SQLite, a tsvector
    expression index over `search_text` on PostgreSQL (both made by migration 0022)."""

    __tablename__ = "incident_memories"

    id: int | None = Field(default=None, primary_key=True)
    # channel:thread:trigger:ref — one proposal per resolution, however often it is seen.
    key: str = Field(unique=True)
    channel_id: str = Field(index=True)
    thread_ts: str
    trigger: str  # alert_resolved | verified_write | marked_resolved
    # offering (stored, the low tier not done yet) → proposed → remembered | discarded
    status: str = Field(index=True)
    # The thread's session: its decision's audit row belongs to it. No foreign key: the
    # proposal keeps the session row (retention's `_anchored`); NULL before migration 0025
    # where no session matched.
    session_id: int | None = Field(default=None, index=True)
    resolution: str = ""  # the trigger's own evidence (a verdict, an alert's summary)
    # Until when the replica completing an offering (or posting its card) holds it; after
    # that another replica takes it over (a crash mid-proposal loses nothing).
    claimed_until: datetime | None = None
    # The proposal: empty while offering (the low tier fills it in).
    title: str = ""
    symptom: str = ""
    cause: str = ""
    fix: str = ""
    evidence: str = ""  # the thread's evidence ids, e.g. "E1, E3"
    namespace: str = Field(default="", index=True)  # "" when the thread named none
    workloads: str = ""  # space-separated names
    alerts: str = ""  # space-separated alert names
    search_text: str = ""
    card_ts: str | None = None
    proposed_by: str  # who or what resolved the thread
    decided_by: str | None = None
    decided_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
