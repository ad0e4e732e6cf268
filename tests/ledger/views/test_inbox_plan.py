"""Revision 0015: an inbox page walks the waiting calls in ``ref`` order and stops at
its limit, on both backends, instead of reading and sorting every waiting call.

What no result could show: a plan that sorts all 10,000 waiting calls returns the
same 50 rows as one that reads 51 (issue 32 measured the difference on PostgreSQL).
So the ledger here looks like a live one (most calls finished, one in ten waiting,
interleaved), its statistics are gathered, and the statement ``inbox_page`` sends is
explained (not run, not timed): on PostgreSQL a ``Limit`` over an ordered scan of the
partial ``tool_calls (id)`` index and no ``Sort`` above any read of ``tool_calls``; on
SQLite no temporary B-tree for the order. The pages themselves are checked against
the ids the ledger was given, so the plan asserted is the plan of a right answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import case, event, func, insert, literal, select

from agent_gate.ledger import CallState, Event, Ledger, NewCall
from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.models import TOOL_CALLS, WAITING_STATES
from agent_gate.ledger.views.inbox import INBOX_STATES, InboxQuery, inbox_page, read_inbox

S = CallState
WAITING_INDEX = "ix_tool_calls_id"
CALLS = 20_000
EVERY = 10  # one call in ten waits: 2,000, spread over the whole table
IN_DOUBT_EVERY = 7  # of the waiting ones, one in seven is in doubt instead


def _template(ledger: Ledger) -> int:
    """One real call recorded and brought to ``awaiting_approval`` by the ledger: the row
    the bulk copies are made from (its task, tool, arguments and hashes)."""
    rec = ledger.record(NewCall(
        task_id="t", call_id="seed", idem_key="call:seed", tool="send", effect="write",
        idempotency="none", args_hash="h", arguments={"to": "a@example.org"},
    ))[0]
    tr = ledger.transition(rec, Event.REQUIRE_APPROVAL, actor="policy")
    assert tr.won
    return rec.row_id


def _fill(ledger: Ledger, seed: int) -> list[tuple[int, str]]:
    """``CALLS`` copies of the seed row in one statement (a recursive count, on both
    backends), every ``EVERY``-th waiting, the rest finished; statistics gathered.
    Returns every waiting call (the seed too) as (ref, state), in ref order."""
    c = TOOL_CALLS.c
    n = select(literal(1).label("n")).cte("n", recursive=True)
    n = n.union_all(select(n.c.n + 1).where(n.c.n < CALLS))
    waiting = (n.c.n % EVERY) == 0
    state_of = case(
        ((n.c.n % (EVERY * IN_DOUBT_EVERY)) == 0, S.IN_DOUBT.value),
        (waiting, S.AWAITING_APPROVAL.value), else_=S.SUCCEEDED.value)
    copied = [col for col in TOOL_CALLS.columns if col.name not in (
        "id", "call_id", "idem_key", "state")]
    call_id = literal("c-") + func.cast(n.c.n, TOOL_CALLS.c.call_id.type)
    stmt = insert(TOOL_CALLS).from_select(
        [*(col.name for col in copied), "call_id", "idem_key", "state"],
        select(*copied, call_id, literal("call:") + call_id, state_of)
        .select_from(TOOL_CALLS.join(n, literal(True))).where(c.id == seed))
    with begin_write(ledger.engine) as conn:
        conn.execute(stmt)
        conn.exec_driver_sql("ANALYZE")
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(c.id, c.state).where(c.state.in_(WAITING_STATES))
                            .order_by(c.id)).all()
    return [(int(ref), str(st)) for ref, st in rows]


def _sent(ledger: Ledger, query: InboxQuery) -> tuple[list[int], tuple[str, Any]]:
    """The page's refs, and the one statement ``inbox_page`` sent for it."""
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_a: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    with ledger.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", seen)
        refs = [r.ref for r in inbox_page(conn, query)]
    assert len(sent) == 1, sent
    return refs, sent[0]


def _pg_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _pg_nodes(child)


def _reads_calls(node: dict[str, Any]) -> bool:
    return any(n.get("Relation Name") == "tool_calls" for n in _pg_nodes(node))


