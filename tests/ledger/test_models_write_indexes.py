"""Revision 0008: the partial ``tool_calls (state)`` index, ``audit_events`` without
``(task_id, id)``, and the plans that rely on what is left.

What a later schema change could break without any other test noticing, since a
missing index changes no result, only how much of the ledger a read touches:

* the upgrade and downgrade across 0008 keep every call findable by state and every
  task's trail readable, calls written before and after it alike;
* a task's audit pages, now read in ``seq`` order, hold exactly the entries they held
  in id order, whatever the cursor;
* the reads that look for calls by state or by task, and for a task's or a call's
  audit entries, go through an index, never a scan (``EXPLAIN QUERY PLAN`` on SQLite;
  ``EXPLAIN`` with sequential scans priced out on PostgreSQL, where a handful of rows
  would otherwise make a scan the cheaper plan).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event, inspect, text

from agent_gate.ledger import CallState, Event, Ledger, NewCall, store
from agent_gate.ledger.backend import begin_write, create_ledger_engine
from agent_gate.ledger.migrate import alembic_config, head_revision
from agent_gate.ledger.models import SWEPT_STATES, metadata
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.views.pages import AuditQuery, TaskQuery
from agent_gate.privacy.results import StoredResult

S = CallState
BEFORE = "0007_pg_server_side_append"
PARTIAL = "ix_tool_calls_state"
BY_TASK = "ix_tool_calls_task_id_state"
OLD = "ix_tool_calls_state_lease_expires_ms"
AUDIT_BY_TASK_ID = "ix_audit_events_task_id_id"
BY_CALL = "ix_audit_events_call_row_id_id"
# ``UNIQUE (task_id, seq)``: named by the constraint on PostgreSQL, by SQLite itself there.
TASK_SEQ = ("uq_audit_events_task_id_seq", "sqlite_autoindex_audit_events_1")

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


@contextmanager
def _code_of_today(url: str, patched: pytest.MonkeyPatch) -> Iterator[None]:
    """Today's code on an old schema: no schema check, and what today's writes name that
    the schema gained later, there only while it runs (dropped again before the schema
    is migrated on): the ``tool_calls`` column ``edited`` (0014), which every read of a
    call names, and on PostgreSQL the pipelined append's ``bigint[]`` row ids (0016), as
    an overload of 0007's function beside its ``integer[]`` one."""
    patched.setattr(store, "ensure_schema", lambda *_a, **_k: None)
    engine = create_ledger_engine(url)
    postgres = engine.dialect.name == "postgresql"
    try:
        with begin_write(engine) as conn:
            conn.exec_driver_sql("ALTER TABLE tool_calls ADD COLUMN edited TEXT")
            if postgres:
                body = conn.execute(text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"),
                                    {"f": _APPEND.format(ids="integer")}).scalar_one()
                conn.exec_driver_sql(body.replace("p_call_row_id integer[]",
                                                  "p_call_row_id bigint[]", 1))
        yield
        with begin_write(engine) as conn:
            conn.exec_driver_sql("ALTER TABLE tool_calls DROP COLUMN edited")
            if postgres:
                conn.exec_driver_sql(f"DROP FUNCTION {_APPEND.format(ids='bigint')}")
    finally:
        engine.dispose()


_APPEND = ("agent_gate_audit_append(text[], text, timestamptz[], text[], {ids}[], text[], "
           "text[], text[], text[], text[], text[], bytea[], bytea[])")


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


