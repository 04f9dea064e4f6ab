"""The audit chain (`bot.store.chain`): every tool and write audit row carries its place,
the hash of the row before it and its own hash; one head row is locked by each append;
retention's checkpoints are rows of the chain too. Rows already stored are placed on the
chain in the order they were written. Also `thread_summaries`: a long thread's older rounds
summarized by the low tier (`bot.agent.compaction`).

Revision ID: 0023
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0020"
branch_labels = None
depends_on = None

CHAINED = ("tool_audit", "write_audit", "audit_checkpoints")


def upgrade() -> None:
    op.create_table(
        "audit_chain_head",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(), nullable=False),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("pruned_through", sa.Integer(), nullable=False),
        sa.Column("pruned_rows", sa.Integer(), nullable=False),
        sa.Column("anchor_hash", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    for table in CHAINED:
        op.add_column(table, sa.Column("chain_seq", sa.Integer(), nullable=True))
        op.add_column(table, sa.Column("prev_hash", sa.String(), nullable=True))
        op.add_column(table, sa.Column("row_hash", sa.String(), nullable=True))
        op.create_index(f"ix_{table}_chain_seq", table, ["chain_seq"], unique=True)
    op.create_table(
        "thread_summaries",
        sa.Column("session_id", sa.Integer(), sa.ForeignKey("sessions.id"), primary_key=True),
        sa.Column("through_message_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("text", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    from bot.store.chain import GENESIS, chain_unchained

    connection = op.get_bind()
    connection.execute(
        sa.text("INSERT INTO audit_chain_head (id, seq, hash) VALUES (1, 0, :genesis)"),
        {"genesis": GENESIS},
    )
    chain_unchained(connection)


def downgrade() -> None:
    op.drop_table("thread_summaries")
    for table in reversed(CHAINED):
        op.drop_index(f"ix_{table}_chain_seq", table)
        if table != "audit_checkpoints":
            with op.batch_alter_table(table) as batch:
                for column in ("row_hash", "prev_hash", "chain_seq"):
                    batch.drop_column(column)
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_chain_head")
