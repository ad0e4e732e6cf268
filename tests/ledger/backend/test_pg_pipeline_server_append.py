"""Revision 0007's functions: the audit append and the expectations, in the server.

A pipelined transaction (``agent_gate.ledger.backend.pg_pipeline``) links its audit entries
with ``agent_gate_audit_append`` and checks the compare-and-sets it assumed won with
``agent_gate_expect``, so its ``COMMIT`` need not wait for any answer. The hashes the
server computes must be the ones ``chain.entry_hash`` computes (``audit verify`` is
Python), and a failed expectation must commit nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, select, text, update

from agent_gate.ledger import Ledger, audit
from agent_gate.ledger.backend import begin_write, pg_fast, writing
from agent_gate.ledger.backend.pg_pipeline import PipelinedTxn, Unexpected
from agent_gate.ledger.backend.prepared import opened, prepare
from agent_gate.ledger.chain import entry_hash
from agent_gate.ledger.models import AUDIT_EVENTS, AUDIT_HEADS, TASKS
from agent_gate.ledger.records import NewCall
from agent_gate.ledger.states import CallState, Event

pytestmark = pytest.mark.backends("postgresql")

AWKWARD = [
    'quote " and backslash \\ and slash /',
    "newline \n tab \t cr \r backspace \b formfeed \f",
    "controls \x01 \x1f escape \x1b del \x7f",
    "é ü ß ñ — “curly” ‘single’",
    "line separator \u2028 paragraph \u2029",
    "astral 😀 𝄞 and CJK 漢字",
    '\\u00e9 written out, and "{}" braces',
    "",
]
"""Text ``json``'s encoder escapes (quotes, backslashes, control characters) or
writes as UTF-8 (``ensure_ascii=False``: everything else). PostgreSQL text cannot
hold NUL, so neither can the ledger's columns."""


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    with Ledger(db_url, storage="fast") as opened_ledger:
        yield opened_ledger