def _audit_indexes(url: str) -> set[str]:
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as conn:
            return {str(ix["name"]) for ix in inspect(conn).get_indexes("audit_events")}
    finally:
        engine.dispose()


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
    assert AUDIT_BY_TASK_ID in _audit_indexes(empty_url)
    # this code, on the schema as 0007 left it
    with (monkeypatch.context() as patched, _code_of_today(empty_url, patched),
          Ledger(empty_url) as ledger):
        _calls_in_every_state(ledger, "old")

    _migrate(empty_url, "head")
    indexes = _state_indexes(empty_url)
    assert set(indexes) == {PARTIAL}
    assert AUDIT_BY_TASK_ID not in _audit_indexes(empty_url)
    assert BY_CALL in _audit_indexes(empty_url)
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
        # A task's trail, old entries and new, read by seq: the order ids give it.
        for task in ("t0", "t1"):
            trail = [e.seq for e in ledger.audit() if e.task_id == task]
            assert [e.seq for e in ledger.audit(task)] == trail
            assert [e.seq for e in ledger.audit_page(
                AuditQuery(task_id=task, after=trail[2], limit=4))] == trail[3:7]

    _migrate(empty_url, BEFORE, down=True)
    assert set(_state_indexes(empty_url)) == {OLD}
    assert AUDIT_BY_TASK_ID in _audit_indexes(empty_url)
    with (monkeypatch.context() as patched, _code_of_today(empty_url, patched),
          Ledger(empty_url) as ledger):
        _call(ledger, "t0", "down-in_doubt", S.IN_DOUBT)
        assert _found(ledger, S.IN_DOUBT) == {"old-in_doubt", "new-in_doubt", "down-in_doubt"}

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


def _sqlite_access(words: list[str]) -> str:
    """One ``SCAN``/``SEARCH`` step's access path, named as PostgreSQL names it."""
    if "INDEX" in words:
        return words[words.index("INDEX") + 1]
    if "PRIMARY" in words:  # the rowid: the table's own key
        return f"pk_{words[1]}"
    return "SCAN"


def _pg_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _pg_nodes(child)


def _used(conn: Any, table: str, statement: str, parameters: Any) -> list[str]:
    """For each step of the plan that reads ``table``: the index it goes through, or
    ``SCAN`` when it reads the whole table (``EXPLAIN QUERY PLAN`` on SQLite, where
    the tasks page's probe names ``tool_calls`` by its alias ``c``, and ``SORT`` for
    an audit read sorted instead of read in order; ``EXPLAIN`` with sequential scans
    priced out on PostgreSQL)."""
    if conn.dialect.name != "postgresql":
        names = {table, "c"} if table == "tool_calls" else {table}
        out = []
        for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters):
            words = str(row[3]).split()
            if len(words) > 1 and words[0] in ("SCAN", "SEARCH") and words[1] in names:
                out.append(_sqlite_access(words))
            elif table == "audit_events" and "TEMP B-TREE" in row[3]:
                out.append("SORT")  # a trail is read in an index's order, never sorted
        return out
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    # Planned on the table's statistics, not on defaults: a never-analyzed table's
    # estimates follow its row width, and a column added to tool_calls (0014) tipped
    # a tie between the two state indexes on these few rows.
    conn.exec_driver_sql(f"ANALYZE {table}")
    raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    out = []
    for node in _pg_nodes(plan):
        if node.get("Relation Name") != table:
            continue
        if node["Node Type"] == "Bitmap Heap Scan":  # its index is read by a child node
            out.extend(n["Index Name"] for n in _pg_nodes(node) if "Index Name" in n)
        else:
            out.append(node.get("Index Name", "SCAN"))
    return out


