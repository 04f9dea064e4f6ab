"""A verification watch's verdict is stored before it is said (state `concluded`) and the
ts of its message once said (`verify_watches.verdict_ts`): a replica that takes a concluded
watch over after a crash says the stored verdict, unless its ts shows it was said already.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verify_watches") as batch:
        batch.add_column(sa.Column("verdict_ts", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verify_watches") as batch:
        batch.drop_column("verdict_ts")