@pytest.fixture
def server_links(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many entries each call of the server-side append linked (it still runs)."""
    calls: list[int] = []
    real = pg_fast.link_in_server

    def spy(pipe: Any, entries: list[dict[str, Any]]) -> None:
        calls.append(len(entries))
        real(pipe, entries)

    monkeypatch.setattr(pg_fast, "link_in_server", spy)
    return calls


def python_hashes(ledger: Ledger) -> list[tuple[str, str, str]]:
    """Every entry's (stored prev_hash, stored hash, hash chain.entry_hash computes)."""
    with begin_write(ledger.engine) as conn:
        rows = conn.execute(select(AUDIT_EVENTS).order_by(AUDIT_EVENTS.c.id)).mappings().all()
    fields = ("at", "task_id", "call_row_id", "call_id", "event", "from_state", "to_state",
              "actor", "detail")
    return [
        (row["prev_hash"], row["hash"],
         entry_hash(seq=row["seq"], prev_hash=row["prev_hash"], **{k: row[k] for k in fields}))
        for row in rows
    ]


def test_the_server_hashes_awkward_text_as_python_does_and_verify_agrees(
    ledger: Ledger, server_links: list[int]
) -> None:
    """Entries of several tasks in one transaction (linked in task id order, each
    after its own predecessor), with text json escapes or writes as UTF-8 in every
    text column the hash covers."""
    at = datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    with writing(ledger.engine) as txn:
        state = opened(txn.conn)
        assert state is not None and state.pipe is not None  # pipelined
        for n, awkward in enumerate(AWKWARD):
            task = ("tâsk-ü", "b\"\\", "a")[n % 3]
            audit.append(
                txn, task_id=task, event=f"ev{awkward}"[:64], call_id=awkward or None,
                from_state=awkward[:32] or None, to_state=awkward[-32:] or None,
                actor=awkward, detail={"text": awkward, "n": n},
                at=at + timedelta(microseconds=n * 1_000_001),
            )
    with writing(ledger.engine) as txn:  # after the heads moved
        audit.append(txn, task_id="a", event="second", actor=AWKWARD[3])
        audit.append(txn, task_id="tâsk-ü", event="second", actor=AWKWARD[5])
    assert server_links == [len(AWKWARD), 2]
    hashes = python_hashes(ledger)
    assert len(hashes) == len(AWKWARD) + 2
    assert all(stored == computed for _, stored, computed in hashes)
    entries = ledger.audit()
    for task in ("tâsk-ü", 'b"\\', "a"):
        assert [e.task_seq for e in entries if e.task_id == task] == list(
            range(1, 1 + sum(1 for e in entries if e.task_id == task)))
    with begin_write(ledger.engine) as conn:
        heads = dict(conn.execute(select(AUDIT_HEADS.c.task_id, AUDIT_HEADS.c.hash)).all())
    newest = {e.task_id: e.hash for e in entries}
    assert heads == newest
    report = ledger.verify_audit()
    assert report.ok, report.to_dict()
    assert report.tasks == 3


def test_a_gate_calls_entries_are_linked_in_the_server_and_verify(
    ledger: Ledger, server_links: list[int]
) -> None:
    """The common path: a call recorded, decided and claimed in one commit, finished
    in a second, each transaction's entries linked by the function."""
    from agent_gate import Gate, ToolRegistry

    tools = ToolRegistry()
    tools.register(lambda text: {"echo": text}, name="echo",
                   schema={"type": "object", "properties": {"text": {"type": "string"}}})
    with Gate(tools, ledger) as gate:
        for n, awkward in enumerate(AWKWARD):
            outcome = gate.execute("täsk", {"call_id": f"c{n}-{awkward}", "name": "echo",
                                            "arguments": {"text": awkward}})
            assert outcome.state is CallState.SUCCEEDED
    assert len(server_links) >= 2 * len(AWKWARD)
    assert all(stored == computed for _, stored, computed in python_hashes(ledger))
    assert ledger.verify_audit().ok


def test_a_failed_expectation_commits_nothing(ledger: Ledger) -> None:
    """A compare-and-set sent without waiting matches no row: the server raises, the
    COMMIT sent in the same round trip rolls back (the task inserted before it and
    the audit entry after it included), and the caller gets ``Unexpected``."""
    ledger.ensure_task("t")
    now = datetime.now(UTC)
    with pytest.raises(Unexpected), writing(ledger.engine) as txn:
        conn = txn.conn
        state = opened(conn)
        assert state is not None and state.pipe is not None
        prepare(conn, "t_insert_task", lambda: TASKS.insert().values(
            id=bindparam("id"), created_at=bindparam("at"), updated_at=bindparam("at"),
        )).run(conn, {"id": "never", "at": now})
        missed = prepare(conn, "t_cas_missing", lambda: update(TASKS)
                         .where(TASKS.c.id == bindparam("w_id"))
                         .values(provider=bindparam("provider"))
                         .returning(TASKS.c.id)).run(conn, {"w_id": "no-such", "provider": "p"})
        state.pipe.expect(missed, 1)
        audit.append(txn, task_id="t", event="never")
    assert ledger.task("never") is None
    assert [e.event for e in ledger.audit(task_id="t")] == ["task_created"]
    assert ledger.verify_audit().ok
    with begin_write(ledger.engine) as conn:  # the pooled connection still works
        assert conn.execute(text("SELECT 1")).scalar() == 1


def test_a_transition_that_lost_its_race_in_the_server_commits_nothing(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Ledger.transition`` of a row another writer moved since it was read: the
    arrow's compare-and-set is checked in the server (nothing waits for it), misses,
    and the transition reports the row as it is now; its audit entry never commits."""
    expected: list[int] = []
    real = PipelinedTxn.expect

    def expect(self: PipelinedTxn, pending: Any, rowcount: int) -> None:
        expected.append(rowcount)
        real(self, pending, rowcount)

    monkeypatch.setattr(PipelinedTxn, "expect", expect)
    new = NewCall(task_id="t", call_id="c1", idem_key="call:c1", tool="noop", effect="write",
                  idempotency="none", args_hash="0" * 64, arguments={})
    stale, inserted = ledger.record(new)
    assert inserted and stale.state is CallState.RECEIVED
    moved = ledger.transition(stale, Event.ALLOW)
    assert moved.won and moved.record.state is CallState.AUTHORIZED
    expected.clear()
    again = ledger.transition(stale, Event.ALLOW, actor="late")
    assert expected == [1]  # sent without waiting, checked in the server
    assert not again.won and again.record.state is CallState.AUTHORIZED
    assert [e.event for e in ledger.audit(call_id="c1")] == ["received", "allow"]
    assert ledger.verify_audit().ok


def test_a_transaction_with_more_entries_than_one_statement_carries_links_them_all(
    ledger: Ledger, server_links: list[int]
) -> None:
    """More entries than one call of the function takes (``pg_fast._ROWS_PER_CALL``),
    over several tasks: each chunk names every task, so the heads are still locked
    in task id order by the first, and the chains continue across chunks."""
    count = pg_fast._ROWS_PER_CALL + 6
    with writing(ledger.engine) as txn:
        for n in range(count):
            audit.append(txn, task_id=("c", "a", "b")[n % 3], event="bulk", detail={"n": n})
    assert server_links == [count]
    entries = ledger.audit()
    assert [e.detail for e in entries] == [{"n": n} for n in range(count)]  # in order
    for task in "abc":
        seqs = [e.task_seq for e in entries if e.task_id == task]
        assert seqs == list(range(1, len(seqs) + 1))
    assert all(stored == computed for _, stored, computed in python_hashes(ledger))
    assert ledger.verify_audit().ok
