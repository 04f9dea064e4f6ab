"""Retention finds old rows by age: indexes on the creation time of sessions, tool audit rows
and approvals.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_INDEXED = ("sessions", "tool_audit", "approvals")


def upgrade() -> None:
    for table in _INDEXED:
        with op.batch_alter_table(table) as batch:
            batch.create_index(f"ix_{table}_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    for table in _INDEXED:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_created_at")
