"""Retention: what ``agent-gate audit archive`` leaves of the entries and calls it prunes.

``audit_pruned`` keeps, for each pruned ``audit_events`` row, its id, task, ``seq``,
``prev_hash``, ``hash`` and RFC 6962 leaf hash (about 200 bytes, no content), under
the archive batch that pruned it: the Merkle tree of every checkpoint and each task's
chain are still recomputed over them, and the batch's own audit entry (``archived``)
commits to their root. ``archived_calls`` is the tombstone of each pruned call, by
(task, call id) and (task, dedupe key): intake answers a re-delivered pruned call from
it and never runs it again.

Revision ID: 0011_archive_pruned
Revises: 0010_evidence_tree
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_archive_pruned"
down_revision: str | Sequence[str] | None = "0010_evidence_tree"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_pruned",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("leaf", sa.String(64), nullable=False),
        sa.Column("archive", sa.String(64), nullable=False),
        sa.UniqueConstraint("task_id", "seq", name="uq_audit_pruned_task_id_seq"),
        sa.PrimaryKeyConstraint("id", name="pk_audit_pruned"),
    )
    op.create_index("ix_audit_pruned_archive_id", "audit_pruned", ["archive", "id"])
    op.create_table(
        "archived_calls",
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("idem_key", sa.String(300), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("archive", sa.String(64), nullable=False),
        sa.UniqueConstraint("task_id", "idem_key", name="uq_archived_calls_task_id_idem_key"),
        sa.PrimaryKeyConstraint("task_id", "call_id", name="pk_archived_calls"),
    )


def downgrade() -> None:
    op.drop_table("archived_calls")
    op.drop_table("audit_pruned")
