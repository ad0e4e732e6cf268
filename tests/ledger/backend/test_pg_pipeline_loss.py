"""A lost connection on the pipelined path (``agent_gate.ledger.backend.pg_pipeline``).

No pool pre-ping: a session the server ended while its connection sat in the pool
is found out at checkout (its socket is readable) or, when that cannot see it, by
the first round trip of the next transaction, which (on a connection idle for
``pipeline.PROBE_AFTER_IDLE_S``) committed nothing and is sent again on a new
connection. A connection lost at a later round trip, or at the one
that carries the COMMIT, is never retried: the ledger never acts on a write it did
not see commit. The tools count their runs in this process; the sessions are ended
with ``pg_terminate_backend`` from another connection.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import psycopg
import pytest
from ledger_backends import PgSchema
from sqlalchemy import Insert, bindparam, exc, insert
from support.counting import counting_tools

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import begin_write, spares
from agent_gate.ledger.backend import pg_pipeline as pipeline
from agent_gate.ledger.backend.pg_pipeline import PipelinedTxn
from agent_gate.ledger.backend.prepared import opened, prepare
from agent_gate.ledger.records import TASKS

pytestmark = pytest.mark.backends("postgresql")


def terminate(pg: PgSchema, pids: list[int]) -> None:
    """End these sessions and wait (bounded) until the server has let them go."""
    with pg.admin.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        for pid in pids:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
        deadline = time.monotonic() + 20
        while conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%(p)s)", {"p": pids}
        ).scalar():
            assert time.monotonic() < deadline, "terminated sessions never went away"
            time.sleep(0.01)


def kept_pids(ledger: Ledger) -> list[int]:
    """The server pids of the connections the ledger keeps for its pipelined writes
    between transactions (``spares._kept_write``), outside the pool."""
    kept = spares.spares_of(ledger.engine).write
    return sorted(c.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
                  for c in kept)


def pooled_pids(ledger: Ledger) -> list[int]:
    """The server pids of the connections idle in the ledger's pool."""
    held = [ledger.engine.raw_connection() for _ in range(ledger.engine.pool.checkedin())]
    try:
        drivers = [c.driver_connection for c in held]
        assert all(isinstance(d, psycopg.Connection) for d in drivers)
        return sorted(d.info.backend_pid for d in drivers)  # type: ignore[union-attr]
    finally:
        for c in held:
            c.close()  # back to the pool


@pytest.mark.parametrize("socket_check", [True, False], ids=["checkout", "first_round_trip"])
def test_a_session_ended_in_the_pool_is_replaced_and_the_next_call_runs_once(
    db_url: str, pg: PgSchema, monkeypatch: pytest.MonkeyPatch, socket_check: bool
) -> None:
    """``first_round_trip``: the checkout's socket check is switched off, as for a
    session dropped silently: the error at the first round trip is what finds it,
    and the transaction (nothing of it committed) is sent again. The pooled sessions
    count as idle (``PROBE_AFTER_IDLE_S`` 0 s), where silent drops are found: their
    first round trip leaves the COMMIT out. (One that answered within that time
    commits in its first round trip, and a drop found there is raised as lost.)"""
    ran: list[str] = []
    ledger = Ledger(db_url, storage="fast")
    with Gate(counting_tools(ran), ledger) as gate:
        first = gate.execute("t", {"call_id": "c1", "name": "post", "arguments": {"text": "a"}})
        assert first.state is CallState.SUCCEEDED
        # Two sessions idle in the pool and the one kept for writes, all ended below,
        # as after a failover: the replay must not be handed another dead one.
        held = [ledger.engine.raw_connection() for _ in range(2)]
        for c in held:
            c.close()
        kept = kept_pids(ledger)
        assert len(kept) == 1
        pids = pooled_pids(ledger) + kept
        assert len(pids) >= 3
        if not socket_check:
            monkeypatch.setattr(pipeline, "alive", lambda _driver: True)
            monkeypatch.setattr(pipeline, "PROBE_AFTER_IDLE_S", 0.0)
        terminate(pg, pids)
        replays: list[bool] = []
        real = PipelinedTxn._replay

        def replay(self: PipelinedTxn, error: Exception) -> None:
            replays.append(True)
            real(self, error)

        monkeypatch.setattr(PipelinedTxn, "_replay", replay)
        second = gate.execute("t", {"call_id": "c2", "name": "post", "arguments": {"text": "b"}})
        assert second.state is CallState.SUCCEEDED and second.attempt == 1
        assert not second.replayed
        assert not set(pooled_pids(ledger) + kept_pids(ledger)) & set(pids)
    assert ran == ["a", "b"]
    assert replays == ([] if socket_check else [True])
    with Ledger(db_url) as again:
        assert again.verify_audit().ok
        assert [e.event for e in again.audit("t") if e.call_id == "c2"] == [
            "received", "allow", "claim", "succeed"]


