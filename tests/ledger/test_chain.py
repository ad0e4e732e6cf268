"""The audit trail is one hash chain per task, bound by checkpoints: edits, deletions,
reorderings and truncations are named with their task, position and row."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from support.audit_tamper import reseal

from agent_gate.errors import AuditCheckpointRefused
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.audit import ChainReport
from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.chain import GENESIS, HEADS_MOVED, root_hash
from agent_gate.ledger.checkpoints import Checkpoint, checkpoints, take, write


def new_call(call_id: str, task: str = "t") -> NewCall:
    return NewCall(task_id=task, call_id=call_id, idem_key=f"call:{call_id}", tool="tool",
                   effect="write", idempotency="none", args_hash="0" * 64, arguments={})


@pytest.fixture
def ledger_with_history(sqlite_url: str) -> str:
    """A SQLite file, so the test can tamper with it directly. Two tasks, interleaved:
    ids 1-3 and 7-8 are task t0's #1..#5, ids 4-6 are task t1's #1..#3."""
    with Ledger(sqlite_url) as ledger:
        for i in range(3):
            rec, _ = ledger.record(new_call(f"c{i}", task=f"t{i % 2}"))
            ledger.transition(rec, Event.ALLOW, actor="test")
    return sqlite_url


def raw(url: str) -> sqlite3.Connection:
    return sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)


def verify(url: str, anchor: tuple[int, str] | None = None) -> ChainReport:
    with Ledger(url) as ledger:
        return ledger.verify_audit(anchor=anchor)


def checkpoint(url: str) -> Checkpoint:
    with Ledger(url) as ledger:
        return take(ledger.engine)


def _head(url: str, task: str) -> str:
    with raw(url) as db:
        return str(db.execute("SELECT hash FROM audit_heads WHERE task_id = ?",
                              (task,)).fetchone()[0])


def cut_back(url: str, task: str, keep: int) -> None:
    """Delete ``task``'s entries after #``keep`` and move its head back to match, as an
    attacker who hides the newest entries would."""
    with raw(url) as db:
        db.execute("DELETE FROM audit_events WHERE task_id = ? AND seq > ?", (task, keep))
        (seq, digest), = db.execute("SELECT seq, hash FROM audit_events WHERE task_id = ? "
                                    "AND seq = ?", (task, keep)).fetchall()
        db.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE task_id = ?",
                   (seq, digest, task))


def problem_of(url: str, anchor: tuple[int, str] | None = None) -> tuple[Any, ...]:
    problem = verify(url, anchor).problem
    assert problem is not None
    return problem.kind, problem.task_id, problem.seq, problem.row_id


def test_interleaved_tasks_get_independent_chains(ledger_with_history: str) -> None:
    report = verify(ledger_with_history)
    assert report.ok and report.entries == 8 and report.tasks == 2
    with Ledger(ledger_with_history) as ledger:
        entries = ledger.audit()
    # The position in the whole trail is the insertion order; each task counts its own.
    assert [e.seq for e in entries] == list(range(1, 9))
    assert [(e.task_id, e.task_seq) for e in entries] == [
        ("t0", 1), ("t0", 2), ("t0", 3), ("t1", 1), ("t1", 2), ("t1", 3), ("t0", 4), ("t0", 5)]
    with raw(ledger_with_history) as db:
        heads = dict((t, (s, h)) for t, s, h in db.execute("SELECT * FROM audit_heads"))
        for task in ("t0", "t1"):
            links = db.execute("SELECT seq, prev_hash, hash FROM audit_events WHERE task_id = ?"
                               " ORDER BY seq", (task,)).fetchall()
            assert links[0][1] == GENESIS
            assert all(links[i][1] == links[i - 1][2] for i in range(1, len(links)))
            assert heads[task] == (links[-1][0], links[-1][2])
    # Appending to one task leaves the other's head where it was.
    with Ledger(ledger_with_history) as ledger:
        ledger.ensure_task("t2")
        ledger.record_terminal("t1", "completed")
    with raw(ledger_with_history) as db:
        after = dict((t, (s, h)) for t, s, h in db.execute("SELECT * FROM audit_heads"))
    assert after["t0"] == heads["t0"] and after["t1"][0] == 4 and after["t2"][0] == 1
    assert verify(ledger_with_history).ok


