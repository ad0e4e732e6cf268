"""Checkpoints that bind only the heads that moved, and archive batches that prune them.

``audit_checkpoints.heads_format``: None for the checkpoints written before this revision,
whose ``root`` is the hash of every task's head (a writer read every head, a verifier
rehashed every head at every checkpoint: O(tasks) each); 2 for the ones written after,
whose ``root`` is the hash of the heads that moved since the previous checkpoint, read
from the entries the checkpoint's tree grew by (O(new entries)). The checkpoints' own
hash chain carries each one's changes to the next, so the set of heads at any checkpoint
is still committed to. The format is part of the checkpoint's hash.

``audit_pruned_heads``: the heads format-2 checkpoints bound for tasks an archive batch
pruned, moved out of ``audit_checkpoint_heads``. The batch's record commits to them (how
many per checkpoint, and their hash); a full verify reads the record, a deep one the rows.

Revision ID: 0018_folded_checkpoint_heads
Revises: 0017_archive_subtrees
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_folded_checkpoint_heads"
down_revision: str | Sequence[str] | None = "0017_archive_subtrees"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_checkpoints") as batch:
        batch.add_column(sa.Column("heads_format", sa.Integer(), nullable=True))
    op.create_table(
        "audit_pruned_heads",
        sa.Column("checkpoint_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("archive", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", "task_id", name="pk_audit_pruned_heads"),
    )
    op.create_index("ix_audit_pruned_heads_archive", "audit_pruned_heads", ["archive"])


def downgrade() -> None:
    op.drop_table("audit_pruned_heads")
    # A plain ALTER TABLE ... DROP COLUMN on both (SQLite has it since 3.35): a batch
    # copy of the table would be refused by audit_checkpoint_heads' foreign key.
    op.execute("ALTER TABLE audit_checkpoints DROP COLUMN heads_format")