def test_a_session_lost_at_the_outcome_commit_is_not_retried(
    db_url: str, pg: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome's COMMIT goes out on a session the server has just ended: the
    error reaches the caller and the outcome is not sent again: its tool ran once.

    The session ends once the COMMIT is handed to the driver, before its round trip
    is answered (a session found gone before that is sent again: nothing of it could
    commit). The server may have committed it before it ended (the statements go out
    as they are handed over) or not: the call is ``succeeded`` or still ``executing``
    (a sweeper later judges it in doubt), never run again, and its trail verifies."""
    ran: list[str] = []
    commits: list[int] = []
    real = PipelinedTxn._leave

    def leave(self: PipelinedTxn, *, committing: bool) -> None:
        if committing:
            commits.append(1)
            if len(commits) == 2:  # the first commits the claim, the second the outcome
                terminate(pg, [self.driver.info.backend_pid])
        real(self, committing=committing)

    monkeypatch.setattr(PipelinedTxn, "_leave", leave)
    replays: list[bool] = []
    real_replay = PipelinedTxn._replay

    def replay(self: PipelinedTxn, error: Exception) -> None:
        replays.append(True)
        real_replay(self, error)

    monkeypatch.setattr(PipelinedTxn, "_replay", replay)
    gate = Gate(counting_tools(ran), Ledger(db_url, storage="fast"))
    with gate, pytest.raises(exc.OperationalError) as caught:
        gate.execute("t", {"call_id": "c1", "name": "post", "arguments": {"text": "x"}})
    assert caught.value.connection_invalidated
    assert "'x'" not in str(caught.value)  # parameters are hidden
    assert ran == ["x"] and len(commits) == 2 and replays == []
    with Ledger(db_url) as ledger:
        rec = ledger.get("t", "c1")
        assert rec is not None and rec.attempt == 1
        assert rec.state in (CallState.EXECUTING, CallState.SUCCEEDED)
        assert ledger.verify_audit().ok


def test_an_error_in_a_pipelined_statement_is_the_typed_error_and_commits_nothing(
    db_url: str, pg: PgSchema
) -> None:
    """A statement whose answer nobody reads fails (a unique key): the COMMIT sent
    behind it does not commit, and the error raised is Core's IntegrityError for
    that statement, parameters hidden."""
    ledger = Ledger(db_url, storage="fast")

    def stmt() -> Insert:
        return insert(TASKS).values(
            id=bindparam("id"), created_at=bindparam("at"), updated_at=bindparam("at"))

    now = datetime.now(UTC)
    try:
        with pytest.raises(exc.IntegrityError) as caught, begin_write(ledger.engine) as conn:
            state = opened(conn)
            assert state is not None and state.pipe is not None  # pipelined
            prepare(conn, "t_task", stmt).run(conn, {"id": "secret-task", "at": now})
            prepare(conn, "t_task", stmt).run(conn, {"id": "secret-task", "at": now})
        assert "INSERT INTO tasks" in str(caught.value)
        assert "[SQL parameters hidden" in str(caught.value)
        assert ledger.task("secret-task") is None
        with begin_write(ledger.engine) as conn:  # the pooled connection still works
            prepare(conn, "t_task", stmt).run(conn, {"id": "other", "at": now})
        assert ledger.task("other") is not None
    finally:
        ledger.close()
