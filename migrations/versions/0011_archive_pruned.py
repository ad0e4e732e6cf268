"""Retention: what ``agent-gate audit archive`` leaves of the entries and calls it prunes.

``audit_pruned`` keeps, for each pruned ``audit_events`` row, its id, task, ``seq``,
``prev_hash``, ``hash`` and RFC 6962 leaf hash (about 200 bytes, no content), under
the archive batch that pruned it: the Merkle tree of every checkpoint and each task's
chain are still recomputed over them, and the batch's own audit entry (``archived``)
commits to their root. ``archived_calls`` is the tombstone of each pruned call, by
(task, call id) and (task, dedupe key): intake answers a re-delivered pruned call from
it and never runs it again.

The database itself refuses to record a tombstoned call anew: a trigger on
``tool_calls`` raises when a new row's (task, call id) or (task, dedupe key) is in
``archived_calls`` (two primary/unique-key lookups), and the insert, its transaction
and everything pipelined behind it roll back. Intake never reads the tombstone on the
common path (a read there was a third PostgreSQL round trip per call); it maps the
error to ``pruned.ArchivedCall`` and only then reads the stored outcome.

- SQLite: ``BEFORE INSERT``, ``RAISE(ABORT, 'agent_gate_archived ...')`` (an
  ``IntegrityError``, ``SQLITE_CONSTRAINT_TRIGGER``). A writer holds the database's
  write lock from ``BEGIN IMMEDIATE``, so an archive batch cannot commit between the
  check and the insert.
- PostgreSQL: a plpgsql function raising SQLSTATE ``23AG1`` (class 23, integrity: an
  ``IntegrityError`` on every driver), fired ``AFTER INSERT`` for each row. Not
  ``BEFORE``: an insert racing an archive batch that deleted the same identity
  waits on the unique index for that batch to commit and then succeeds (the row it
  conflicted with is gone); a ``BEFORE`` trigger has looked already, with a snapshot
  from before that commit, and lets the call be recorded anew. An ``AFTER`` row
  trigger runs once the row is in the indexes, waits included, and its query takes a
  new snapshot (``READ COMMITTED``): it sees the batch's tombstone.

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


REFUSED = "agent_gate_archived"
"""How the refusal's message starts (``pruned.REFUSED``)."""
REFUSED_SQLSTATE = "23AG1"
"""PostgreSQL's SQLSTATE of the refusal (``pruned.REFUSED_SQLSTATE``)."""
_MESSAGE = f"{REFUSED}: this call was pruned by audit archive and is never recorded again"

_SQLITE_TRIGGER = f"""
CREATE TRIGGER agent_gate_archived_calls BEFORE INSERT ON tool_calls
WHEN EXISTS (SELECT 1 FROM archived_calls
             WHERE task_id = NEW.task_id AND call_id = NEW.call_id)
  OR EXISTS (SELECT 1 FROM archived_calls
             WHERE task_id = NEW.task_id AND idem_key = NEW.idem_key)
BEGIN
    SELECT RAISE(ABORT, '{_MESSAGE}');
END
"""

_PG_FUNCTION = f"""
CREATE FUNCTION agent_gate_refuse_archived() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM archived_calls
               WHERE task_id = NEW.task_id AND call_id = NEW.call_id)
       OR EXISTS (SELECT 1 FROM archived_calls
                  WHERE task_id = NEW.task_id AND idem_key = NEW.idem_key) THEN
        RAISE EXCEPTION '{_MESSAGE}' USING ERRCODE = '{REFUSED_SQLSTATE}';
    END IF;
    RETURN NULL;
END
$fn$
"""

_PG_TRIGGER = """
CREATE TRIGGER agent_gate_archived_calls AFTER INSERT ON tool_calls
FOR EACH ROW EXECUTE FUNCTION agent_gate_refuse_archived()
"""


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
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER agent_gate_archived_calls"
               + (" ON tool_calls" if op.get_bind().dialect.name == "postgresql" else ""))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION agent_gate_refuse_archived()")
    op.drop_table("archived_calls")
    op.drop_table("audit_pruned")
