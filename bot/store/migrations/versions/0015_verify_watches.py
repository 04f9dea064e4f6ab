"""An approved write's effect is followed for `agent.verify_s` (rollout, pod, node, SLI):
the watch is a row, stored before it starts and leased to the replica watching it, so a
restart or another replica resumes it and nothing is left hanging.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "verify_watches",
        sa.Column("approval_id", sa.String(), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("verdict", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_verify_watches_state", "verify_watches", ["state"])
    op.create_index("ix_verify_watches_lease_expires_at", "verify_watches", ["lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_verify_watches_lease_expires_at", "verify_watches")
    op.drop_index("ix_verify_watches_state", "verify_watches")
    op.drop_table("verify_watches")
