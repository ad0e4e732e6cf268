"""Revision 0008's partial ``tool_calls (state)`` index, and the plans that rely on it.

Two things a later schema change could break without any other test noticing, since
a missing index changes no result, only how much of the ledger a read touches:

* the upgrade and downgrade across 0008 keep every call findable by state, calls
  written before and after it alike;
* the reads that look for calls by state or by task go through an index, never a
  scan of ``tool_calls`` (``EXPLAIN QUERY PLAN`` on SQLite; ``EXPLAIN`` with
  sequential scans priced out on PostgreSQL, where a handful of rows would otherwise
  make a scan the cheaper plan).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event, inspect

from agent_gate.ledger import CallState, Event, Ledger, NewCall, store
from agent_gate.ledger.dialect import begin_write, create_ledger_engine
from agent_gate.ledger.migrate import alembic_config, head_revision
from agent_gate.ledger.models import SWEPT_STATES, metadata
from agent_gate.ledger.pages import TaskQuery
from agent_gate.ledger.records import CallRecord, StoredResult

S = CallState
BEFORE = "0007_pg_server_side_append"
PARTIAL = "ix_tool_calls_state"
BY_TASK = "ix_tool_calls_task_id_state"
OLD = "ix_tool_calls_state_lease_expires_ms"

_PATH_TO: dict[CallState, list[Event]] = {
    S.RECEIVED: [],
    S.AWAITING_APPROVAL: [Event.REQUIRE_APPROVAL],
    S.AUTHORIZED: [Event.ALLOW],
    S.EXECUTING: [Event.ALLOW, Event.CLAIM],
    S.IN_DOUBT: [Event.ALLOW, Event.CLAIM, Event.LOSE],
    S.SUCCEEDED: [Event.ALLOW, Event.CLAIM, Event.SUCCEED],
    S.REJECTED: [Event.REJECT],
}


def _call(ledger: Ledger, task_id: str, call_id: str, state: CallState) -> None:
    """A call brought to ``state`` through the ledger's own transitions."""
    rec: CallRecord = ledger.record(NewCall(
        task_id=task_id, call_id=call_id, idem_key=f"call:{call_id}", tool="send",
        effect="write", idempotency="none", args_hash="h", arguments={"a": 1},
    ))[0]
    for step in _PATH_TO[state]:
        if step is Event.CLAIM:
            tr = ledger.claim(rec, owner="w", lease_ms=60_000)
        elif step is Event.SUCCEED:
            tr = ledger.finish(rec, step, actor="w", result=StoredResult.encode({"ok": 1}, 100))
        else:
            tr = ledger.transition(rec, step, actor="w")
        assert tr.won
        rec = tr.record
    assert rec.state is state


def _calls_in_every_state(ledger: Ledger, tag: str) -> None:
    for n, state in enumerate(_PATH_TO):
        _call(ledger, f"t{n % 2}", f"{tag}-{state.value}", state)


def _found(ledger: Ledger, *states: CallState, task_id: str | None = None) -> set[str]:
    return {r.call_id for r in ledger.calls(task_id, list(states))}


def _migrate(url: str, revision: str, *, down: bool = False) -> None:
    engine = create_ledger_engine(url)
    try:
        with begin_write(engine) as conn:
            (command.downgrade if down else command.upgrade)(alembic_config(conn), revision)
    finally:
        engine.dispose()


def _state_indexes(url: str) -> dict[str, tuple[list[str], str | None]]:
    """``tool_calls``'s indexes on ``state``: columns and partial predicate, by name."""
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as conn:
            found = inspect(conn).get_indexes("tool_calls")
    finally:
        engine.dispose()
    out: dict[str, tuple[list[str], str | None]] = {}
    for ix in found:
        if ix["column_names"][0] != "state":
            continue
        options = ix.get("dialect_options", {})
        where = options.get("sqlite_where", options.get("postgresql_where"))
        out[ix["name"]] = (list(ix["column_names"]), None if where is None else str(where))
    return out


@pytest.fixture
def empty_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A ledger nobody has upgraded yet, on each backend: this test picks its revision."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    from ledger_backends import pg_schema

    with pg_schema(request.getfixturevalue("pg_admin"), upgraded=False) as schema:
        yield schema.url


