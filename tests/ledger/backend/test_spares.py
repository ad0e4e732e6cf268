"""SQLite connections kept between transactions (``backend.begin_write``/``begin_read``).

Real SQLite files; what a user would notice if the reuse went wrong: a pragma set
for new connections that never applies, an engine (and its file handles) that
outlives an unclosed ledger, a failed transaction that poisons the next one.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.records import NewCall


def _new(call_id: str) -> NewCall:
    return NewCall(task_id="t", call_id=call_id, idem_key=f"call:{call_id}", tool="noop",
                   effect="read", idempotency="natural", args_hash="0" * 64, arguments={})


def _driver(conn: Any) -> Any:
    return conn.connection.driver_connection


def test_consecutive_transactions_reuse_one_connection_and_a_failed_one_does_not_poison_it(
    tmp_path: Path,
) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        with begin_write(ledger.engine) as conn:
            first = _driver(conn)
        with begin_write(ledger.engine) as conn:
            assert _driver(conn) is first
        ledger.record(_new("before"))
        with pytest.raises(RuntimeError), begin_write(ledger.engine) as conn:
            conn.exec_driver_sql("INSERT INTO tasks (id, created_at, updated_at) "
                                 "VALUES ('doomed', '2026-01-01', '2026-01-01')")
            raise RuntimeError("rolled back")
        assert ledger.task("doomed") is None and ledger.task("t") is not None
        assert ledger.record(_new("after"))[1]  # the reused connection writes again
        with begin_read(ledger.engine) as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM tool_calls").scalar() == 2


def test_after_dispose_new_connections_are_made_so_connect_hooks_apply(tmp_path: Path) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        ledger.record(_new("c1"))  # a connection with synchronous=FULL is now kept

        @event.listens_for(ledger.engine, "connect")
        def _normal(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA synchronous = NORMAL")

        ledger.engine.dispose()
        with begin_write(ledger.engine) as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1


def test_an_unclosed_ledger_lets_its_engine_go(tmp_path: Path) -> None:
    def use() -> weakref.ref[Any]:
        ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}", create=True)
        ledger.record(_new("c1"))
        ledger.get("t", "c1")
        return weakref.ref(ledger.engine)

    engine = use()
    gc.collect()
    assert engine() is None
