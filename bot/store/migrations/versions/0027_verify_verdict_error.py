"""A verification watch whose verdict the thread refuses for good (its channel archived or
deleted, the app removed from it) ends `undeliverable`, with the surface's reason in
`verify_watches.verdict_error`, instead of staying concluded and being tried again at every
reconciliation.

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verify_watches") as batch:
        batch.add_column(sa.Column("verdict_error", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verify_watches") as batch:
        batch.drop_column("verdict_error")
