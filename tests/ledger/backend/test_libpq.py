"""The pipelined transaction's statements on libpq (``agent_gate.ledger.backend._libpq``).

Statements a session has sent often enough are prepared on the server under names of
the ledger's own, and the server may forget them behind the ledger's back (psycopg's
``DEALLOCATE ALL`` after a rollback, an operator's ``DISCARD ALL``): the next
transaction then fails at its first statement, commits nothing, and is sent again
unnamed. Each call still runs exactly once and its trail verifies.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event
from support.counting import counting_tools

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import pg_pipeline as pipeline
from agent_gate.ledger.backend._libpq import _convert
from agent_gate.ledger.backend.spares import release_idle

pytestmark = pytest.mark.backends("postgresql")


def names_prepared(ledger: Ledger) -> list[str]:
    """The ledger's own prepared statements on its idle session."""
    release_idle(ledger.engine)  # the session it keeps for writes, back in the pool
    raw = ledger.engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert driver is not None
        rows = driver.execute(  # type: ignore[attr-defined]
            "SELECT name FROM pg_prepared_statements WHERE name LIKE 'ag\\_%'"
        ).fetchall()
        return sorted(row[0] for row in rows)
    finally:
        raw.close()


def forget_names(ledger: Ledger, how: str) -> None:
    """Make the server forget every prepared statement of the pooled session, as it
    happens in the field: an explicit ``DEALLOCATE ALL``, or psycopg's own after it
    rolls back a transaction on a connection with statements it prepared itself."""
    release_idle(ledger.engine)
    raw = ledger.engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        if how == "deallocate":
            driver.execute("DEALLOCATE ALL")
            driver.commit()
        else:
            for _ in range(driver.prepare_threshold + 2):  # psycopg prepares it
                driver.execute("SELECT count(*) FROM tool_calls WHERE id > %s", (0,))
            driver.rollback()  # a transaction was open: ROLLBACK, then DEALLOCATE ALL
        assert not driver.execute(
            "SELECT count(*) FROM pg_prepared_statements"
        ).fetchone()[0]
        driver.rollback()
    finally:
        raw.close()


def calls(gate: Gate, first: int, count: int) -> None:
    for n in range(first, first + count):
        outcome = gate.execute(
            "t", {"call_id": f"c{n}", "name": "post", "arguments": {"text": str(n)}})
        assert outcome.state is CallState.SUCCEEDED


def test_the_session_prepares_what_it_sends_often(db_url: str) -> None:
    """After a few calls the per-call statements run by name (parsed and planned once
    per session); a connection whose ``prepare_threshold`` is None prepares none."""
    ran: list[str] = []
    with Gate(counting_tools(ran), Ledger(db_url, storage="fast")) as gate:
        calls(gate, 0, 8)
        named = names_prepared(gate.ledger)
    assert len(named) >= 5  # BEGIN, the insert, the updates, the audit append, COMMIT

    ledger = Ledger(db_url, storage="fast")

    @event.listens_for(ledger.engine, "connect")
    def _never(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.prepare_threshold = None

    ledger.engine.dispose()
    with Gate(counting_tools(ran), ledger) as gate:
        calls(gate, 8, 8)
        assert names_prepared(gate.ledger) == []
    assert ran == [str(n) for n in range(16)]


@pytest.mark.parametrize("how", ["deallocate", "psycopg_rollback"])
def test_names_the_server_forgot_are_sent_again_unnamed(db_url: str, how: str) -> None:
    ran: list[str] = []
    retried: list[bool] = []
    real = pipeline.PipelinedTxn._sent_unnamed

    def sent_unnamed(self: pipeline.PipelinedTxn, wire: Any) -> bool:
        again = real(self, wire)
        retried.append(again)
        return again

    ledger = Ledger(db_url, storage="fast")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline.PipelinedTxn, "_sent_unnamed", sent_unnamed)
        with Gate(counting_tools(ran), ledger) as gate:
            calls(gate, 0, 8)
            assert names_prepared(ledger)
            forget_names(ledger, how)
            calls(gate, 8, 4)  # the first of these finds the names gone
            assert names_prepared(ledger)  # and the session prepares afresh
    assert retried == [True]
    assert ran == [str(n) for n in range(12)]
    with Ledger(db_url) as again:
        assert again.verify_audit().ok
        trail = [e.event for e in again.audit("t") if e.call_id == "c8"]
        assert trail == ["received", "allow", "claim", "succeed"]


@pytest.mark.parametrize(
    ("sql", "query", "names"),
    [
        ("SELECT %(a)s, %(b)s, %(a)s", b"SELECT $1, $2, $1", ("a", "b")),
        ("SELECT %s, %s", b"SELECT $1, $2", None),
        ("SELECT '100%%', %(x)s", b"SELECT '100%', $1", ("x",)),
        ("COMMIT", b"COMMIT", None),
    ],
)
def test_placeholders_are_converted_as_psycopg_does(
    sql: str, query: bytes, names: tuple[str, ...] | None
) -> None:
    converted = _convert(sql)
    assert (converted.query, converted.names) == (query, names)


@pytest.mark.parametrize("sql", ["SELECT 5 % 2", "SELECT %s, %(a)s", "SELECT %(a)s, %s"])
def test_placeholders_psycopg_would_refuse_are_refused(sql: str) -> None:
    with pytest.raises(ValueError):
        _convert(sql)
