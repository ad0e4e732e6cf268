"""PostgreSQL: row ids and the columns naming them are 64-bit.

``SERIAL`` made them ``integer`` with ``integer`` sequences: at five audit entries a
call, ``audit_events.id`` runs out after about 430 million calls, and from then on
every write fails ("nextval: reached maximum value"). SQLite needs nothing: its row
ids are 64-bit whatever a column is declared as.

Each column is widened in place (``ALTER COLUMN ... TYPE bigint``), each owned
sequence with it (``ALTER SEQUENCE ... AS bigint``, which lifts its maximum), and
revision 0007's ``agent_gate_audit_append`` takes ``bigint[]`` row ids: its body is
read back from the server and created again with the one type changed, so it stays
what 0007 made it. What it costs: PostgreSQL rewrites each widened table and its
indexes while holding it locked; on a large ledger, run the upgrade in a quiet hour.

Revision ID: 0016_bigint_row_ids
Revises: 0015_inbox_waiting_index
Create Date: 2026-12-06
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_bigint_row_ids"
down_revision: str | Sequence[str] | None = "0015_inbox_waiting_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS: dict[str, tuple[str, ...]] = {
    "tool_calls": ("id",),
    "audit_events": ("id", "call_row_id"),
    "audit_checkpoints": ("legacy_last_id",),
    "approvals": ("id", "call_row_id"),
    "approval_grants": ("id", "approval_id"),
    "approval_grant_uses": ("grant_id", "call_row_id"),
    "approval_deadlines": ("call_row_id",),
    "approval_edits": ("id", "call_row_id", "approval_id"),
    "quota_charges": ("id", "call_row_id"),
    "operators": ("id",),
    "mcp_events": ("seq",),
}
"""Written out, not read from ``models``: a revision stays what it was."""

_SERIAL = {("tool_calls", "id"), ("audit_events", "id"), ("approvals", "id"),
           ("approval_grants", "id"), ("approval_edits", "id"), ("quota_charges", "id"),
           ("operators", "id"), ("mcp_events", "seq")}

_APPEND_ARGS = ("text[], text, timestamptz[], text[], {ids}[], text[], text[], text[], "
                "text[], text[], text[], bytea[], bytea[]")


def _retype(kind: str) -> None:
    bind = op.get_bind()
    for table, columns in _COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.BigInteger() if kind == "bigint"
                            else sa.Integer())
            if (table, column) in _SERIAL:
                sequence = bind.execute(sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                                        {"t": table, "c": column}).scalar_one()
                # Unqualified, as every statement here: the ledger's schema is the
                # connection's search path, never a name written into the upgrade.
                op.execute(f"ALTER SEQUENCE {sequence.rsplit('.', 1)[-1]} AS {kind}")
    old = "integer" if kind == "bigint" else "bigint"
    signature = f"agent_gate_audit_append({_APPEND_ARGS.format(ids=old)})"
    body = bind.execute(sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"),
                        {"f": signature}).scalar_one()
    retyped = re.sub(r"FUNCTION \S+\.agent_gate_audit_append\(",
                     "FUNCTION agent_gate_audit_append(", body, count=1)
    retyped = retyped.replace(f"p_call_row_id {old}[]", f"p_call_row_id {kind}[]", 1)
    assert f"p_call_row_id {kind}[]" in retyped, "agent_gate_audit_append: no row ids argument"
    op.execute(f"DROP FUNCTION {signature}")
    op.execute(retyped)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _retype("bigint")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _retype("integer")