def _pg_faults(conn: Any, statement: str, parameters: Any, mode: str) -> list[str]:
    conn.exec_driver_sql(f"SET plan_cache_mode = {mode}")
    raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    faults = [] if plan["Node Type"] == "Limit" else [f"{mode} top: {plan['Node Type']}"]
    faults += [f"{mode}: Sort over tool_calls by {n.get('Sort Key')}"
               for n in _pg_nodes(plan) if "Sort" in n["Node Type"] and _reads_calls(n)]
    scans = [(n["Node Type"], n.get("Index Name")) for n in _pg_nodes(plan)
             if n.get("Relation Name") == "tool_calls"]
    if scans != [("Index Scan", WAITING_INDEX)]:
        faults.append(f"{mode}: tool_calls read by {scans}")
    return faults


def _pg_estimate(ledger: Ledger, query: InboxQuery) -> float:
    """How many waiting calls PostgreSQL expects ``query`` to match (the scan's rows
    before the limit). Each predicate that repeats the state filter divides it by the
    share of waiting calls (independent clauses, to the planner): 2,000 expected as
    20, and a plan that expects 20 sorts them rather than walk the index."""
    _, (statement, parameters) = _sent(ledger, query)
    with ledger.engine.connect() as conn:
        raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    (rows,) = [n["Plan Rows"] for n in _pg_nodes(plan) if n.get("Relation Name") == "tool_calls"]
    return float(rows)


def _plan_faults(ledger: Ledger, statement: str, parameters: Any) -> list[str]:
    """What in the page's plan reads more than the page: empty when it walks an index
    in ``ref`` order under a limit. On PostgreSQL both the plan made for these values
    and the generic one a prepared statement falls back to (the driver prepares what a
    connection sent five times), which knows none of the parameters."""
    with ledger.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            return [f for mode in ("force_custom_plan", "force_generic_plan")
                    for f in _pg_faults(conn, statement, parameters, mode)]
        steps = [str(r[3]) for r in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + statement, parameters)]
    faults = [s for s in steps if "TEMP B-TREE" in s]
    faults += [s for s in steps if s.split()[:2] in (["SCAN", "tool_calls"],
                                                      ["SEARCH", "tool_calls"])
               and "INDEX" not in s.split()]
    return faults


def test_an_inbox_page_walks_the_waiting_calls_in_order_and_stops(db_url: str) -> None:
    """First page, a deep page forward and back, newest first, both states, a tool: each
    the right refs, each planned as an ordered index walk under a limit."""
    assert tuple(s.value for s in INBOX_STATES) == WAITING_STATES  # the index's predicate
    with Ledger(db_url) as ledger:
        seed = _template(ledger)
        waiting = _fill(ledger, seed)  # the seed among them
        awaiting = [ref for ref, st in waiting if st == S.AWAITING_APPROVAL.value]
        every = [ref for ref, _ in waiting]
        assert len(awaiting) > 1500 and len(every) - len(awaiting) > 200
        deep = awaiting[len(awaiting) // 2]
        both = (S.AWAITING_APPROVAL, S.IN_DOUBT)
        cases: list[tuple[str, InboxQuery, list[int]]] = [
            ("first page", InboxQuery(), awaiting[:50]),
            ("deep page", InboxQuery(after=deep), [r for r in awaiting if r > deep][:50]),
            ("page back", InboxQuery(before=deep), [r for r in awaiting if r < deep][-50:]),
            ("newest first", InboxQuery(newest_first=True), awaiting[::-1][:50]),
            ("both states", InboxQuery(states=both, limit=100), every[:100]),
            ("both, newest", InboxQuery(states=both, newest_first=True), every[::-1][:50]),
            ("one tool", InboxQuery(tool="send"), awaiting[:50]),
            ("each state its tools", InboxQuery(states=both, tools_by_state=(
                (S.AWAITING_APPROVAL, ("send",)), (S.IN_DOUBT, None))), every[:50]),
            ("no tool in doubt", InboxQuery(states=both, tools_by_state=(
                (S.AWAITING_APPROVAL, None), (S.IN_DOUBT, ("other",)))), awaiting[:50]),
        ]
        for what, query, want in cases:
            refs, (statement, parameters) = _sent(ledger, query)
            assert refs == want, what
            assert _plan_faults(ledger, statement, parameters) == [], what
        if ledger.engine.dialect.name == "postgresql":
            assert _pg_estimate(ledger, InboxQuery()) > len(awaiting) / 2
        rows, counts = read_inbox(ledger.engine, InboxQuery(states=both))
        assert counts.total == len(every) and [r.ref for r in rows] == every[:50]
