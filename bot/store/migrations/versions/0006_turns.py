"""Durable turns with replica leases; inbox deliveries owned until handled.

`turns`: one row per turn (state, owning replica, lease heartbeat and expiry, the stream
message's ts). At most one turn per thread runs at a time, across replicas: a partial unique
index enforces it. `inbound_events` gains an owner, a lease and `handled_at`, so a delivery
acknowledged by a replica that died before handling it is taken over by another; deliveries
stored before this revision count as handled.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "turns",
        sa.Column("turn_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("asker", sa.String(), nullable=False),
        sa.Column("event_key", sa.String(), nullable=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stream_ts", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
        sa.PrimaryKeyConstraint("turn_id"),
        sa.UniqueConstraint("event_key", name="uq_turns_event_key"),
    )
    op.create_index("ix_turns_session_id", "turns", ["session_id"])
    op.create_index("ix_turns_lease", "turns", ["state", "lease_expires_at"])
    running = sa.text("state = 'running'")
    op.create_index(
        "ux_turns_one_running_per_session",
        "turns",
        ["session_id"],
        unique=True,
        sqlite_where=running,
        postgresql_where=running,
    )
    with op.batch_alter_table("inbound_events") as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("handled_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE inbound_events SET handled_at = received_at")
    op.create_index(
        "ix_inbound_events_unhandled", "inbound_events", ["handled_at", "lease_expires_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_inbound_events_unhandled", table_name="inbound_events")
    with op.batch_alter_table("inbound_events") as batch:
        batch.drop_column("handled_at")
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
    op.drop_index("ux_turns_one_running_per_session", table_name="turns")
    op.drop_index("ix_turns_lease", table_name="turns")
    op.drop_index("ix_turns_session_id", table_name="turns")
    op.drop_table("turns")
