"""A transactional tool writes through the ledger's own transaction: its write and the
call's outcome commit together. Killed (SIGKILL) before the commit, neither exists and
the next gate runs the call again; after it, both exist and nothing runs again. Both
backends; the write counted in a table of the ledger's database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from support import WORKERS
from support.kill_points import kill_at_mark

from agent_gate import CallState, Gate, GateUsageError, ToolRegistry
from agent_gate.errors import ToolDefinitionError
from agent_gate.gate.transactional import current_transaction

WORKER = WORKERS / "txn_worker.py"


def credits(db_url: str) -> list[int]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [r[0] for r in conn.execute(text("SELECT amount FROM engine_credits"))]
    finally:
        engine.dispose()


@pytest.fixture
def ledger_with_table(db_url: str) -> str:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE engine_credits (amount INTEGER NOT NULL)"))
    engine.dispose()
    return db_url


def run_worker(db_url: str, tmp_path: Path, hang: str | None = None) -> subprocess.Popen[str]:
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    env = dict(os.environ, AG_MARKS=str(marks))
    env.pop("AG_HANG", None)
    if hang:
        env["AG_HANG"] = hang
    return subprocess.Popen([sys.executable, str(WORKER), db_url, "task", "call-1", "7"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_at(db_url: str, tmp_path: Path, point: str) -> None:
    kill_at_mark(run_worker(db_url, tmp_path, point), tmp_path / "marks", point)


def again(db_url: str, tmp_path: Path) -> dict[str, object]:
    proc = run_worker(db_url, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_killed_before_the_commit_neither_exists_and_it_runs_again(
    ledger_with_table: str, tmp_path: Path
) -> None:
    kill_at(ledger_with_table, tmp_path, "before-commit")
    assert credits(ledger_with_table) == []  # the insert died with the transaction
    with Gate(ToolRegistry(), ledger_with_table) as gate:
        (row,) = gate.calls("task")
        assert row.state is CallState.EXECUTING  # the claim committed before it ran
    outcome = again(ledger_with_table, tmp_path)
    assert outcome["state"] == "succeeded" and outcome["attempt"] == 2
    assert credits(ledger_with_table) == [7]


@pytest.mark.slow
def test_killed_after_the_commit_both_exist_and_nothing_runs_again(
    ledger_with_table: str, tmp_path: Path
) -> None:
    kill_at(ledger_with_table, tmp_path, "after-commit")
    assert credits(ledger_with_table) == [7]
    outcome = again(ledger_with_table, tmp_path)
    assert outcome["state"] == "succeeded" and outcome["replayed"] is True
    assert credits(ledger_with_table) == [7]


def test_a_tool_that_raises_leaves_no_write(ledger_with_table: str) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", transactional=True)
    def half_done() -> None:
        current_transaction().execute(text("INSERT INTO engine_credits (amount) VALUES (1)"))
        raise RuntimeError("downstream refused")

    with Gate(tools, ledger_with_table) as gate:
        outcome = gate.execute("t", {"call_id": "c", "name": "half_done", "arguments": {}})
        assert outcome.state is CallState.FAILED and outcome.error is not None
        assert outcome.error["type"] == "RuntimeError"
    assert credits(ledger_with_table) == []


def test_what_a_transactional_tool_may_not_be() -> None:
    tools = ToolRegistry()
    with pytest.raises(ToolDefinitionError, match="sync function"):
        @tools.tool(schema={"type": "object"}, transactional=True)
        async def later() -> None: ...
    with pytest.raises(ToolDefinitionError, match="no timeout"):
        @tools.tool(schema={"type": "object"}, transactional=True, timeout=1)
        def slow() -> None: ...
    with pytest.raises(GateUsageError, match="transactional tool"):
        current_transaction()


def test_aexecute_runs_it_off_the_loop_in_the_same_transaction(ledger_with_table: str) -> None:
    import asyncio
    import threading

    tools = ToolRegistry()
    threads: list[str] = []

    @tools.tool(schema={"type": "object"}, effect="write", transactional=True)
    def credit_one() -> str:
        threads.append(threading.current_thread().name)
        current_transaction().execute(text("INSERT INTO engine_credits (amount) VALUES (1)"))
        return "ok"

    with Gate(tools, ledger_with_table) as gate:
        call = {"call_id": "c", "name": "credit_one", "arguments": {}}
        first = asyncio.run(gate.aexecute("t", call))
        second = asyncio.run(gate.aexecute("t", call))
    assert (first.state, first.result, second.replayed) == (CallState.SUCCEEDED, "ok", True)
    assert threads != ["MainThread"] and len(threads) == 1
    assert credits(ledger_with_table) == [1]


@pytest.mark.backends("postgresql")
def test_joining_a_callers_transaction_commits_or_rolls_back_with_it(
    ledger_with_table: str,
) -> None:
    """``joining``: the tool's write and the outcome go into the caller's transaction
    (as DBOS's datasource transaction does): rolled back by the caller, neither
    exists (the call stays ``executing``); committed, both do."""
    from agent_gate.gate.transactional import joining

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", transactional=True)
    def credit_one() -> str:
        current_transaction().execute(text("INSERT INTO engine_credits (amount) VALUES (1)"))
        return "ok"

    engine = create_engine(ledger_with_table)
    try:
        with Gate(tools, ledger_with_table) as gate:
            with engine.connect() as conn, conn.begin() as txn:
                with joining(conn):
                    outcome = gate.execute("t", {"call_id": "a", "name": "credit_one",
                                                 "arguments": {}})
                assert outcome.state is CallState.SUCCEEDED
                txn.rollback()
            assert credits(ledger_with_table) == []
            assert gate.calls("t")[0].state is CallState.EXECUTING
            with engine.connect() as conn, conn.begin(), joining(conn):
                gate.execute("t", {"call_id": "b", "name": "credit_one", "arguments": {}})
            states = {c.call_id: c.state for c in gate.calls("t")}
            assert states["b"] is CallState.SUCCEEDED
            assert credits(ledger_with_table) == [1]
    finally:
        engine.dispose()


@pytest.mark.backends("postgresql")
def test_a_tool_that_raises_in_a_joined_transaction_leaves_the_callers_writes(
    ledger_with_table: str,
) -> None:
    """Its savepoint rolls back its own write only: the caller's earlier write in the
    same transaction commits, and the call is recorded ``failed``."""
    from agent_gate.gate.transactional import joining

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", transactional=True)
    def half_done() -> None:
        current_transaction().execute(text("INSERT INTO engine_credits (amount) VALUES (1)"))
        raise RuntimeError("downstream refused")

    engine = create_engine(ledger_with_table)
    try:
        with Gate(tools, ledger_with_table) as gate:
            with engine.connect() as conn, conn.begin():
                conn.execute(text("INSERT INTO engine_credits (amount) VALUES (5)"))
                with joining(conn):
                    outcome = gate.execute("t", {"call_id": "c", "name": "half_done",
                                                 "arguments": {}})
            assert outcome.state is CallState.FAILED
            assert gate.calls("t")[0].state is CallState.FAILED
    finally:
        engine.dispose()
    assert credits(ledger_with_table) == [5]
