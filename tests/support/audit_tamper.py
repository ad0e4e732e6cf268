"""What an attacker who can write the database does to the audit trail (for tests)."""

from __future__ import annotations

from sqlalchemy import Connection, select, text

from agent_gate.ledger.chain import GENESIS, entry_hash
from agent_gate.ledger.models import AUDIT_EVENTS


def reseal(conn: Connection) -> None:
    """What an attacker who can write the database does after editing entries: hash
    every task's chain again from the stored fields and move the heads to match."""
    events = AUDIT_EVENTS
    heads: dict[str, tuple[int, str]] = {}
    for row in conn.execute(select(events).order_by(events.c.id)).mappings().all():
        seq, prev = heads.get(row["task_id"], (0, GENESIS))
        digest = entry_hash(seq=seq + 1, prev_hash=prev, **{
            k: row[k] for k in ("at", "task_id", "call_row_id", "call_id", "event",
                                "from_state", "to_state", "actor", "detail")})
        conn.execute(text("UPDATE audit_events SET seq = :s, prev_hash = :p, hash = :h "
                          "WHERE id = :id"), {"s": seq + 1, "p": prev, "h": digest,
                                              "id": row["id"]})
        heads[row["task_id"]] = (seq + 1, digest)
    conn.execute(text("DELETE FROM audit_heads"))
    for task, (seq, digest) in heads.items():
        conn.execute(text("INSERT INTO audit_heads (task_id, seq, hash) VALUES (:t, :s, :h)"),
                     {"t": task, "s": seq, "h": digest})
