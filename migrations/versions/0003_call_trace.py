"""The trace each call was first seen in: ``tool_calls.trace_id`` / ``span_id``.

An operator goes from a call (``agent-gate tasks``, ``audit``, ``resume``) to its
trace in OpenTelemetry by these; a resume or a sweep links its own span to the one
stored here. Hex strings as W3C Trace Context writes them (32 and 16 digits); NULL
when the call was recorded without a sampled trace (no OpenTelemetry installed or
configured, or a ledger written before this revision).

Revision ID: 0003_call_trace
Revises: 0002_approvals_audit_chain
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_call_trace"
down_revision: str | Sequence[str] | None = "0002_approvals_audit_chain"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("span_id", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch:
        batch.drop_column("span_id")
        batch.drop_column("trace_id")
