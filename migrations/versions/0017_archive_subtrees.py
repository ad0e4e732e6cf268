"""Archived leaves as perfect subtrees: what a full ``audit verify`` reads in their place.

``audit_subtrees`` holds, for each archive batch, the RFC 6962 perfect subtrees that
cover the leaves it pruned: ``start`` (the first leaf's index in the trail's Merkle
tree), ``level`` (the subtree holds ``2**level`` leaves), the ids of its first and last
``audit_events`` rows and its hash. The archive computes them from the signed tree it
exported against, after checking every pruned leaf is that tree's leaf, and cuts them at
every checkpoint's size, so that each checkpoint's root is recomputed from live leaves
and whole subtrees. The batch's ``archived`` entry commits to the list (its count and
hash). ``archived_heads`` holds the head each task had when its batch pruned it (one
row per archived task: a task archived and used again is never archived again), so
verify knows where an archived task's chain ends without reading its pruned entries;
the record commits to those rows too. Batches archived before this revision have no
rows in either table: verify walks their kept leaves (``audit_pruned``) one by one, as
before.

Revision ID: 0017_archive_subtrees
Revises: 0016_bigint_row_ids
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_archive_subtrees"
down_revision: str | Sequence[str] | None = "0016_bigint_row_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_subtrees",
        sa.Column("start", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("first_id", sa.BigInteger(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("archive", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("start", name="pk_audit_subtrees"),
        sa.UniqueConstraint("first_id", name="uq_audit_subtrees_first_id"),
    )
    op.create_index("ix_audit_subtrees_archive_start", "audit_subtrees", ["archive", "start"])
    op.create_table(
        "archived_heads",
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("archive", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_archived_heads"),
    )


def downgrade() -> None:
    op.drop_table("archived_heads")
    op.drop_table("audit_subtrees")
