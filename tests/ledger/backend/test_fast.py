"""The ledger's shortcuts decide exactly as the long way would.

Each shortcut (a transaction begun and committed on the SQLite driver, the
"is anyone watching" answer kept for a transaction, a new call returned by its own
``INSERT``, a task this ledger already knows not inserted again, the audit hash
text written without ``json.dumps``) is driven here through the public entry points
on a real database, in the situations where it must step aside or still agree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sqlite3
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, exc, select, text

from agent_gate.errors import TaskContextConflict
from agent_gate.ledger import Ledger, TaskRecord, backend
from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.chain import (
    CHAIN_VERSION,
    GENESIS,
    entry_hash,
    entry_parts,
    link_text,
    timestamp_us,
)
from agent_gate.ledger.models import TASKS
from agent_gate.ledger.records import NewCall
from agent_gate.ledger.states import CallState, Event


def _new(call_id: str, *, task: str = "t1", principal: str | None = None,
         scope: str | None = None, key: str | None = None) -> NewCall:
    return NewCall(
        task_id=task, call_id=call_id, idem_key=key or f"call:{call_id}", tool="noop",
        effect="write", idempotency="none", args_hash="0" * 64, arguments={"n": 1},
        principal=principal, scope=scope,
    )


def _one_call(ledger: Ledger, call_id: str) -> None:
    rec, _ = ledger.record(_new(call_id))
    rec = ledger.transition(rec, Event.ALLOW).record
    rec = ledger.claim(rec, owner="w", lease_ms=5000).record
    assert ledger.finish(rec, Event.SUCCEED, actor="w", lease_owner="w").won


@pytest.mark.backends("sqlite")
def test_driver_transactions_commit_once_each_and_a_commit_listener_still_sees_them(
    db_url: str,
) -> None:
    with Ledger(db_url) as ledger:
        seen: list[str] = []

        @event.listens_for(ledger.engine, "connect")
        def _trace(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.set_trace_callback(seen.append)

        ledger.engine.dispose()
        _one_call(ledger, "warm")  # connections are now kept between transactions
        seen.clear()
        _one_call(ledger, "c1")
        # record, allow, claim, finish: four write transactions, nothing else.
        assert [s for s in seen if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
            "BEGIN IMMEDIATE", "COMMIT"] * 4
        commits: list[object] = []

        def count(conn: object) -> None:
            commits.append(conn)

        event.listen(ledger.engine, "commit", count)
        _one_call(ledger, "c2")
        assert len(commits) == 4  # a listener makes every transaction go through Core
        event.remove(ledger.engine, "commit", count)
        _one_call(ledger, "c3")
        assert len(commits) == 4
        assert ledger.verify_audit().ok


@pytest.mark.backends("sqlite")
def test_a_listener_on_a_kept_connection_itself_sees_its_next_transactions(
    db_url: str,
) -> None:
    with Ledger(db_url) as ledger:
        _one_call(ledger, "warm")
        commits: list[object] = []

        def count(conn: object) -> None:
            commits.append(conn)

        with begin_write(ledger.engine) as conn:
            event.listen(conn, "commit", count)  # on this Connection, not the engine
            kept = conn
        for _ in range(3):  # the same kept connection serves the next write
            with begin_write(ledger.engine) as conn:
                assert conn is kept
                ledger.lock_task(backend.on(conn), "t1")
        assert commits == [kept, kept, kept]
        event.remove(kept, "commit", count)


@pytest.mark.backends("sqlite")
def test_core_statements_inside_a_driver_transaction_join_it(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        _one_call(ledger, "warm")
        insert = text("INSERT INTO tasks (id, created_at, updated_at) "
                      "VALUES (:id, '2026-01-01', '2026-01-01')")
        with pytest.raises(RuntimeError), begin_write(ledger.engine) as conn:
            ledger.lock_task(backend.on(conn), "t1")  # a prepared statement on the driver first
            conn.execute(insert, {"id": "doomed"})  # then Core: joins, does not BEGIN
            raise RuntimeError("roll it all back")
        assert ledger.task("doomed") is None
        with begin_write(ledger.engine) as conn:
            conn.execute(insert, {"id": "kept"})
            ledger.lock_task(backend.on(conn), "kept")
        assert isinstance(ledger.task("kept"), TaskRecord)
        _one_call(ledger, "after")  # the kept connection is clean for the next one


@pytest.mark.backends("sqlite")
def test_a_kept_connection_whose_begin_failed_still_joins_core_statements(
    db_url: str,
) -> None:
    """A ``BEGIN IMMEDIATE`` that fails in the ledger's ``begin`` listener (another
    writer holds the lock past the busy timeout) is raised from inside Core's begin,
    which then never ends: that ``Connection`` would never begin a transaction by
    itself again, so a Core statement in a later driver transaction on it would not
    join it (``_on_begin`` never asked: a deferred statement not sent first). The
    connection is never kept: the next transaction's Core statements join again."""
    path = db_url.removeprefix("sqlite:///")
    with Ledger(db_url, busy_timeout=0.05) as ledger:
        _one_call(ledger, "warm")
        statements: list[str] = []

        def seen(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
            statements.append(statement)

        event.listen(ledger.engine, "before_cursor_execute", seen)  # Core begins now
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(exc.OperationalError), begin_write(ledger.engine) as conn:
                ledger.lock_task(backend.on(conn), "t1")
        finally:
            blocker.rollback()
            blocker.close()
            event.remove(ledger.engine, "before_cursor_execute", seen)
        assert "BEGIN IMMEDIATE" in statements  # it failed where Core began
        with begin_write(ledger.engine) as conn:  # on the driver again, nobody listens
            conn.execute(text("SELECT 1"))
            assert conn.in_transaction(), "a Core statement did not join the transaction"
        _one_call(ledger, "after")


@pytest.mark.backends("sqlite")
def test_a_failed_statement_rolls_back_the_driver_transaction(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        _one_call(ledger, "warm")
        with pytest.raises(exc.IntegrityError), begin_write(ledger.engine) as conn:
            conn.execute(text("INSERT INTO tasks (id, created_at, updated_at) "
                              "VALUES ('half', '2026-01-01', '2026-01-01')"))
            conn.execute(text("INSERT INTO tasks (id) VALUES ('half')"))
        assert ledger.task("half") is None
        _one_call(ledger, "after")


def test_listeners_and_echo_set_after_connections_are_kept_see_the_next_transaction(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Ledger(db_url) as ledger:
        _one_call(ledger, "warm")
        seen: list[str] = []

        def watch(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
            seen.append(statement.split()[0].upper())

        event.listen(ledger.engine, "before_cursor_execute", watch)
        _one_call(ledger, "watched")
        assert seen.count("UPDATE") >= 3 and "INSERT" in seen and "SELECT" in seen
        event.remove(ledger.engine, "before_cursor_execute", watch)
        seen.clear()
        _one_call(ledger, "unwatched")
        assert seen == []
        if ledger.engine.dialect.name == "sqlite":
            ledger.engine.echo = True
            # A Connection takes its echo setting when it is made (Core's rule, and
            # the kept ones predate it): new ones log every statement and the commit.
            ledger.engine.dispose()
            with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
                _one_call(ledger, "echoed")
            ledger.engine.echo = False
            logged = " ".join(r.getMessage() for r in caplog.records)
            assert "UPDATE tool_calls SET" in logged and "COMMIT" in logged


def test_a_new_call_is_returned_as_it_reads_back(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        rec, inserted = ledger.record(_new("c1"))
        assert inserted
        assert rec == ledger.get("t1", "c1")
        again, inserted = ledger.record(_new("c1"))
        assert not inserted and again == rec
        # Another call id with the same key finds the first row.
        other, inserted = ledger.record(_new("c2", key="call:c1"))
        assert not inserted and other == rec


def test_without_insert_returning_a_new_call_is_read_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger(db_url) as ledger:
        monkeypatch.setattr(ledger.engine.dialect, "insert_returning", False)
        rec, inserted = ledger.record(_new("c1"))
        assert inserted and rec == ledger.get("t1", "c1")
        again, inserted = ledger.record(_new("c1"))
        assert not inserted and again == rec


def test_a_known_task_still_refuses_another_principal_and_binds_a_first_one(
    db_url: str,
) -> None:
    with Ledger(db_url) as ledger:
        ledger.record(_new("c1"))  # the task starts without a principal
        ledger.record(_new("c2"))  # known now: no second insert
        ledger.record(_new("c3", principal='{"p":"alice"}'))
        events = [a.event for a in ledger.audit(task_id="t1") if a.call_row_id is None]
        assert events == ["task_created", "task_bound"]
        ledger.record(_new("c4", principal='{"p":"alice"}'))
        with pytest.raises(TaskContextConflict):
            ledger.record(_new("c5", principal='{"p":"mallory"}'))
        with begin_write(ledger.engine) as conn:
            stored = conn.execute(select(TASKS.c.principal).where(TASKS.c.id == "t1")).scalar()
        assert stored == '{"p":"alice"}'
        assert [c.call_id for c in ledger.calls("t1")] == ["c1", "c2", "c3", "c4"]
        assert ledger.verify_audit().ok


def test_a_rolled_back_first_call_does_not_make_its_task_known(db_url: str) -> None:
    with Ledger(db_url) as ledger:

        def boom(_conn: Any, _rec: Any) -> Any:
            raise exc.OperationalError("SELECT 1", {}, Exception("lost"))

        with pytest.raises(exc.OperationalError):
            ledger.record(_new("c1", task="fresh"), decide=boom)
        assert ledger.task("fresh") is None
        rec, inserted = ledger.record(_new("c1", task="fresh"))
        assert inserted and ledger.task("fresh") is not None
        assert rec.state is CallState.RECEIVED


def test_the_audit_hash_text_is_json_dumps_text() -> None:
    rnd = random.Random(7)
    alphabet = ["a", '"', "\\", "\n", "\x00", "\x1f", "é", "\u2028", "\ud800", "😀", "/"]

    def text_or_none() -> str | None:
        if rnd.random() < 0.2:
            return None
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))

    def reference(body: dict[str, Any]) -> str:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def text_of(body: dict[str, Any], at: datetime) -> str:
        """What ``entry_hash`` hashes for ``body``: its fields around its link."""
        head, tail = entry_parts(
            at=at, task_id=body["task"], call_row_id=body["call_row"], call_id=body["call"],
            event=body["event"], from_state=body["from"], to_state=body["to"],
            actor=body["actor"], detail=body["detail"], version=body["v"],
        )
        return head + link_text(body["prev"], body["seq"]) + tail

    for _ in range(3000):
        at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=rnd.randint(-10**15, 10**16))
        body = {
            "v": 1, "seq": rnd.randint(0, 10**12), "prev": text_or_none(),
            "at_us": timestamp_us(at),
            "task": text_or_none(), "call_row": rnd.choice([None, rnd.randint(0, 10**9)]),
            "call": text_or_none(), "event": text_or_none(), "from": text_or_none(),
            "to": text_or_none(), "actor": text_or_none(), "detail": text_or_none(),
        }
        assert text_of(body, at) == reference(body)
    # Values of other types are left to json.dumps itself.
    at = datetime(2026, 1, 1, tzinfo=UTC)
    odd = {"v": 1, "seq": True, "prev": CallState.RECEIVED, "at_us": timestamp_us(at),
           "task": "t", "call_row": 1.5, "call": None, "event": Event.ALLOW, "from": None,
           "to": None, "actor": None, "detail": None}
    assert text_of(odd, at) == reference(odd)
    for _ in range(3000):  # entry_hash writes the same text for the types it expects
        fields = {
            "at": datetime(1970, 1, 1, tzinfo=UTC)
            + timedelta(microseconds=rnd.randint(-10**15, 10**16)),
            "task_id": text_or_none() or "", "call_row_id": rnd.choice([None, rnd.randint(0, 9)]),
            "call_id": text_or_none(), "event": text_or_none() or "x",
            "from_state": text_or_none(), "to_state": text_or_none(), "actor": text_or_none(),
            "detail": text_or_none(),
        }
        seq, prev = rnd.randint(1, 10**9), text_or_none() or GENESIS
        body = {"v": CHAIN_VERSION, "seq": seq, "prev": prev,
                "at_us": timestamp_us(fields["at"]), "task": fields["task_id"],
                "call_row": fields["call_row_id"], "call": fields["call_id"],
                "event": fields["event"], "from": fields["from_state"],
                "to": fields["to_state"], "actor": fields["actor"], "detail": fields["detail"]}
        digest = hashlib.sha256(reference(body).encode("utf-8", "surrogatepass")).hexdigest()
        assert entry_hash(seq=seq, prev_hash=prev, **fields) == digest
    fields = {"at": datetime(2026, 1, 1, tzinfo=UTC), "task_id": "t", "call_row_id": 3,
              "call_id": "c", "event": "claim", "from_state": "authorized",
              "to_state": "executing", "actor": "w", "detail": '{"version":2}'}
    body = {"v": CHAIN_VERSION, "seq": 1, "prev": GENESIS, "at_us": timestamp_us(fields["at"]),
            "task": "t", "call_row": 3, "call": "c", "event": "claim", "from": "authorized",
            "to": "executing", "actor": "w", "detail": '{"version":2}'}
    expected = hashlib.sha256(reference(body).encode("utf-8", "surrogatepass")).hexdigest()
    assert entry_hash(seq=1, prev_hash=GENESIS, **fields) == expected


def test_sqlite_timestamps_are_written_as_core_writes_them() -> None:
    from sqlalchemy import DateTime
    from sqlalchemy.dialects import sqlite

    from agent_gate.ledger.backend.prepared import bind_processor

    dialect = sqlite.dialect()
    column = DateTime(timezone=True)
    ours = bind_processor(column, dialect)
    core = column.dialect_impl(dialect).bind_processor(dialect)
    assert ours is not None and core is not None and ours is not core
    rnd = random.Random(11)
    zones = [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
    for _ in range(20000):
        value = datetime(
            rnd.randint(1, 9999), rnd.randint(1, 12), rnd.randint(1, 28), rnd.randint(0, 23),
            rnd.randint(0, 59), rnd.randint(0, 59), rnd.choice([0, rnd.randint(0, 999999)]),
            tzinfo=rnd.choice(zones),
        )
        assert ours(value) == core(value)
    # Dates and anything else still go to Core's processor (and its errors).
    assert ours(date(2026, 2, 3)) == core(date(2026, 2, 3))
    with pytest.raises(TypeError):
        ours("2026-01-01")
