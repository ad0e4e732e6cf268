"""The Merkle tree over the audit trail, kept with each checkpoint.

A checkpoint now also commits to every entry so far through an RFC 6962 tree whose
leaves are the entries in ``audit_events.id`` order (``ledger.trail_tree``): it keeps
the tree's size, the id of its last leaf, its root and its frontier (the roots of the
perfect subtrees that the size's bits name), so the next checkpoint hashes only the
entries added since. ``note`` holds the checkpoint signed as a C2SP tlog-checkpoint
when a signing key was given (the key itself is never stored).

Checkpoints written before this revision have no tree; the first one after it hashes
the whole trail once.

Revision ID: 0010_evidence_tree
Revises: 0009_mcp_events
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_evidence_tree"
down_revision: str | Sequence[str] | None = "0009_mcp_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("tree_size", "tree_last_id", "tree_root", "tree_frontier", "note")


def upgrade() -> None:
    with op.batch_alter_table("audit_checkpoints") as batch:
        batch.add_column(sa.Column("tree_size", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("tree_last_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("tree_root", sa.String(64), nullable=True))
        batch.add_column(sa.Column("tree_frontier", sa.Text(), nullable=True))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    # A plain ALTER TABLE ... DROP COLUMN on both (SQLite has it since 3.35): a batch
    # copy of the table would be refused by audit_checkpoint_heads' foreign key.
    for name in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE audit_checkpoints DROP COLUMN {name}")
