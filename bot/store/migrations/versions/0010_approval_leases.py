"""An approved change's execution is leased like a turn: `approvals.owner` is the replica
executing it and `approvals.lease_expires_at` its lease, renewed by that replica's
heartbeat, so another replica reconciles it only once that replica has died.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_approvals_lease_expires_at", ["lease_expires_at"])


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_index("ix_approvals_lease_expires_at")
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