def test_calls_recorded_before_and_after_0008_are_found_by_state_both_ways(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls in every state at 0007, the upgrade, more calls, the downgrade: the swept
    states are found across tasks and within one, before and after, on either side."""
    _migrate(empty_url, BEFORE)
    assert set(_state_indexes(empty_url)) == {OLD}
    with monkeypatch.context() as patched:  # this code, on the schema as 0007 left it
        patched.setattr(store, "ensure_schema", lambda *_a, **_k: None)
        with Ledger(empty_url) as ledger:
            _calls_in_every_state(ledger, "old")

    _migrate(empty_url, "head")
    indexes = _state_indexes(empty_url)
    assert set(indexes) == {PARTIAL}
    columns, where = indexes[PARTIAL]
    assert columns == ["state"] and where is not None
    assert all(f"'{s}'" in where for s in SWEPT_STATES)
    with Ledger(empty_url, auto_upgrade=False) as ledger:
        _calls_in_every_state(ledger, "new")
        for state in SWEPT_STATES:
            assert _found(ledger, S(state)) == {f"old-{state}", f"new-{state}"}
        assert _found(ledger, S.EXECUTING, S.IN_DOUBT) == {
            "old-executing", "new-executing", "old-in_doubt", "new-in_doubt"}
        # Not swept: found by a scan, as before, and found all the same.
        assert _found(ledger, S.SUCCEEDED) == {"old-succeeded", "new-succeeded"}
        by_task = {t: _found(ledger, S.EXECUTING, S.IN_DOUBT, task_id=t) for t in ("t0", "t1")}
        assert by_task["t0"] | by_task["t1"] == {
            "old-executing", "new-executing", "old-in_doubt", "new-in_doubt"}
        assert by_task["t0"].isdisjoint(by_task["t1"])
        assert ledger.verify_audit().ok

    _migrate(empty_url, BEFORE, down=True)
    assert set(_state_indexes(empty_url)) == {OLD}
    with monkeypatch.context() as patched:
        patched.setattr(store, "ensure_schema", lambda *_a, **_k: None)
        with Ledger(empty_url) as ledger:
            _call(ledger, "t0", "down-in_doubt", S.IN_DOUBT)
            assert _found(ledger, S.IN_DOUBT) == {"old-in_doubt", "new-in_doubt",
                                                  "down-in_doubt"}

    _migrate(empty_url, "head")
    engine = create_ledger_engine(empty_url)
    try:
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(ctx, metadata) == []
    finally:
        engine.dispose()
    assert version == head_revision()
    with Ledger(empty_url, auto_upgrade=False) as ledger:
        assert _found(ledger, S.IN_DOUBT) == {"old-in_doubt", "new-in_doubt", "down-in_doubt"}


# -- query plans ---------------------------------------------------------------------


def _sqlite_indexes(conn: Any, statement: str, parameters: Any) -> list[str]:
    """For each step of the plan that reads ``tool_calls``: the index it goes
    through, or ``SCAN`` when it reads the whole table."""
    out = []
    for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters):
        detail = str(row[3])
        words = detail.split()
        if len(words) < 2 or words[0] not in ("SCAN", "SEARCH"):
            continue
        if words[1] not in ("tool_calls", "c"):  # ``c``: tool_calls under an alias
            continue
        out.append(words[words.index("INDEX") + 1] if "INDEX" in words else "SCAN")
    return out


def _pg_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _pg_nodes(child)


def _pg_indexes(conn: Any, statement: str, parameters: Any) -> list[str]:
    """The same from ``EXPLAIN (FORMAT JSON)``, sequential scans priced out."""
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    out = []
    for node in _pg_nodes(plan):
        if node.get("Relation Name") != "tool_calls":
            continue
        if node["Node Type"] == "Bitmap Heap Scan":  # its index is read by a child node
            out.extend(n["Index Name"] for n in _pg_nodes(node) if "Index Name" in n)
        else:
            out.append(node.get("Index Name", "SCAN"))
    return out


def _plans(ledger: Ledger, read: Callable[[], object]) -> list[list[str]]:
    """The index each statement ``read`` sends about ``tool_calls`` goes through."""
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_a: Any) -> None:
        if "tool_calls" in statement and statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    event.listen(ledger.engine, "before_cursor_execute", seen)
    try:
        read()
    finally:
        event.remove(ledger.engine, "before_cursor_execute", seen)
    assert sent, "the read sent no statement about tool_calls"
    explain = _pg_indexes if ledger.engine.dialect.name == "postgresql" else _sqlite_indexes
    with begin_write(ledger.engine) as conn:
        return [explain(conn, statement, parameters) for statement, parameters in sent]


def test_the_reads_by_state_and_by_task_use_an_index(db_url: str) -> None:
    """Fails if an index they need is dropped, or if ``reads.calls`` stops stating the
    partial index's predicate (neither SQLite nor a generic PostgreSQL plan could
    then use it)."""
    with Ledger(db_url) as ledger:
        _calls_in_every_state(ledger, "c")
        swept = {
            "recover, every task": [S.EXECUTING, S.IN_DOUBT],
            "pending approvals": [S.AWAITING_APPROVAL],
            "in doubt": [S.IN_DOUBT],
        }
        for what, states in swept.items():
            assert _plans(ledger, lambda s=states: ledger.calls(None, s)) == [[PARTIAL]], what
        assert _plans(ledger, lambda: ledger.calls("t0", [S.EXECUTING, S.IN_DOUBT])) == [
            [BY_TASK]]
        # A page of tasks: the page, then its calls counted by state from the index.
        assert _plans(ledger, lambda: ledger.tasks_page(TaskQuery(limit=10))) == [[BY_TASK]]
        # Filtered by a state: one probe per task, then the count.
        assert _plans(ledger, lambda: ledger.tasks_page(
            TaskQuery(state="succeeded", limit=10))) == [[BY_TASK], [BY_TASK]]
        # A task's calls: some index on task_id (which one is the planner's choice).
        (task_calls,) = _plans(ledger, lambda: ledger.calls("t0"))
        assert task_calls and all(
            ix in (BY_TASK, "uq_tool_calls_task_id_call_id", "uq_tool_calls_task_id_idem_key")
            for ix in task_calls), task_calls


@pytest.mark.backends("sqlite")
def test_the_plan_check_sees_a_scan(sqlite_url: str) -> None:
    """The plan reader above can fail: with the partial index gone, the sweep scans."""
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as raw:
        raw.execute(f"DROP INDEX {PARTIAL}")
    with Ledger(sqlite_url) as ledger:
        _call(ledger, "t0", "c", S.IN_DOUBT)
        assert _plans(ledger, lambda: ledger.calls(None, [S.IN_DOUBT])) == [["SCAN"]]
