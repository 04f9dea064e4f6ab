"""What each turn was admitted under: `turns.role`, `cluster`, `namespace` and `external`
(its asker is from another organisation), so that a turn run after a restart, on another
replica, or after a decision runs under no more than its own message was given, not under
its session's role.

Revision ID: 0013
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("role", sa.String()),
    ("cluster", sa.String()),
    ("namespace", sa.String()),
    ("external", sa.Boolean()),
)


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        for name, kind in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
