"""PostgreSQL: the audit append and the pipeline's expectations run in the server.

A pipelined write transaction (``agent_gate.ledger.backend.pg_pipeline``) then needs one round
trip, its ``COMMIT`` included: nothing in it waits for an answer.

- ``agent_gate_audit_append(...)``: one transaction's entries, linked into their
  tasks' chains in one statement. It locks (or creates) each task's row of
  ``audit_heads`` in the order given (the client sorts the task ids, as the Python
  append does), then for each entry, in order, computes its hash with ``sha256``
  over the text the client wrote around the link (``chain.entry_parts``, as UTF-8
  bytes) with the link spliced in (``chain.LINK_SQL``), inserts it, and moves the
  heads. What is hashed is the same text ``chain.entry_hash`` hashes, so
  ``audit verify`` (Python) checks these entries like any other.
- ``agent_gate_expect(matched, wanted)``: raises ``EXPECTATION_FAILED`` unless a
  statement matched the rows its transaction assumed; that aborts the transaction
  (the ``COMMIT`` sent behind it rolls back), and the client raises
  ``pipeline.Unexpected``.

SQLite has neither: its appends run in the client (there is no network to save).
``sha256(bytea)`` is PostgreSQL 11's.

Revision ID: 0007_pg_server_side_append
Revises: 0006_audit_chains_by_task
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from agent_gate.ledger.chain import LINK_SQL
from agent_gate.ledger.backend.pg_pipeline import EXPECTATION_FAILED

revision: str = "0007_pg_server_side_append"
down_revision: str | Sequence[str] | None = "0006_audit_chains_by_task"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_APPEND = """
CREATE FUNCTION agent_gate_audit_append(
    p_tasks text[], p_genesis text,
    p_at timestamptz[], p_task_id text[], p_call_row_id integer[], p_call_id text[],
    p_event text[], p_from_state text[], p_to_state text[], p_actor text[],
    p_detail text[], p_head bytea[], p_tail bytea[]
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_seqs bigint[] := '{}';
    v_hashes text[] := '{}';
    v_seq bigint;
    v_prev text;
    v_hash text;
    t integer;
    i integer;
BEGIN
    -- Heads locked in the order given (task id order), the last locks taken.
    FOR t IN 1 .. coalesce(cardinality(p_tasks), 0) LOOP
        SELECT h.seq, h.hash INTO v_seq, v_prev
            FROM audit_heads h WHERE h.task_id = p_tasks[t] FOR UPDATE;
        IF NOT FOUND THEN
            -- The task's first entry; a racing writer's row is read once it commits.
            INSERT INTO audit_heads (task_id, seq, hash) VALUES (p_tasks[t], 0, p_genesis)
                ON CONFLICT DO NOTHING;
            IF FOUND THEN
                v_seq := 0;
                v_prev := p_genesis;
            ELSE
                SELECT h.seq, h.hash INTO STRICT v_seq, v_prev
                    FROM audit_heads h WHERE h.task_id = p_tasks[t] FOR UPDATE;
            END IF;
        END IF;
        v_seqs[t] := v_seq;
        v_hashes[t] := v_prev;
    END LOOP;
    -- One row at a time, in order: ids follow chain order.
    FOR i IN 1 .. coalesce(cardinality(p_task_id), 0) LOOP
        t := array_position(p_tasks, p_task_id[i]);
        v_seq := v_seqs[t] + 1;
        v_prev := v_hashes[t];
        v_hash := encode(sha256(
            p_head[i] || convert_to({link}, 'UTF8') || p_tail[i]), 'hex');
        INSERT INTO audit_events (at, task_id, call_row_id, call_id, event, from_state,
                                  to_state, actor, detail, seq, prev_hash, hash)
            VALUES (p_at[i], p_task_id[i], p_call_row_id[i], p_call_id[i], p_event[i],
                    p_from_state[i], p_to_state[i], p_actor[i], p_detail[i],
                    v_seq, v_prev, v_hash);
        v_seqs[t] := v_seq;
        v_hashes[t] := v_hash;
    END LOOP;
    FOR t IN 1 .. coalesce(cardinality(p_tasks), 0) LOOP
        UPDATE audit_heads h SET seq = v_seqs[t], hash = v_hashes[t]
            WHERE h.task_id = p_tasks[t];
    END LOOP;
END
$fn$
""".replace("{link}", LINK_SQL.format(prev="v_prev", seq="v_seq"))

_EXPECT = f"""
CREATE FUNCTION agent_gate_expect(p_matched bigint, p_wanted integer)
RETURNS boolean LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_matched <> p_wanted THEN
        RAISE EXCEPTION 'agent-gate: a statement matched % rows, its transaction assumed %',
            p_matched, p_wanted USING ERRCODE = '{EXPECTATION_FAILED}';
    END IF;
    RETURN true;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_APPEND)
    op.execute(_EXPECT)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION agent_gate_expect(bigint, integer)")
    op.execute(
        "DROP FUNCTION agent_gate_audit_append(text[], text, timestamptz[], text[], "
        "integer[], text[], text[], text[], text[], text[], text[], bytea[], bytea[])"
    )
