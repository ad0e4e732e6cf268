"""The ledger's past calls read for judging them again, through a connection that cannot write.

A backtest (a draft policy over past calls) and the shadow report read the calls,
their tasks' bound principal and scope, and each call's first decision as its audit
entry recorded it. They must never change the ledger, so the engine here is opened
read-only: SQLite with ``mode=ro`` (the file is not even opened for writing),
PostgreSQL with sessions whose transactions are read-only. Rows stream in task order
(``yield_per``), so 100,000 calls never sit in memory at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Connection, Engine, Select, create_engine, select
from sqlalchemy.engine import make_url

from agent_gate.errors import LedgerConfigError
from agent_gate.ledger.models import AUDIT_EVENTS, TASKS, TOOL_CALLS
from agent_gate.ledger.states import CallState

__all__ = ["PastCall", "PastDecision", "past_calls", "read_only_engine", "recorded_decisions"]


@dataclass(frozen=True, slots=True)
class PastCall:
    """What judging a stored call again needs: its stored (judged, maybe sealed)
    arguments, its task's context and its first decision (``{}`` when none)."""

    row_id: int
    task_id: str
    call_id: str
    tool: str
    args_hash: str
    arguments: dict[str, Any] | None
    sealed_arguments: str | None
    state: CallState
    reason_code: str | None
    created_at: datetime
    principal: str | None
    scope: str | None
    decision: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PastDecision:
    """A call's first decision entry (its audit detail), with what names the call."""

    row_id: int
    task_id: str
    call_id: str
    tool: str
    created_at: datetime
    detail: dict[str, Any]


def read_only_engine(url: str) -> Engine:
    """An engine on ``url`` that cannot write: SQLite opened ``mode=ro``, PostgreSQL
    sessions whose transactions are read-only."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if not database or database == ":memory:" or not Path(database).exists():
            raise LedgerConfigError(f"no SQLite ledger at {database or '(no file)'}")
        path = Path(database).resolve().as_posix()
        return create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    if backend == "postgresql":
        theirs = parsed.query.get("options")
        options = "-c default_transaction_read_only=on"
        if isinstance(theirs, str) and theirs:
            options = f"{theirs} {options}"  # ours last: libpq applies -c in order
        return create_engine(
            parsed.set(drivername="postgresql+psycopg"), connect_args={"options": options}
        )
    raise LedgerConfigError(f"unsupported ledger backend {backend!r}: use sqlite or postgresql")


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _filtered(stmt: Select[Any], since: datetime | None, task: str | None) -> Select[Any]:
    if since is not None:
        stmt = stmt.where(TOOL_CALLS.c.created_at >= since)
    if task is not None:
        stmt = stmt.where(TOOL_CALLS.c.task_id == task)
    return stmt


_FIRST_DECISIONS: Final = (
    select(AUDIT_EVENTS.c.call_row_id, AUDIT_EVENTS.c.detail, TOOL_CALLS.c.task_id,
           TOOL_CALLS.c.call_id, TOOL_CALLS.c.tool, TOOL_CALLS.c.created_at)
    .join(TOOL_CALLS, TOOL_CALLS.c.id == AUDIT_EVENTS.c.call_row_id)
    .where(AUDIT_EVENTS.c.from_state == CallState.RECEIVED.value)
    .where(AUDIT_EVENTS.c.to_state != CallState.RECEIVED.value)
    .order_by(AUDIT_EVENTS.c.id)
)


def _decisions(
    conn: Connection, since: datetime | None, task: str | None, like: str | None = None
) -> Iterator[PastDecision]:
    stmt = _filtered(_FIRST_DECISIONS, since, task)
    if like is not None:
        stmt = stmt.where(AUDIT_EVENTS.c.detail.like(like))
    seen: set[int] = set()
    for row_id, text, task_id, call_id, tool, at in conn.execute(stmt):
        if row_id in seen:
            continue
        seen.add(row_id)
        yield PastDecision(row_id, task_id, call_id, tool, _utc(at),
                           json.loads(text) if text else {})


def recorded_decisions(
    url: str, *, since: datetime | None = None, task: str | None = None,
    containing: str | None = None,
) -> Iterator[PastDecision]:
    """Each call's first decision out of ``received``; ``containing``: only entries whose
    detail has that JSON key (``"shadow"``)."""
    engine = read_only_engine(url)
    like = f'%"{containing}":%' if containing is not None else None
    try:
        with engine.connect() as conn:
            yield from _decisions(conn, since, task, like)
    finally:
        engine.dispose()


def past_calls(
    url: str, *, since: datetime | None = None, task: str | None = None
) -> Iterator[PastCall]:
    """Every call (of ``task``, since ``since``) in task order, then arrival order."""
    engine = read_only_engine(url)
    try:
        with engine.connect() as conn:
            decisions = {d.row_id: d.detail for d in _decisions(conn, since, task)}
            stmt = _filtered(
                select(TOOL_CALLS.c.id, TOOL_CALLS.c.task_id, TOOL_CALLS.c.call_id,
                       TOOL_CALLS.c.tool, TOOL_CALLS.c.args_hash, TOOL_CALLS.c.arguments,
                       TOOL_CALLS.c.sealed_arguments, TOOL_CALLS.c.state,
                       TOOL_CALLS.c.reason_code, TOOL_CALLS.c.created_at,
                       TASKS.c.principal, TASKS.c.scope)
                .join(TASKS, TASKS.c.id == TOOL_CALLS.c.task_id)
                .order_by(TOOL_CALLS.c.task_id, TOOL_CALLS.c.id),
                since, task,
            )
            rows = conn.execution_options(stream_results=True, yield_per=2000).execute(stmt)
            for (row_id, task_id, call_id, tool, args_hash, arguments, sealed, state, code,
                 at, principal, scope) in rows:
                yield PastCall(
                    row_id, task_id, call_id, tool, args_hash,
                    json.loads(arguments) if arguments is not None else None, sealed,
                    CallState(state), code, _utc(at), principal, scope,
                    decisions.get(row_id, {}),
                )
    finally:
        engine.dispose()
