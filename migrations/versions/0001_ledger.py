"""The ledger: tasks, tool calls with their side-effect state, audit events.

Revision ID: 0001_ledger
Revises:
Create Date: 2025-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_ledger"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("terminal", sa.String(64), nullable=True),
        sa.Column("terminal_reason", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
    )
    op.create_table(
        "tool_calls",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("idem_key", sa.String(300), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("effect", sa.String(16), nullable=False),
        sa.Column("idempotency", sa.String(16), nullable=False),
        sa.Column("args_hash", sa.String(64), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("result_sha256", sa.String(64), nullable=True),
        sa.Column("result_bytes", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reason_code", sa.String(64), nullable=True),
        sa.Column("reason", sa.String(1000), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tool_calls"),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_tool_calls_task_id_tasks", ondelete="RESTRICT"
        ),
        sa.UniqueConstraint("task_id", "call_id", name="uq_tool_calls_task_id_call_id"),
        sa.UniqueConstraint("task_id", "idem_key", name="uq_tool_calls_task_id_idem_key"),
    )
    op.create_index("ix_tool_calls_task_id_state", "tool_calls", ["task_id", "state"])
    op.create_index(
        "ix_tool_calls_state_lease_expires_ms", "tool_calls", ["state", "lease_expires_ms"]
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_row_id", sa.Integer(), nullable=True),
        sa.Column("call_id", sa.String(255), nullable=True),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("from_state", sa.String(32), nullable=True),
        sa.Column("to_state", sa.String(32), nullable=True),
        sa.Column("actor", sa.String(200), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
        sa.ForeignKeyConstraint(
            ["call_row_id"],
            ["tool_calls.id"],
            name="fk_audit_events_call_row_id_tool_calls",
            ondelete="RESTRICT",
        ),
    )
    op.create_index("ix_audit_events_task_id_id", "audit_events", ["task_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_task_id_id", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index("ix_tool_calls_state_lease_expires_ms", table_name="tool_calls")
    op.drop_index("ix_tool_calls_task_id_state", table_name="tool_calls")
    op.drop_table("tool_calls")
    op.drop_table("tasks")
