"""Deadlines of calls that wait for a person (an approve rule's ``approval: timeout``).

- ``approval_deadlines``: one row per call whose wait has a deadline: the call's
  version when the wait began (``armed_version``), when it passes by the database's
  clock (``due_ms``), what then happens (``then``: ``deny`` or ``escalate`` to
  ``role``) and what a sweeper did (``outcome``: ``armed`` until one acted).
  Indexed by ``(outcome, due_ms)``: a sweeper reads the armed ones that passed.

Calls recorded before this revision have no deadline; nothing else changes.

Revision ID: 0013_approval_deadlines
Revises: 0012_approval_grants
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_approval_deadlines"
down_revision: str | Sequence[str] | None = "0012_approval_grants"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approval_deadlines",
        sa.Column("call_row_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("armed_version", sa.Integer(), nullable=False),
        sa.Column("due_ms", sa.BigInteger(), nullable=False),
        sa.Column("then", sa.String(16), nullable=False),
        sa.Column("role", sa.String(64), nullable=True),
        sa.Column("rule_id", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("fired_ms", sa.BigInteger(), nullable=True),
        sa.Column("fired_by", sa.String(200), nullable=True),
        sa.ForeignKeyConstraint(["call_row_id"], ["tool_calls.id"], ondelete="RESTRICT",
                                name="fk_approval_deadlines_call_row_id_tool_calls"),
        sa.PrimaryKeyConstraint("call_row_id", name="pk_approval_deadlines"),
    )
    op.create_index("ix_approval_deadlines_outcome_due_ms", "approval_deadlines",
                    ["outcome", "due_ms"])


def downgrade() -> None:
    op.drop_index("ix_approval_deadlines_outcome_due_ms", table_name="approval_deadlines")
    op.drop_table("approval_deadlines")
