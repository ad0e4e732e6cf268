"""Indexes the operator listings read in order, so a page costs what it shows.

- ``tasks (updated_at, id)``: ``agent-gate tasks`` (and ``GET /api/tasks``) pages by
  recency, newest first; without it every page sorted the whole tasks table.
- ``audit_events (call_row_id, id)``: one call's history (``call show``,
  ``audit --call``) in order, instead of every entry of its task filtered.

Revision ID: 0005_listing_indexes
Revises: 0004_operators
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_listing_indexes"
down_revision: str | Sequence[str] | None = "0004_operators"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_tasks_updated_at_id", "tasks", ["updated_at", "id"])
    op.create_index("ix_audit_events_call_row_id_id", "audit_events", ["call_row_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_call_row_id_id", table_name="audit_events")
    op.drop_index("ix_tasks_updated_at_id", table_name="tasks")
