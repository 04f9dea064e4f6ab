"""The inbox: Slack deliveries recorded (key and content) before they are acknowledged.

Replaces `processed_events`; the event ids it remembered move over, so a retry of an event
handled just before the upgrade is still recognised.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbound_events",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("body_json", sa.String(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_inbound_events_received_at", "inbound_events", ["received_at"])
    op.execute(
        "INSERT INTO inbound_events (key, kind, body_json, received_at) "
        "SELECT event_id, 'event', '', created_at FROM processed_events"
    )
    op.drop_table("processed_events")


def downgrade() -> None:
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.execute(
        "INSERT INTO processed_events (event_id, created_at) "
        "SELECT key, received_at FROM inbound_events"
    )
    op.drop_index("ix_inbound_events_received_at", table_name="inbound_events")
    op.drop_table("inbound_events")
