"""The audit trail is one hash chain: edits, deletions and reorderings are named."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command

from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.chain import GENESIS
from agent_gate.ledger.dialect import begin_write, create_ledger_engine
from agent_gate.ledger.migrate import alembic_config


def new_call(call_id: str, task: str = "t") -> NewCall:
    return NewCall(task_id=task, call_id=call_id, idem_key=f"call:{call_id}", tool="tool",
                   effect="write", idempotency="none", args_hash="0" * 64, arguments={})


@pytest.fixture
def ledger_with_history(sqlite_url: str) -> str:
    """A SQLite file, so the test can tamper with it directly."""
    db_url = sqlite_url
    with Ledger(db_url) as ledger:
        for i in range(3):
            rec, _ = ledger.record(new_call(f"c{i}", task=f"t{i % 2}"))
            ledger.transition(rec, Event.ALLOW, actor="test")
    return db_url


def raw(url: str) -> sqlite3.Connection:
    return sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)


def verify(url: str):  # type: ignore[no-untyped-def]
    with Ledger(url) as ledger:
        return ledger.verify_audit()


def test_an_untouched_chain_verifies_and_links_every_entry(ledger_with_history: str) -> None:
    report = verify(ledger_with_history)
    assert report.ok and report.entries == 8  # 2 task_created + 3 received + 3 allow
    with Ledger(ledger_with_history) as ledger:
        entries = ledger.audit()
    assert [e.seq for e in entries] == list(range(1, 9))
    with raw(ledger_with_history) as db:
        links = db.execute("SELECT seq, prev_hash, hash FROM audit_events ORDER BY seq").fetchall()
        head = db.execute("SELECT seq, hash FROM audit_chain").fetchall()
    assert links[0][1] == GENESIS
    assert all(links[i][1] == links[i - 1][2] for i in range(1, len(links)))
    assert head == [(8, links[-1][2])] == [(report.head_seq, report.head_hash)]


def test_an_edited_entry_is_named(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET actor = 'someone-else' WHERE seq = 5")
    report = verify(ledger_with_history)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("edited", 5)
    assert "audit entry #5" in report.problem.message and "edited" in report.problem.message


def test_a_deleted_entry_is_named(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_events WHERE seq = 4")
    report = verify(ledger_with_history)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("deleted", 4)
    assert "#4 was deleted" in report.problem.message


def test_deleting_the_newest_entries_is_noticed(ledger_with_history: str) -> None:
    with raw(ledger_with_history) as db:
        db.execute("DELETE FROM audit_events WHERE seq >= 7")
    report = verify(ledger_with_history)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("deleted", 7)


def test_reordered_entries_are_named(ledger_with_history: str) -> None:
    # Swap the positions of two entries (their seq numbers): chain order != write order.
    with raw(ledger_with_history) as db:
        db.execute("UPDATE audit_events SET seq = -1 WHERE seq = 3")
        db.execute("UPDATE audit_events SET seq = 3 WHERE seq = 6")
        db.execute("UPDATE audit_events SET seq = 6 WHERE seq = -1")
    report = verify(ledger_with_history)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == ("reordered", 3)
    assert "audit entry #3" in report.problem.message and "reordered" in report.problem.message


def test_a_rewritten_chain_fails_against_an_anchor(ledger_with_history: str) -> None:
    anchor = (verify(ledger_with_history).head_seq, verify(ledger_with_history).head_hash)
    with Ledger(ledger_with_history) as ledger:
        assert ledger.verify_audit(anchor=anchor).ok
        assert not ledger.verify_audit(anchor=(anchor[0], "f" * 64)).ok


def test_upgrading_an_old_ledger_links_its_existing_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_ledger_engine(url)
    try:
        with begin_write(engine) as conn:
            command.upgrade(alembic_config(conn), "0001_ledger")
            conn.exec_driver_sql(
                "INSERT INTO audit_events (at, task_id, event) VALUES "
                "('2025-01-01 10:00:00.000000', 'old', 'task_created'), "
                "('2025-01-01 10:00:01.500000', 'old', 'response_ended')"
            )
    finally:
        engine.dispose()
    with Ledger(url, auto_upgrade=True) as ledger:
        ledger.ensure_task("new")
        report = ledger.verify_audit()
        assert report.ok and report.entries == 3
        assert [e.seq for e in ledger.audit()] == [1, 2, 3]
