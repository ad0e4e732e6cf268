"""Two indexes every call wrote and no read needs.

- ``tool_calls (state, lease_expires_ms)`` becomes ``(state)`` over the swept states
  only. Every transition of a call changed a row of the old index (its key is the
  state), and so did every lease renewal (its second column is the expiry), yet
  nothing searches by expiry: a lease's expiry is compared on the one row a
  compare-and-set names. Its only readers are the lookups across every task by state
  (``recover`` without a task, the operator's pending and in-doubt lists), which ask
  for ``awaiting_approval``, ``executing`` and ``in_doubt``. The new index holds only
  rows in those states (``models.SWEPT_WHERE``), so a call changes it when it starts
  and stops running (or waiting, or being in doubt), and on no other transition.
- ``audit_events (task_id, id)`` goes: ``UNIQUE (task_id, seq)`` orders a task's
  entries the same way (ids are drawn under the task's head lock, entry after entry,
  in chain order: ``audit``), and the readers that paged a task by id now page it by
  ``seq`` (``pages.audit_page``, ``audit.read``); the call's newest transition
  (``audit.audited_state``) is read through ``(call_row_id, id)``.

On SQLite the two cost about 3.5 of the ~21 WAL pages a call appended.
``tool_calls (task_id, state)`` stays: without it a page of tasks counts its calls by
reading each one from the table (measured: ``tasks_page`` 5.1 -> 8.4 ms, filtered by
``in_doubt`` 5.6 -> 29 ms on 30,000 calls), which the index answers alone.

Revision ID: 0008_fewer_write_indexes
Revises: 0007_pg_server_side_append
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_fewer_write_indexes"
down_revision: str | Sequence[str] | None = "0007_pg_server_side_append"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out, not imported from ``models``: a revision stays what it was when a later
# one changes the models.
_SWEPT_WHERE = "state IN ('awaiting_approval', 'executing', 'in_doubt')"


def upgrade() -> None:
    op.drop_index("ix_audit_events_task_id_id", table_name="audit_events")
    op.drop_index("ix_tool_calls_state_lease_expires_ms", table_name="tool_calls")
    where = sa.text(_SWEPT_WHERE)
    op.create_index("ix_tool_calls_state", "tool_calls", ["state"],
                    sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    op.drop_index("ix_tool_calls_state", table_name="tool_calls")
    op.create_index(
        "ix_tool_calls_state_lease_expires_ms", "tool_calls", ["state", "lease_expires_ms"]
    )
    op.create_index("ix_audit_events_task_id_id", "audit_events", ["task_id", "id"])