def test_an_edited_entry_is_named(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET actor = 'someone-else' WHERE id = 7")
    assert problem_of(ledger_with_history) == ("edited", "t0", 4, 7)
    message = verify(ledger_with_history).problem.message  # type: ignore[union-attr]
    assert "audit entry #4 of task 't0' (row 7" in message and "edited" in message


def test_a_deleted_entry_is_named(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_events WHERE task_id = 't1' AND seq = 2")
    assert problem_of(ledger_with_history) == ("deleted", "t1", 2, None)
    assert "#2 of task 't1' was deleted" in verify(ledger_with_history).problem.message  # type: ignore[union-attr]


def test_deleting_the_newest_entries_of_a_task_is_noticed(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_events WHERE task_id = 't0' AND seq >= 4")
    assert problem_of(ledger_with_history) == ("deleted", "t0", 4, None)


def test_reordered_entries_are_named(ledger_with_history: str) -> None:
    # Swap the positions of two entries of t0: chain order != write order.
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET seq = -1 WHERE task_id = 't0' AND seq = 2")
        db.execute("UPDATE audit_events SET seq = 2 WHERE task_id = 't0' AND seq = 4")
        db.execute("UPDATE audit_events SET seq = 4 WHERE task_id = 't0' AND seq = -1")
    kind, task, seq, _ = problem_of(ledger_with_history)
    assert (kind, task, seq) == ("reordered", "t0", 2)


def test_an_entry_moved_to_another_task_is_an_edit(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET task_id = 't1', seq = 4 WHERE id = 8")
    assert problem_of(ledger_with_history)[0] == "edited"


def test_a_checkpoint_stores_only_the_heads_that_moved(ledger_with_history: str) -> None:
    first = checkpoint(ledger_with_history)
    assert (first.id, first.tasks, first.prev_hash) == (1, 2, GENESIS)
    assert checkpoint(ledger_with_history) == first  # nothing moved: no new checkpoint
    with Ledger(ledger_with_history) as ledger:
        ledger.record_terminal("t1", "completed")
    second = checkpoint(ledger_with_history)
    # The second binds the one head that moved: its root hashes t1's new head alone.
    assert (second.id, second.tasks, second.prev_hash) == (2, 1, first.hash)
    assert second.heads_format == HEADS_MOVED and second.root == root_hash([("t1", 4, _head(
        ledger_with_history, "t1"))])
    with raw(ledger_with_history) as db:
        stored = db.execute("SELECT checkpoint_id, task_id, seq FROM audit_checkpoint_heads "
                            "ORDER BY checkpoint_id, task_id").fetchall()
    assert stored == [(1, "t0", 5), (1, "t1", 3), (2, "t1", 4)]
    report = verify(ledger_with_history, anchor=(first.id, first.hash))
    assert report.ok and report.checkpoint == second


def test_deleting_a_whole_task_after_a_checkpoint_is_caught(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_events WHERE task_id = 't1'")
        db.execute("DELETE FROM audit_heads WHERE task_id = 't1'")
    assert problem_of(ledger_with_history) == ("deleted", "t1", 3, None)
    assert "the whole task was deleted" in verify(ledger_with_history).problem.message  # type: ignore[union-attr]
    # The next checkpoint reads only what moved: nothing did, so it is the same one, and
    # verify still names the deletion.
    assert checkpoint(ledger_with_history).id == 1
    # The task used again starts a new chain at #1: the writer refuses to bind it.
    with Ledger(ledger_with_history) as ledger:
        ledger.record_terminal("t1", "completed")
    with pytest.raises(AuditCheckpointRefused,
                       match="entry #3 of task 't1', which now has its head at #1"):
        checkpoint(ledger_with_history)


def test_truncating_a_chain_below_its_checkpointed_head_is_caught(
    ledger_with_history: str,
) -> None:
    checkpoint(ledger_with_history)
    cut_back(ledger_with_history, "t0", 4)
    assert problem_of(ledger_with_history) == ("truncated", "t0", 5, None)
    # The checkpoint's last leaf (t0's #5, row 8) is gone: the writer refuses to go on.
    with pytest.raises(AuditCheckpointRefused, match="row 8, the last leaf of checkpoint #1"):
        checkpoint(ledger_with_history)


def test_a_chain_rewritten_at_its_checkpointed_head_is_refused(
    ledger_with_history: str,
) -> None:
    with Ledger(ledger_with_history) as ledger:  # t1 ends the tree, t0's #5 inside it
        ledger.record_terminal("t1", "completed")
    checkpoint(ledger_with_history)
    cut_back(ledger_with_history, "t0", 4)
    # A new entry takes #5 again, with another hash: the writer refuses to bind it.
    with Ledger(ledger_with_history) as ledger:
        ledger.record_terminal("t0", "completed")
    with pytest.raises(AuditCheckpointRefused, match="now has its head at #5 with another hash"):
        checkpoint(ledger_with_history)


def test_a_chain_cut_below_its_checkpointed_head_and_grown_again_is_refused(
    ledger_with_history: str,
) -> None:
    with Ledger(ledger_with_history) as ledger:  # t1 ends the tree, t0's #5 inside it
        ledger.record_terminal("t1", "completed")
    checkpoint(ledger_with_history)
    cut_back(ledger_with_history, "t0", 3)
    with Ledger(ledger_with_history) as ledger:
        ledger.record_terminal("t0", "completed")
    with pytest.raises(AuditCheckpointRefused, match="bound entry #5 of task 't0', which now "
                                                     "has its head at #4: run"):
        checkpoint(ledger_with_history)


def test_a_checkpoint_never_binds_an_edited_entry(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with Ledger(ledger_with_history) as ledger:
        ledger.record_terminal("t1", "completed")
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET actor = 'someone-else' WHERE task_id = 't1' "
                   "AND seq = 4")
    with pytest.raises(AuditCheckpointRefused,
                       match=r"entry #4 of task 't1' \(row 9\) no longer matches its hash"):
        checkpoint(ledger_with_history)


def test_a_chain_rewritten_after_a_checkpoint_is_caught(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with Ledger(ledger_with_history) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("UPDATE audit_events SET actor = 'someone-else' WHERE id = 2"))
        reseal(conn)
    # The checkpoint bound t0's head (#5, row 8), whose hash covers #2 through the links.
    assert problem_of(ledger_with_history) == ("rewritten", "t0", 5, 8)


def test_an_edited_checkpoint_is_caught(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with Ledger(ledger_with_history) as ledger:
        ledger.ensure_task("t2")
    checkpoint(ledger_with_history)
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_checkpoints SET at = '2020-01-01 00:00:00.000000' WHERE id = 1")
    assert problem_of(ledger_with_history) == ("checkpoint", None, 1, None)
    # Its hash recomputed as well: then the next checkpoint's link to it breaks.
    with Ledger(ledger_with_history) as ledger, begin_write(ledger.engine) as conn:
        edited = checkpoints(conn)[0]
        conn.execute(text("UPDATE audit_checkpoints SET hash = :h WHERE id = 1"),
                     {"h": edited.recomputed_hash()})
    assert problem_of(ledger_with_history) == ("checkpoint", None, 2, None)
    assert "does not link to checkpoint #1" in verify(ledger_with_history).problem.message  # type: ignore[union-attr]


def test_an_edited_checkpoint_head_is_caught(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_checkpoint_heads SET seq = 2 WHERE task_id = 't1'")
    kind, _, seq, _ = problem_of(ledger_with_history)
    assert (kind, seq) == ("checkpoint", 1)
    assert "root is not the hash of the 2 task heads" in verify(ledger_with_history).problem.message  # type: ignore[union-attr]


def test_a_deleted_checkpoint_is_caught(ledger_with_history: str) -> None:
    checkpoint(ledger_with_history)
    with Ledger(ledger_with_history) as ledger:
        ledger.ensure_task("t2")
    checkpoint(ledger_with_history)
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_checkpoint_heads WHERE checkpoint_id = 1")
        db.execute("DELETE FROM audit_checkpoints WHERE id = 1")
    assert problem_of(ledger_with_history) == ("checkpoint", None, 1, None)


def test_a_trail_rewritten_wholesale_fails_only_against_an_anchor(
    ledger_with_history: str,
) -> None:
    kept = checkpoint(ledger_with_history)
    anchor = (kept.id, kept.hash)
    assert verify(ledger_with_history, anchor).ok
    assert problem_of(ledger_with_history, (kept.id, "f" * 64))[0] == "anchor"
    # Rewrite everything an attacker can: entries, heads and the checkpoints.
    with Ledger(ledger_with_history) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("UPDATE audit_events SET actor = 'someone-else' WHERE id = 2"))
        reseal(conn)
        conn.execute(text("DELETE FROM audit_checkpoint_heads"))
        conn.execute(text("DELETE FROM audit_checkpoints"))
        write(conn)
    assert verify(ledger_with_history).ok  # consistent with itself, not with the anchor:
    assert problem_of(ledger_with_history, anchor) == ("anchor", None, 1, None)


def test_concurrent_checkpoint_writers_on_sqlite_never_fork(sqlite_url: str) -> None:
    """``write`` inside one transaction twice: the second sees the first's position."""
    with Ledger(sqlite_url) as ledger:
        ledger.ensure_task("a")
        with begin_write(ledger.engine) as conn:
            one = write(conn)
            two = write(conn)
        assert one == two and one.id == 1


def test_each_format_hashes_the_same_through_the_fast_path_and_through_json() -> None:
    """The string-built body (fast path) and json.dumps (reference) agree for both
    formats, and the version is part of what is hashed."""
    import hashlib
    import json
    from datetime import UTC, datetime

    from agent_gate.ledger.chain import CHAIN_VERSION, LEGACY_VERSION, entry_hash, root_hash

    def reference(body: dict[str, Any]) -> str:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    at = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    fields = {"at": at, "task_id": "tâsk", "call_row_id": 3, "call_id": "c", "event": "claim",
              "from_state": "authorized", "to_state": "executing", "actor": None,
              "detail": '{"a":"\\u00e9"}'}
    digests = set()
    for version in (LEGACY_VERSION, CHAIN_VERSION):
        body = {"v": version, "seq": 7, "prev": GENESIS, "at_us": 1767268800123456,
                "task": "tâsk", "call_row": 3, "call": "c", "event": "claim",
                "from": "authorized", "to": "executing", "actor": None,
                "detail": '{"a":"\\u00e9"}'}
        fast = entry_hash(seq=7, prev_hash=GENESIS, version=version,
                          **fields)  # type: ignore[arg-type]
        assert fast == reference(body)
        # A bool is not an int to the fast path: json.dumps writes it, same result.
        odd = entry_hash(seq=7, prev_hash=GENESIS, version=version,
                         **{**fields, "call_row_id": True})  # type: ignore[arg-type]
        assert odd == reference({**body, "call_row": True})
        digests.add(fast)
    assert len(digests) == 2
    heads = [("b", 2, "f" * 64), ("a", 10, "e" * 64), ("é", 1, "d" * 64)]
    listed = json.dumps([list(h) for h in sorted(heads)], separators=(",", ":"),
                        ensure_ascii=False)
    assert root_hash(heads) == hashlib.sha256(listed.encode()).hexdigest()
    assert root_hash([]) == hashlib.sha256(b"[]").hexdigest()


def test_one_transaction_appending_to_several_tasks_links_each_chain(sqlite_url: str) -> None:
    from agent_gate.ledger import audit
    from agent_gate.ledger.backend import writing

    with Ledger(sqlite_url) as ledger:
        ledger.ensure_task("a")
        with writing(ledger.engine) as txn:
            for task in ("b", "a", "b", "c"):
                audit.append(txn, task_id=task, event="bulk")
        entries = ledger.audit()
        assert [(e.task_id, e.task_seq) for e in entries] == [
            ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("c", 1)]
        report = ledger.verify_audit()
        assert report.ok and report.tasks == 3


def test_a_transaction_with_more_entries_than_one_insert_holds_stays_in_order(
    sqlite_url: str,
) -> None:
    from agent_gate.ledger import audit
    from agent_gate.ledger.backend import writing

    with Ledger(sqlite_url) as ledger:
        with writing(ledger.engine) as txn:
            for i in range(150):  # three INSERT statements of up to 64 rows
                audit.append(txn, task_id="many", event="bulk", detail={"i": i})
        entries = ledger.audit(task_id="many")
        assert [e.task_seq for e in entries] == list(range(1, 151))
        assert [e.detail["i"] for e in entries] == list(range(150))  # type: ignore[index]
        assert ledger.verify_audit().ok


def test_a_checkpoint_after_an_old_format_one_skips_the_heads_it_bound_ahead_of_its_tree(
    ledger_with_history: str,
) -> None:
    """A checkpoint written before revision 0018 read the heads table in its own
    snapshot, which may run ahead of its tree (on PostgreSQL the tree stops at the
    settled bound). The next ones meet those heads again from below: not a cut chain,
    so nothing is refused and nothing is bound twice, and the mixed chain verifies."""
    with Ledger(ledger_with_history) as ledger:
        with begin_write(ledger.engine) as conn:
            write(conn, upto=3)  # leaves: t0's #1..#3
        with raw(ledger_with_history) as db:  # as the old writer left it: every head
            rows = db.execute("SELECT task_id, seq, hash FROM audit_heads").fetchall()
            db.execute("DELETE FROM audit_checkpoint_heads")
            db.executemany("INSERT INTO audit_checkpoint_heads VALUES (1, ?, ?, ?)", rows)
            db.execute("UPDATE audit_checkpoints SET heads_format = NULL, tasks = ?, root = ?",
                       (len(rows), root_hash(rows)))
        with begin_write(ledger.engine) as conn:
            old = checkpoints(conn)[0]
            conn.execute(text("UPDATE audit_checkpoints SET hash = :h"),
                         {"h": replace(old, hash="").recomputed_hash()})
            second = write(conn, upto=7)  # t1's #1..#3 and t0's #4: below t0's bound #5
            third = write(conn)  # t0's #5: the head the old one bound
        assert (second.tasks, third.tasks) == (0, 0)
        assert (second.tree_size, third.tree_size) == (7, 8)
        report = ledger.verify_audit()
    assert report.ok, report.problem
