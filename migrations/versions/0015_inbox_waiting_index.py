"""The inbox's calls in ``ref`` order: a partial ``tool_calls (id)`` index.

The inbox lists the calls awaiting approval or in doubt, oldest (or newest) first by
row id, a page at a time (``views.inbox``). ``tool_calls (state)`` (revision 0008)
finds them, but on PostgreSQL its entries follow no id order, so a page's plan read
every waiting call (10,000 in the benchmark), probed each for a usable approval and
its deadline, and sorted them all to keep 51. This index holds those calls only
(``models.WAITING_WHERE``) in id order: the plan walks it and stops at the page's
limit, for one state or both, first page or deep. On SQLite ``(state)`` already gives
one state's rows in rowid order; this index serves both states at once there too.

What it costs a write: a row enters it when its call starts waiting for a person or
falls in doubt, and leaves when it stops; a call that runs without a person (most)
never touches it. Built inside the upgrade's transaction (no ``CONCURRENTLY``): on a
large PostgreSQL ledger it holds writes to ``tool_calls`` while it reads the table.

Revision ID: 0015_inbox_waiting_index
Revises: 0014_approval_edits
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_inbox_waiting_index"
down_revision: str | Sequence[str] | None = "0014_approval_edits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out, not imported from ``models``: a revision stays what it was when a later
# one changes the models.
_WAITING_WHERE = "state IN ('awaiting_approval', 'in_doubt')"


def upgrade() -> None:
    where = sa.text(_WAITING_WHERE)
    op.create_index("ix_tool_calls_id", "tool_calls", ["id"],
                    sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    op.drop_index("ix_tool_calls_id", table_name="tool_calls")
