"""Incident memories a person confirmed: the proposals and decisions, and their full-text
index (SQLite FTS5 table of remembered rows; PostgreSQL GIN over to_tsvector).

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# Kept in step with bot/store/memory.py (FTS_TABLE, the PostgreSQL expression).
FTS_TABLE = "incident_memory_fts"


def upgrade() -> None:
    op.create_table(
        "incident_memories",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(), nullable=False, unique=True),
        sa.Column("channel_id", sa.String(), nullable=False),
        sa.Column("thread_ts", sa.String(), nullable=False),
        sa.Column("trigger", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("symptom", sa.String(), nullable=False),
        sa.Column("cause", sa.String(), nullable=False),
        sa.Column("fix", sa.String(), nullable=False),
        sa.Column("evidence", sa.String(), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("workloads", sa.String(), nullable=False),
        sa.Column("alerts", sa.String(), nullable=False),
        sa.Column("search_text", sa.String(), nullable=False),
        sa.Column("card_ts", sa.String(), nullable=True),
        sa.Column("proposed_by", sa.String(), nullable=False),
        sa.Column("decided_by", sa.String(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_incident_memories_channel_id", "incident_memories", ["channel_id"])
    op.create_index("ix_incident_memories_status", "incident_memories", ["status"])
    op.create_index("ix_incident_memories_namespace", "incident_memories", ["namespace"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX ix_incident_memories_search ON incident_memories "
            "USING GIN (to_tsvector('simple', search_text))"
        )
    else:
        op.execute(f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(search_text)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_incident_memories_search")
    else:
        op.execute(f"DROP TABLE {FTS_TABLE}")
    op.drop_index("ix_incident_memories_namespace", "incident_memories")
    op.drop_index("ix_incident_memories_status", "incident_memories")
    op.drop_index("ix_incident_memories_channel_id", "incident_memories")
    op.drop_table("incident_memories")
