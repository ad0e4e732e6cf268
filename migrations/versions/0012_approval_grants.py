"""Grants: an approval that covers more calls of one tool in one task.

An approver may choose one of the options an approve rule offers (``approval:
grants:`` in the policy): this tool, this task, for a while or a number of calls,
for arguments within the option's bounds. ``approval_grants`` keeps each grant,
bound to the policy's hash, with its count of calls used; ``approval_grant_uses``
each call a grant authorized. Quorum answers need no table: they are rows of
``approvals`` from distinct approvers.

Revision ID: 0012_approval_grants
Revises: 0010_evidence_tree
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_approval_grants"
down_revision: str | Sequence[str] | None = "0010_evidence_tree"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _at(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "approval_grants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("policy_hash", sa.String(80), nullable=False),
        sa.Column("option", sa.String(64), nullable=False),
        sa.Column("rule_ids", sa.Text(), nullable=False),
        sa.Column("max_calls", sa.Integer(), nullable=True),
        sa.Column("used_calls", sa.Integer(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("approval_id", sa.Integer(), nullable=False),
        sa.Column("granted_by", sa.String(200), nullable=False),
        _at("granted_at"),
        _at("revoked_at", nullable=True),
        sa.Column("revoked_by", sa.String(200), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="RESTRICT",
                                name="fk_approval_grants_task_id_tasks"),
        sa.ForeignKeyConstraint(["approval_id"], ["approvals.id"], ondelete="RESTRICT",
                                name="fk_approval_grants_approval_id_approvals"),
        sa.PrimaryKeyConstraint("id", name="pk_approval_grants"),
    )
    op.create_index("ix_approval_grants_task_id_tool", "approval_grants", ["task_id", "tool"])
    op.create_table(
        "approval_grant_uses",
        sa.Column("grant_id", sa.Integer(), nullable=False),
        sa.Column("call_row_id", sa.Integer(), nullable=False),
        _at("used_at"),
        sa.ForeignKeyConstraint(["grant_id"], ["approval_grants.id"], ondelete="RESTRICT",
                                name="fk_approval_grant_uses_grant_id_approval_grants"),
        sa.ForeignKeyConstraint(["call_row_id"], ["tool_calls.id"], ondelete="RESTRICT",
                                name="fk_approval_grant_uses_call_row_id_tool_calls"),
        sa.PrimaryKeyConstraint("grant_id", "call_row_id", name="pk_approval_grant_uses"),
    )
    op.create_index("ix_approval_grant_uses_call_row_id", "approval_grant_uses",
                    ["call_row_id"])


def downgrade() -> None:
    op.drop_index("ix_approval_grant_uses_call_row_id", table_name="approval_grant_uses")
    op.drop_table("approval_grant_uses")
    op.drop_index("ix_approval_grants_task_id_tool", table_name="approval_grants")
    op.drop_table("approval_grants")
