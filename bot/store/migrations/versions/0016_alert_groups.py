"""Alert groups: one row per receiver's groupKey, its Slack thread and state, so one group
is one thread across replicas and the investigations per channel are counted in one place.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_groups",
        sa.Column("key", sa.String(), primary_key=True),
        sa.Column("channel_id", sa.String(), nullable=False),
        sa.Column("thread_ts", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("alerts_json", sa.String(), nullable=False),
        sa.Column("firing_count", sa.Integer(), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("investigated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_alert_groups_channel_id", "alert_groups", ["channel_id"])
    op.create_index("ix_alert_groups_investigated_at", "alert_groups", ["investigated_at"])


def downgrade() -> None:
    op.drop_index("ix_alert_groups_investigated_at", "alert_groups")
    op.drop_index("ix_alert_groups_channel_id", "alert_groups")
    op.drop_table("alert_groups")
