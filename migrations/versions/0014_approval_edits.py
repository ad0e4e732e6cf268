"""Edit then approve: ``approval_edits`` and ``tool_calls.edited``.

An approver may change the arguments a policy marks ``editable`` before approving.
The call row then holds the new version (``arguments``, ``sealed_arguments``,
``args_hash``) and ``edited`` lists the paths changed; each edit's row here keeps
who edited, which fields, both hashes and the version it replaced (sealed fields only
sealed). NULL ``edited`` on every call recorded before this revision: none was edited.

Revision ID: 0014_approval_edits
Revises: 0013_approval_deadlines
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_approval_edits"
down_revision: str | Sequence[str] | None = "0013_approval_deadlines"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tool_calls", sa.Column("edited", sa.Text(), nullable=True))
    op.create_table(
        "approval_edits",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("call_row_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("approval_id", sa.Integer(), nullable=True),
        sa.Column("edited_by", sa.String(200), nullable=False),
        sa.Column("fields", sa.Text(), nullable=False),
        sa.Column("old_args_hash", sa.String(64), nullable=False),
        sa.Column("new_args_hash", sa.String(64), nullable=False),
        sa.Column("old_arguments", sa.Text(), nullable=True),
        sa.Column("old_sealed_arguments", sa.Text(), nullable=True),
        sa.Column("edited_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["call_row_id"], ["tool_calls.id"], ondelete="RESTRICT",
                                name=op.f("fk_approval_edits_call_row_id_tool_calls")),
        sa.ForeignKeyConstraint(["approval_id"], ["approvals.id"], ondelete="RESTRICT",
                                name=op.f("fk_approval_edits_approval_id_approvals")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_edits")),
    )
    op.create_index(op.f("ix_approval_edits_call_row_id_id"), "approval_edits",
                    ["call_row_id", "id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_approval_edits_call_row_id_id"), table_name="approval_edits")
    op.drop_table("approval_edits")
    # Plain ALTER TABLE on both databases (SQLite 3.35+): a batch drop would copy
    # tool_calls into a new table, which the rows of audit_events and approvals that
    # reference it (foreign keys enforced) refuse.
    op.execute("ALTER TABLE tool_calls DROP COLUMN edited")
