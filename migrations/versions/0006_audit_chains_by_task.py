"""The audit trail for many writers: one hash chain per task, bound by checkpoints.

- ``audit_heads (task_id, seq, hash)``: each task's newest link, locked by an append
  to that task only; it replaces the one-row ``audit_chain`` every append locked.
- ``audit_checkpoints`` / ``audit_checkpoint_heads``: roots over every task head,
  chained, with only the heads that changed stored per checkpoint.
- ``audit_events.seq`` counts within the task (unique per ``task_id, seq``).

Existing entries are linked again, in id order, into per-task chains (format 2), and
a first checkpoint binds their heads. It also records the old global chain's head
(seq, hash) and its newest entry id, read from ``audit_chain`` as stored (not
recomputed, so a chain already broken before the upgrade stays visibly broken):
``audit verify`` recomputes the old chain (format 1) over those entries and checks
it still ends there, and recognises an anchor exported before the upgrade as a
position of it.

Revision ID: 0006_audit_chains_by_task
Revises: 0005_listing_indexes
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from agent_gate.ledger.chain import GENESIS, LEGACY_VERSION, checkpoint_hash, entry_hash, root_hash

revision: str = "0006_audit_chains_by_task"
down_revision: str | Sequence[str] | None = "0005_listing_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FORMAT = 2
"""The entry format this revision writes (``chain.CHAIN_VERSION`` when it was written)."""
_BATCH = 500

_EVENTS = sa.table(
    "audit_events",
    sa.column("id", sa.Integer()), sa.column("at", sa.DateTime(timezone=True)),
    sa.column("task_id", sa.String()), sa.column("call_row_id", sa.Integer()),
    sa.column("call_id", sa.String()), sa.column("event", sa.String()),
    sa.column("from_state", sa.String()), sa.column("to_state", sa.String()),
    sa.column("actor", sa.String()), sa.column("detail", sa.Text()),
    sa.column("seq", sa.BigInteger()), sa.column("prev_hash", sa.String()),
    sa.column("hash", sa.String()),
)
_FIELDS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state", "to_state",
           "actor", "detail")


def _relink(conn: sa.Connection, chain_of: Any, version: int) -> dict[Any, tuple[int, str]]:
    """Link every entry again, in id order, into the chain ``chain_of(row)`` names;
    returns each chain's head."""
    heads: dict[Any, tuple[int, str]] = {}
    move = (sa.update(_EVENTS).where(_EVENTS.c.id == sa.bindparam("b_id"))
            .values(seq=sa.bindparam("b_seq"), prev_hash=sa.bindparam("b_prev"),
                    hash=sa.bindparam("b_hash")))
    pending: list[dict[str, Any]] = []
    rows = conn.execute(sa.select(_EVENTS).order_by(_EVENTS.c.id)).mappings().all()
    for row in rows:
        key = chain_of(row)
        seq, prev = heads.get(key, (0, GENESIS))
        seq += 1
        digest = entry_hash(seq=seq, prev_hash=prev, version=version,
                            **{k: row[k] for k in _FIELDS})
        heads[key] = (seq, digest)
        pending.append({"b_id": row["id"], "b_seq": seq, "b_prev": prev, "b_hash": digest})
        if len(pending) >= _BATCH:
            conn.execute(move, pending)
            pending = []
    if pending:
        conn.execute(move, pending)
    return heads


def upgrade() -> None:
    heads_table = op.create_table(
        "audit_heads",
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_audit_heads"),
    )
    checkpoints = op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tasks", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("legacy_seq", sa.BigInteger(), nullable=True),
        sa.Column("legacy_hash", sa.String(64), nullable=True),
        sa.Column("legacy_last_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_checkpoints"),
    )
    bound = op.create_table(
        "audit_checkpoint_heads",
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", "task_id", name="pk_audit_checkpoint_heads"),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"], ["audit_checkpoints.id"],
            name="fk_audit_checkpoint_heads_checkpoint_id_audit_checkpoints",
            ondelete="RESTRICT",
        ),
    )
    op.create_index("ix_audit_checkpoint_heads_task_id_checkpoint_id",
                    "audit_checkpoint_heads", ["task_id", "checkpoint_id"])

    conn = op.get_bind()
    old = conn.execute(sa.text("SELECT seq, hash FROM audit_chain WHERE id = 1")).first()
    last_id = conn.execute(sa.select(sa.func.max(_EVENTS.c.id))).scalar()
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_seq", type_="unique")
    heads = _relink(conn, lambda row: row["task_id"], FORMAT)
    if heads:
        conn.execute(sa.insert(heads_table), [
            {"task_id": task, "seq": seq, "hash": digest}
            for task, (seq, digest) in sorted(heads.items())
        ])
    with op.batch_alter_table("audit_events") as batch:
        batch.create_unique_constraint("uq_audit_events_task_id_seq", ["task_id", "seq"])

    if last_id is not None:
        legacy_seq, legacy_hash = (int(old[0]), str(old[1])) if old else (0, GENESIS)
        at = datetime.now(UTC)
        root = root_hash((task, seq, digest) for task, (seq, digest) in heads.items())
        digest = checkpoint_hash(
            checkpoint_id=1, prev_hash=GENESIS, at=at, tasks=len(heads), root=root,
            legacy_seq=legacy_seq, legacy_hash=legacy_hash, legacy_last_id=int(last_id),
        )
        conn.execute(sa.insert(checkpoints).values(
            id=1, at=at, tasks=len(heads), root=root, prev_hash=GENESIS, hash=digest,
            legacy_seq=legacy_seq, legacy_hash=legacy_hash, legacy_last_id=int(last_id),
        ))
        conn.execute(sa.insert(bound), [
            {"checkpoint_id": 1, "task_id": task, "seq": seq, "hash": head}
            for task, (seq, head) in sorted(heads.items())
        ])
    op.drop_table("audit_chain")


def downgrade() -> None:
    audit_chain = op.create_table(
        "audit_chain",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_chain"),
    )
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_task_id_seq", type_="unique")
    heads = _relink(op.get_bind(), lambda row: None, LEGACY_VERSION)
    seq, digest = heads.get(None, (0, GENESIS))
    op.bulk_insert(audit_chain, [{"id": 1, "seq": seq, "hash": digest}])
    with op.batch_alter_table("audit_events") as batch:
        batch.create_unique_constraint("uq_audit_events_seq", ["seq"])
    op.drop_index("ix_audit_checkpoint_heads_task_id_checkpoint_id",
                  table_name="audit_checkpoint_heads")
    op.drop_table("audit_checkpoint_heads")
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_heads")
