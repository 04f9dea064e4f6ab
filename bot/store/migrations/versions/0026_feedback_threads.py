"""Retention prunes feedback with its thread's conversation, and feedback names its thread
(channel, thread_ts), not its session: indexes on the thread of sessions, feedback and a 👎's
captured reads (the feedback one replaces its index on the channel alone).

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_THREAD = ["channel_id", "thread_ts"]


def upgrade() -> None:
    op.create_index("ix_sessions_thread", "sessions", _THREAD)
    op.create_index("ix_feedback_thread", "feedback", _THREAD)
    op.drop_index("ix_feedback_channel_id", "feedback")
    op.create_index("ix_feedback_fixtures_thread", "feedback_fixtures", _THREAD)


def downgrade() -> None:
    op.drop_index("ix_feedback_fixtures_thread", "feedback_fixtures")
    op.create_index("ix_feedback_channel_id", "feedback", ["channel_id"])
    op.drop_index("ix_feedback_thread", "feedback")
    op.drop_index("ix_sessions_thread", "sessions")