def _plans(ledger: Ledger, read: Callable[[], object], table: str = "tool_calls",
           ) -> list[list[str]]:
    """The indexes each ``SELECT`` about ``table`` that ``read`` sends goes through."""
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_a: Any) -> None:
        if table in statement and statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    event.listen(ledger.engine, "before_cursor_execute", seen)
    try:
        read()
    finally:
        event.remove(ledger.engine, "before_cursor_execute", seen)
    assert sent, f"the read sent no statement about {table}"
    with begin_write(ledger.engine) as conn:
        return [_used(conn, table, statement, parameters) for statement, parameters in sent]


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
        # One task's swept calls: through an index on state (on PostgreSQL's statistics
        # of these few rows either may win; BY_TASK is held to below, by the pages).
        by_task_swept = _plans(ledger, lambda: ledger.calls("t0", [S.EXECUTING, S.IN_DOUBT]))
        pg = ledger.engine.dialect.name == "postgresql"
        assert by_task_swept in ([[BY_TASK]], [[PARTIAL]]) if pg else [[[BY_TASK]]]
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
    """The plan reader above can fail: with the partial index gone, the sweep reads
    the whole table or a whole other index (SQLite picks ``(task_id, state)``: the
    rows are sorted by when they were recorded either way)."""
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as raw:
        raw.execute(f"DROP INDEX {PARTIAL}")
    with Ledger(sqlite_url) as ledger:
        _call(ledger, "t0", "c", S.IN_DOUBT)
        (plan,) = _plans(ledger, lambda: ledger.calls(None, [S.IN_DOUBT]))
        assert plan in (["SCAN"], [BY_TASK]), plan


def test_a_tasks_audit_pages_hold_what_they_held_in_id_order(db_url: str) -> None:
    """Every cursor (each entry of the whole trail, of this task or another, before
    the first and past the last), forward and newest first, with and without an upper
    bound: the page read by seq is the page the id order gives."""
    with Ledger(db_url) as ledger:
        for n in range(3):  # three tasks' entries interleaved in the trail
            _calls_in_every_state(ledger, f"r{n}")
            _call(ledger, "t2", f"r{n}-extra", S.SUCCEEDED)
        trail = ledger.audit()
        ids = [e.seq for e in trail]
        assert ids == sorted(ids)
        cursors = [None, 0, *ids, ids[-1] + 5]
        for task in ("t0", "t1", "t2"):
            mine = [e.seq for e in trail if e.task_id == task]
            assert [e.seq for e in ledger.audit(task)] == mine
            for after in cursors:
                for upto in (None, ids[len(ids) // 2]):
                    rest = [i for i in mine if (after is None or i > after)
                            and (upto is None or i <= upto)]
                    for newest in (False, True):
                        page = ledger.audit_page(AuditQuery(
                            task_id=task, after=after, upto=upto, newest=newest, limit=3))
                        want = rest[-3:] if newest else rest[:3]
                        assert [e.seq for e in page] == want, (task, after, upto, newest)


def test_a_tasks_and_a_calls_audit_reads_use_an_index(db_url: str) -> None:
    """A task's page (cursor its own entry or another task's), a task's whole trail and
    a call's newest transition: each through an index of its own, never the table."""
    from agent_gate.ledger import audit
    from agent_gate.ledger.backend import on

    with Ledger(db_url) as ledger:
        _calls_in_every_state(ledger, "a")
        _calls_in_every_state(ledger, "b")
        trail = ledger.audit()
        own = next(e.seq for e in trail if e.task_id == "t0")
        foreign = next(e.seq for e in trail if e.task_id == "t1")
        reads: dict[str, Callable[[], object]] = {
            "page, own cursor": lambda: ledger.audit_page(
                AuditQuery(task_id="t0", after=own, limit=5)),
            "page, foreign cursor": lambda: ledger.audit_page(
                AuditQuery(task_id="t0", after=foreign, limit=5)),
            "page, newest": lambda: ledger.audit_page(
                AuditQuery(task_id="t0", newest=True, limit=5)),
            "trail": lambda: ledger.audit("t0"),
        }
        for what, read in reads.items():
            for used in _plans(ledger, read, "audit_events"):
                assert used and all(ix in (*TASK_SEQ, "pk_audit_events") for ix in used), (
                    what, used)
                assert any(ix in TASK_SEQ for ix in used), (what, used)
        rec = ledger.get("t0", "a-in_doubt")
        assert rec is not None

        def newest_transition() -> object:
            with begin_write(ledger.engine) as conn:
                return audit.audited_state(on(conn), rec.task_id, rec.row_id)

        assert _plans(ledger, newest_transition, "audit_events") == [[BY_CALL]]
