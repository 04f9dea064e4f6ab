"""Feedback: a person's 👍/👎 on an answer (one per person per turn) and a 👎's reason;
what a 👎'd turn's tools read, captured (masked) when the 👎 was given.

Revision ID: 0020
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.String(), nullable=False),
        sa.Column("channel_id", sa.String(), nullable=False),
        sa.Column("thread_ts", sa.String(), nullable=False),
        sa.Column("turn_id", sa.String(), nullable=False),
        sa.Column("message_ts", sa.String(), nullable=False),
        sa.Column("slack_user", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.Column("evidence_json", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("reason_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("turn_id", "slack_user", name="uq_feedback_turn_user"),
    )
    op.create_index("ix_feedback_channel_id", "feedback", ["channel_id"])
    op.create_index("ix_feedback_turn_id", "feedback", ["turn_id"])
    op.create_table(
        "feedback_fixtures",
        sa.Column("turn_id", sa.String(), primary_key=True),
        sa.Column("channel_id", sa.String(), nullable=False),
        sa.Column("thread_ts", sa.String(), nullable=False),
        sa.Column("objects_json", sa.String(), nullable=False),
        sa.Column("logs_json", sa.String(), nullable=False),
        sa.Column("missing_json", sa.String(), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("feedback_fixtures")
    op.drop_index("ix_feedback_turn_id", "feedback")
    op.drop_index("ix_feedback_channel_id", "feedback")
    op.drop_table("feedback")
