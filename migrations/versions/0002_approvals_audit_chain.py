"""Policy decisions, approvals, quotas, sealed arguments and the audit hash chain.

- ``tasks.principal`` / ``tasks.scope``: who a task acts for and what it may touch,
  so a resume decides as the application would;
- ``tool_calls.sealed_arguments`` / ``policy_hash`` / ``rule_ids``;
- ``approvals``: people's answers, bound to argument hash, policy hash and expiry;
- ``quota_charges``: what each authorized call added to each per-task counter;
- ``audit_events.seq`` / ``prev_hash`` / ``hash`` and the one-row ``audit_chain``
  head. Events written before this revision are linked into the chain here, in id
  order, so an upgraded ledger verifies from its first entry (in format 1, the one
  global chain, which revision 0006 splits by task).

Revision ID: 0002_approvals_audit_chain
Revises: 0001_ledger
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agent_gate.ledger.chain import GENESIS, LEGACY_VERSION, entry_hash

revision: str = "0002_approvals_audit_chain"
down_revision: str | Sequence[str] | None = "0001_ledger"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("principal", sa.Text(), nullable=True))
        batch.add_column(sa.Column("scope", sa.Text(), nullable=True))
    with op.batch_alter_table("tool_calls") as batch:
        batch.add_column(sa.Column("sealed_arguments", sa.Text(), nullable=True))
        batch.add_column(sa.Column("policy_hash", sa.String(80), nullable=True))
        batch.add_column(sa.Column("rule_ids", sa.Text(), nullable=True))

    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("call_row_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("args_hash", sa.String(64), nullable=False),
        sa.Column("policy_hash", sa.String(80), nullable=True),
        sa.Column("decided_by", sa.String(200), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consumed_attempt", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_approvals"),
        sa.ForeignKeyConstraint(
            ["call_row_id"], ["tool_calls.id"],
            name="fk_approvals_call_row_id_tool_calls", ondelete="RESTRICT",
        ),
    )
    op.create_index("ix_approvals_call_row_id_id", "approvals", ["call_row_id", "id"])

    op.create_table(
        "quota_charges",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("call_row_id", sa.Integer(), nullable=False),
        sa.Column("counter", sa.String(300), nullable=False),
        sa.Column("amount", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_quota_charges"),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name="fk_quota_charges_task_id_tasks", ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["call_row_id"], ["tool_calls.id"],
            name="fk_quota_charges_call_row_id_tool_calls", ondelete="RESTRICT",
        ),
        sa.UniqueConstraint("call_row_id", "counter", name="uq_quota_charges_call_row_id_counter"),
    )
    op.create_index("ix_quota_charges_task_id_counter", "quota_charges", ["task_id", "counter"])

    audit_chain = op.create_table(
        "audit_chain",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_chain"),
    )

    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("prev_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("hash", sa.String(64), nullable=True))

    # Link the events already there, oldest first.
    conn = op.get_bind()
    events = sa.table(
        "audit_events",
        sa.column("id", sa.Integer()), sa.column("at", sa.DateTime(timezone=True)),
        sa.column("task_id", sa.String()), sa.column("call_row_id", sa.Integer()),
        sa.column("call_id", sa.String()), sa.column("event", sa.String()),
        sa.column("from_state", sa.String()), sa.column("to_state", sa.String()),
        sa.column("actor", sa.String()), sa.column("detail", sa.Text()),
        sa.column("seq", sa.BigInteger()), sa.column("prev_hash", sa.String()),
        sa.column("hash", sa.String()),
    )
    seq, prev = 0, GENESIS
    rows = conn.execute(sa.select(events).order_by(events.c.id)).mappings().all()
    for row in rows:
        seq += 1
        digest = entry_hash(
            seq=seq, prev_hash=prev, at=row["at"], task_id=row["task_id"],
            call_row_id=row["call_row_id"], call_id=row["call_id"], event=row["event"],
            from_state=row["from_state"], to_state=row["to_state"], actor=row["actor"],
            detail=row["detail"], version=LEGACY_VERSION,
        )
        conn.execute(
            sa.update(events).where(events.c.id == row["id"])
            .values(seq=seq, prev_hash=prev, hash=digest)
        )
        prev = digest
    op.bulk_insert(audit_chain, [{"id": 1, "seq": seq, "hash": prev}])

    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column("seq", existing_type=sa.BigInteger(), nullable=False)
        batch.alter_column("prev_hash", existing_type=sa.String(64), nullable=False)
        batch.alter_column("hash", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint("uq_audit_events_seq", ["seq"])


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_seq", type_="unique")
        batch.drop_column("hash")
        batch.drop_column("prev_hash")
        batch.drop_column("seq")
    op.drop_table("audit_chain")
    op.drop_index("ix_quota_charges_task_id_counter", table_name="quota_charges")
    op.drop_table("quota_charges")
    op.drop_index("ix_approvals_call_row_id_id", table_name="approvals")
    op.drop_table("approvals")
    with op.batch_alter_table("tool_calls") as batch:
        batch.drop_column("rule_ids")
        batch.drop_column("policy_hash")
        batch.drop_column("sealed_arguments")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("scope")
        batch.drop_column("principal")
