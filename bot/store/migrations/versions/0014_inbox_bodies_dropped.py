"""Nothing raw at rest: the inbox now keeps a delivery's content (masked) only until it is
handled. The bodies of deliveries handled before this release were kept raw (a question's
words, a command's response_url) until the retention pass; they are dropped here, as the
inbox now drops them when a delivery is handled. Nothing reads them again: only unhandled
deliveries are ever replayed.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE inbound_events SET body_json = '' WHERE handled_at IS NOT NULL")


def downgrade() -> None:
    pass  # what was dropped is gone; the schema is unchanged
