"""Each checkpoint commits to every entry so far through an RFC 6962 Merkle tree, grown
from the previous checkpoint's frontier, and ``audit verify`` recomputes it."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select, text

from agent_gate.evidence.merkle import Tree, leaf_hash
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.chain import entry_parts, entry_text
from agent_gate.ledger.checkpoints import Checkpoint, take
from agent_gate.ledger.models import AUDIT_EVENTS
from agent_gate.ledger.trail_tree import FIELDS


def new_call(call_id: str, task: str = "t") -> NewCall:
    return NewCall(task_id=task, call_id=call_id, idem_key=f"call:{call_id}", tool="tool",
                   effect="write", idempotency="none", args_hash="0" * 64, arguments={})


def run_calls(ledger: Ledger, start: int, count: int) -> None:
    for i in range(start, start + count):
        rec, _ = ledger.record(new_call(f"c{i}", task=f"t{i % 3}"))
        ledger.transition(rec, Event.ALLOW, actor="test")


def texts(ledger: Ledger) -> list[bytes]:
    """Every entry's hashed text in id order, rebuilt here from the stored columns."""
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(AUDIT_EVENTS).order_by(AUDIT_EVENTS.c.id)).mappings().all()
    out = []
    for row in rows:
        head, tail = entry_parts(**{k: row[k] for k in FIELDS})
        data = entry_text(head, row["prev_hash"], row["seq"], tail).encode()
        assert hashlib.sha256(data).hexdigest() == row["hash"]
        out.append(data)
    return out


def test_a_checkpoint_commits_to_every_entry_with_an_rfc6962_root(db_url: str) -> None:
    merkle = pytest.importorskip("proofbundle.merkle")
    with Ledger(db_url) as ledger:
        run_calls(ledger, 0, 5)
        first = take(ledger.engine)
        size = len(texts(ledger))
        run_calls(ledger, 5, 4)
        second = take(ledger.engine)
        leaves = texts(ledger)
    assert (first.tree_size, second.tree_size) == (size, len(leaves))
    assert 0 < size < len(leaves)
    # An independent implementation of RFC 6962 over the same leaf data.
    assert bytes.fromhex(second.tree_root or "") == merkle.merkle_tree_hash(leaves)
    assert bytes.fromhex(first.tree_root or "") == merkle.merkle_tree_hash(leaves[:size])
    assert second.recomputed_hash() == second.hash  # the tree is part of the hash


def test_the_next_checkpoint_hashes_only_the_new_entries(sqlite_url: str) -> None:
    """Proven by planting a lie in an old entry after the first checkpoint: the second
    one's root is the honest one (the old entry was never read again), and verify,
    which reads everything, names the edit."""
    with Ledger(sqlite_url) as ledger:
        run_calls(ledger, 0, 4)
        take(ledger.engine)
        honest = texts(ledger)
        with begin_write(ledger.engine) as conn:
            conn.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = 1"))
        run_calls(ledger, 4, 2)
        second = take(ledger.engine)
        now = texts_unchecked(ledger)
        assert second.tree_root == Tree([leaf_hash(d) for d in honest + now[len(honest):]]
                                        ).root().hex()
        report = ledger.verify_audit()
    assert report.problem is not None and report.problem.kind == "edited"


def texts_unchecked(ledger: Ledger) -> list[bytes]:
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(AUDIT_EVENTS).order_by(AUDIT_EVENTS.c.id)).mappings().all()
    return [entry_text(*_around(row)).encode() for row in rows]


def _around(row: object) -> tuple[str, str, int, str]:
    head, tail = entry_parts(**{k: row[k] for k in FIELDS})  # type: ignore[index]
    return head, row["prev_hash"], row["seq"], tail  # type: ignore[index]


def test_no_new_entry_no_new_checkpoint_but_a_pre_tree_checkpoint_gets_one(
    sqlite_url: str,
) -> None:
    with Ledger(sqlite_url) as ledger:
        run_calls(ledger, 0, 2)
        made = take(ledger.engine)
        assert take(ledger.engine) == made
        with begin_write(ledger.engine) as conn:  # as a checkpoint from before 0010
            conn.execute(text("UPDATE audit_checkpoints SET tree_size = NULL, "
                              "tree_last_id = NULL, tree_root = NULL, tree_frontier = NULL"))
            from agent_gate.ledger.checkpoints import checkpoints

            old = checkpoints(conn)[0]
            conn.execute(text("UPDATE audit_checkpoints SET hash = :h"),
                         {"h": old.recomputed_hash()})
        again = take(ledger.engine)
        assert (again.id, again.tree_size) == (2, made.tree_size)
        assert again.tree_root == made.tree_root
        assert ledger.verify_audit().ok


@pytest.mark.parametrize("column, value, kind", [
    ("tree_frontier", "'" + "ab" * 32 + "'", "tree"),
    ("tree_root", "'" + "cd" * 32 + "'", "checkpoint"),
    ("tree_size", "tree_size + 1", "checkpoint"),
])
def test_a_checkpoints_tree_edited_in_the_database_is_caught(
    sqlite_url: str, column: str, value: str, kind: str
) -> None:
    with Ledger(sqlite_url) as ledger:
        run_calls(ledger, 0, 3)
        take(ledger.engine)
        with begin_write(ledger.engine) as conn:
            conn.execute(text(f"UPDATE audit_checkpoints SET {column} = {value}"))
        report = ledger.verify_audit()
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (kind, 1)


def test_a_checkpoint_whose_tree_and_hash_were_both_recomputed_is_caught(
    sqlite_url: str,
) -> None:
    """An attacker who drops an entry and rebuilds the checkpoint's hash over a root of
    their choosing: the tree verify recomputes from the entries differs."""
    with Ledger(sqlite_url) as ledger:
        run_calls(ledger, 0, 3)
        take(ledger.engine)
        with begin_write(ledger.engine) as conn:
            conn.execute(text("UPDATE audit_checkpoints SET tree_size = 5, tree_root = :r"),
                         {"r": "ef" * 32})
            from agent_gate.ledger.checkpoints import checkpoints

            cp: Checkpoint = checkpoints(conn)[0]
            conn.execute(text("UPDATE audit_checkpoints SET hash = :h"),
                         {"h": cp.recomputed_hash()})
        report = ledger.verify_audit()
    assert report.problem is not None and report.problem.kind == "tree"
    assert "holds 5 entries" in report.problem.message


def test_the_row_fast_path_computes_the_same_hash_and_leaf(db_url: str) -> None:
    from agent_gate.ledger.chain import entry_leaf, row_leaf

    with Ledger(db_url) as ledger:
        run_calls(ledger, 0, 4)
        with ledger.engine.connect() as conn:
            rows = conn.execute(select(AUDIT_EVENTS)).mappings().all()
    assert rows
    for row in rows:
        reference = entry_leaf(seq=row["seq"], prev_hash=row["prev_hash"],
                               **{k: row[k] for k in FIELDS})
        assert row_leaf(row) == reference and reference[0] == row["hash"]
