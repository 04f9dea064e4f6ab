"""Incident memory offers that survive a crash, and decisions on the audit chain: each
proposal names its session (the audit row of its decision belongs to it), keeps the
resolution's own evidence (what the low tier is told, read again when a replica that died
mid-proposal is taken over) and the lease of the replica completing it.

Rows stored before this learn their session from the sessions table (channel and thread).

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident_memories") as batch:
        # No foreign key: a proposal keeps its session row itself (retention's `_anchored`).
        batch.add_column(sa.Column("session_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("resolution", sa.String(), nullable=False, server_default=""))
        batch.add_column(sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_incident_memories_session_id", "incident_memories", ["session_id"])
    op.execute(
        "UPDATE incident_memories SET session_id = (SELECT MIN(s.id) FROM sessions s "
        "WHERE s.channel_id = incident_memories.channel_id "
        "AND s.thread_ts = incident_memories.thread_ts)"
    )


def downgrade() -> None:
    op.drop_index("ix_incident_memories_session_id", "incident_memories")
    with op.batch_alter_table("incident_memories") as batch:
        batch.drop_column("claimed_until")
        batch.drop_column("resolution")
        batch.drop_column("session_id")
