"""A finished turn's closing Slack calls left for later (its workspace's budget was spent):
`turns.closing_calls` keeps them until Slack accepted them, so a restart or another replica
sends what a crash or a stop left unsent.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_CLOSING = sa.text("closing_calls IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("closing_calls", sa.String(), nullable=True))
    op.create_index(
        "ix_turns_closing",
        "turns",
        ["lease_expires_at"],
        sqlite_where=_CLOSING,
        postgresql_where=_CLOSING,
    )


def downgrade() -> None:
    op.drop_index("ix_turns_closing", table_name="turns")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("closing_calls")
