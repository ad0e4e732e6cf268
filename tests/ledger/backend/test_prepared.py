"""The ledger's prepared statements behave as Core's execution would.

``agent_gate.ledger.backend.prepared`` runs the hot statements on the driver's cursor; these
tests drive it through the ledger and directly, on a real SQLite file (and on
PostgreSQL when ``AGENT_GATE_TEST_POSTGRES_URL`` is set, see ``ledger_backends``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import bindparam, event, exc, insert, select

from agent_gate.ledger import Ledger, backend
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.backend.prepared import prepare
from agent_gate.ledger.models import TASKS
from agent_gate.ledger.records import NewCall
from agent_gate.ledger.states import CallState, Event

_TASKS = TASKS


def _new(call_id: str = "c1") -> NewCall:
    return NewCall(
        task_id="t1", call_id=call_id, idem_key=f"call:{call_id}", tool="noop",
        effect="write", idempotency="none", args_hash="0" * 64, arguments={"n": 1},
    )


def test_rows_written_by_the_prepared_path_read_back_identically_through_core(
    db_url: str,
) -> None:
    with Ledger(db_url) as ledger:
        rec, inserted = ledger.record(_new())
        assert inserted
        tr = ledger.claim(ledger.transition(rec, Event.ALLOW).record, owner="w", lease_ms=5000)
        assert tr.won and tr.record.state is CallState.EXECUTING
        with begin_read(ledger.engine) as conn:
            core = conn.execute(
                select(*[c for c in ledger_table().c]).where(ledger_table().c.id == rec.row_id)
            ).mappings().one()
        fast = ledger.get_row(rec.row_id)
        assert fast is not None
        # Datetimes written as the dialect writes them come back as the same instants.
        assert fast.started_at is not None and core["started_at"] is not None
        assert fast.started_at == _aware(core["started_at"])
        assert fast.updated_at == _aware(core["updated_at"])
        assert fast.lease_expires_ms == core["lease_expires_ms"]
        assert fast.lease_expires_ms is not None
        assert fast.lease_expires_ms > datetime.now(UTC).timestamp() * 1000
        assert ledger.verify_audit().ok


def test_a_driver_error_is_raised_as_sqlalchemy_would_with_parameters_hidden(
    db_url: str,
) -> None:
    with Ledger(db_url) as ledger:
        secret = "sk-live-do-not-echo"
        with pytest.raises(exc.IntegrityError) as raised, begin_write(ledger.engine) as conn:
            stmt = prepare(
                conn,
                "test_insert_task_without_created_at",
                lambda: insert(_TASKS).values(
                    id=bindparam("id"), created_at=bindparam("created_at"),
                    updated_at=bindparam("updated_at"), provider=bindparam("provider"),
                ),
            )
            stmt.run(conn, {"id": "t-x", "created_at": None, "updated_at": None,
                            "provider": secret})
        message = str(raised.value)
        assert "SQL parameters hidden" in message
        if ledger.engine.dialect.name == "sqlite":  # PostgreSQL itself quotes a failing row
            assert secret not in message
        # The failed transaction rolled back and the ledger goes on working.
        assert ledger.record(_new("c2"))[1]


def test_statement_listeners_see_the_hot_statements(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        seen: list[str] = []

        @event.listens_for(ledger.engine, "before_cursor_execute")
        def _watch(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
            seen.append(" ".join(statement.split()[:3]).upper())

        rec, _ = ledger.record(_new())
        ledger.transition(rec, Event.ALLOW)
        assert any(s.startswith("INSERT INTO TOOL_CALLS") for s in seen)
        assert any(s.startswith("UPDATE TOOL_CALLS SET") for s in seen)
        assert any(s.startswith("INSERT INTO AUDIT_EVENTS") for s in seen)


def ledger_table() -> Any:
    from agent_gate.ledger.models import TOOL_CALLS

    return TOOL_CALLS


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@pytest.mark.backends("postgresql")
def test_a_session_lost_mid_transaction_is_invalidated_and_the_next_write_reconnects(
    db_url: str,
) -> None:
    # No statement listeners here: the hot statements run on the driver itself.
    with Ledger(db_url) as ledger:
        rec, _ = ledger.record(_new())
        with pytest.raises(exc.OperationalError) as raised, begin_write(ledger.engine) as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with ledger.engine.connect() as other:
                other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
                other.commit()
            ledger.lock_task(backend.on(conn), rec.task_id)
        assert raised.value.connection_invalidated
        # Nothing committed; the pool hands out a live session next.
        now = ledger.get_row(rec.row_id)
        assert now is not None and now.state is CallState.RECEIVED
        assert ledger.transition(now, Event.ALLOW).won


@pytest.mark.backends("sqlite")
def test_a_busy_sqlite_database_raises_sqlalchemys_operational_error(
    db_url: str, tmp_path: Any
) -> None:
    import sqlite3

    with Ledger(db_url, busy_timeout=0.2) as ledger:
        holder = sqlite3.connect(str(tmp_path / "ledger.db"), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(exc.OperationalError, match="locked"):
                ledger.record(_new())
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert ledger.record(_new())[1]  # once the lock is gone, writes go on


@pytest.mark.backends("sqlite")
def test_an_echoing_engine_logs_the_hot_statements(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    with Ledger(db_url) as ledger:
        ledger.engine.echo = True
        with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
            rec, _ = ledger.record(_new())
            ledger.transition(rec, Event.ALLOW)
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert "INSERT INTO tool_calls" in logged
        assert "UPDATE tool_calls SET" in logged
        assert "BEGIN IMMEDIATE" in logged
