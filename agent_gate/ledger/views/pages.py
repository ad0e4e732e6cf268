"""Listing tasks and audit entries a page at a time, filtered, by keyset.

An operator's listing must cost what it shows, not what the ledger holds: a page is
one indexed range read (``LIMIT`` over an index in the listing's order), and the next
page starts where the last one ended (keyset paging, never ``OFFSET``). The audit
trail is paged by ``seq``, the position every entry prints; tasks by recency.

Which filters stay O(page) depends on the indexes of revisions 0001-0008:

* audit, unfiltered: the primary key; by task: ``UNIQUE (task_id, seq)``, in ``seq``
  order, which within a task is id order (both are assigned under the task's
  chain-head lock, one entry after another: ``audit``). The cursor is a position in
  the whole trail (an id): it becomes a ``seq`` bound through the entry it names
  when that is the task's (as every cursor a task's page hands out is), else through
  the task's newest entry at or before it, found walking back from the task's end
  (the entries after the cursor: few when a follower polls near the head);
* audit by tool, state or time: the same range read, filtered as it goes (no index
  on those columns): it reads until the page is full; one call's history (``call
  show``) through ``(call_row_id, id)``;
* tasks: newest first through ``(updated_at, id)`` read backwards (ties by id,
  descending), their calls counted for the page's tasks only through
  ``(task_id, state)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, exists, func, or_, select, text

from agent_gate.ledger.models import AUDIT_EVENTS
from agent_gate.ledger.records import CALLS, TASKS, TaskSummary, task_record
from agent_gate.ledger.settled import settled
from agent_gate.ledger.states import CallState

if TYPE_CHECKING:
    from agent_gate.ledger.audit import AuditRecord

__all__ = ["MAX_PAGE", "AuditQuery", "TaskQuery", "audit_json", "audit_page", "settled",
           "task_json", "tasks_page"]

MAX_PAGE = 10_000
"""The most rows one page read returns; a listing of more streams several pages."""

_EVENTS = AUDIT_EVENTS


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit entries, and which page of them.

    ``after``: only entries after this position (``AuditRecord.seq``, the entry id;
    the last one a previous page showed).
    ``state``: entries that left the call in this state. ``since``: entries at or
    after this time. ``newest``: the last ``limit`` matching entries instead of the
    first (still returned oldest first), for ``audit --follow``.
    """

    task_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    state: str | None = None
    since: datetime | None = None
    after: int | None = None
    limit: int = 100
    newest: bool = False
    upto: int | None = None
    """Only entries up to this position (``settled``: readers going forward on
    PostgreSQL stop where a later commit could still add an entry)."""


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """Which tasks, and which page: newest activity first; ``after`` is the id of the
    last task a previous page showed. ``state``/``tool``: tasks with at least one
    call in that state / of that tool."""

    state: str | None = None
    tool: str | None = None
    since: datetime | None = None
    after: str | None = None
    limit: int = 100


def _limit(limit: int) -> int:
    if limit < 1 or limit > MAX_PAGE:
        raise ValueError(f"a page holds 1 to {MAX_PAGE} rows, not {limit}")
    return limit


def audit_page(conn: Connection, query: AuditQuery) -> list[AuditRecord]:
    """One page of the trail, oldest first, with each entry's tool."""
    # Here, not at the top: ``agent-gate tasks`` reads this module and has no use for
    # the audit trail's writer.
    from agent_gate.ledger.audit import record_of

    e = _EVENTS
    stmt: Any = select(*e.c, CALLS.c.tool).select_from(
        e.outerjoin(CALLS, CALLS.c.id == e.c.call_row_id)
    )
    if query.after is not None:
        # The cursor is a position in the whole trail (``AuditRecord.seq``, the id);
        # within a task, the same entries follow it in seq order as in id order.
        stmt = stmt.where(e.c.id > query.after) if query.task_id is None else stmt.where(
            _SEQ_AFTER.bindparams(cursor=query.after, cursor_task=query.task_id))
    if query.upto is not None:
        stmt = stmt.where(e.c.id <= query.upto)
    if query.task_id is not None:
        stmt = stmt.where(e.c.task_id == query.task_id)
    if query.call_id is not None:
        stmt = stmt.where(e.c.call_id == query.call_id)
    if query.tool is not None:
        stmt = stmt.where(CALLS.c.tool == query.tool)
    if query.state is not None:
        stmt = stmt.where(e.c.to_state == CallState(query.state).value)
    if query.since is not None:
        stmt = stmt.where(e.c.at >= query.since)
    # Within a task, seq order is id order: the (task_id, seq) index read in order.
    key = e.c.seq if query.task_id is not None else e.c.id
    order = key.desc() if query.newest else key
    rows = [record_of(r) for r in conn.execute(
        stmt.order_by(order).limit(_limit(query.limit))).mappings()]
    return rows[::-1] if query.newest else rows


_SEQ_AFTER = text(
    "audit_events.seq > coalesce("
    "(SELECT c.seq FROM audit_events c WHERE c.id = :cursor AND c.task_id = :cursor_task), "
    "(SELECT c.seq FROM audit_events c WHERE c.task_id = :cursor_task AND c.id <= :cursor "
    "ORDER BY c.seq DESC LIMIT 1), 0)"
)
"""A task's entries after the cursor (an id), as a ``seq`` bound: the seq of the entry
the cursor names when it is the task's (one primary-key read), else of the task's
newest entry at or before it (the task's entries walked back from its end), else 0.
``coalesce`` evaluates the second only when the first found nothing. Text, built
once: as Core constructs, the two subqueries cost more Python per page (building and
keying the statement) than the whole read did before."""


def tasks_page(conn: Connection, query: TaskQuery) -> list[TaskSummary]:
    """One page of tasks, most recently active first, with their calls counted by state.

    A cursor task that is not in the ledger yields an empty page (callers check it).
    """
    t = TASKS
    stmt: Any = select(t)
    if query.after is not None:
        last = conn.execute(select(t.c.updated_at).where(t.c.id == query.after)).scalar()
        if last is None:
            return []
        stmt = stmt.where(or_(t.c.updated_at < last,
                              and_(t.c.updated_at == last, t.c.id < query.after)))
    if query.since is not None:
        stmt = stmt.where(t.c.updated_at >= query.since)
    if query.state is not None:
        stmt = stmt.where(exists().where(CALLS.c.task_id == t.c.id,
                                         CALLS.c.state == CallState(query.state).value))
    if query.tool is not None:
        stmt = stmt.where(exists().where(CALLS.c.task_id == t.c.id, CALLS.c.tool == query.tool))
    rows = conn.execute(
        # Both keys descending: the ``(updated_at, id)`` index read backwards, no sort.
        stmt.order_by(t.c.updated_at.desc(), t.c.id.desc()).limit(_limit(query.limit))
    ).mappings().all()
    counts = _counts(conn, [r["id"] for r in rows])
    return [TaskSummary(task_record(r), counts.get(r["id"], {})) for r in rows]


def _counts(conn: Connection, task_ids: Sequence[str]) -> dict[str, dict[CallState, int]]:
    """Calls by state for these tasks only (the ``task_id, state`` index)."""
    counts: dict[str, dict[CallState, int]] = {}
    if not task_ids:
        return counts
    counted: Iterable[Any] = conn.execute(
        select(CALLS.c.task_id, CALLS.c.state, func.count())
        .where(CALLS.c.task_id.in_(task_ids))
        .group_by(CALLS.c.task_id, CALLS.c.state)
    )
    for task_id, state, n in counted:
        counts.setdefault(task_id, {})[CallState(state)] = int(n)
    return counts


def task_json(s: TaskSummary) -> dict[str, Any]:
    """A task of a listing as JSON (``agent-gate tasks --json``, the HTTP API)."""
    return {
        "task": s.task.id,
        "total": s.total,
        "counts": {state.value: n for state, n in sorted(s.counts.items())},
        "terminal": s.task.terminal,
        "provider": s.task.provider,
        "updated_at": s.task.updated_at.isoformat(),
    }


def audit_json(e: AuditRecord) -> dict[str, Any]:
    """An audit entry as JSON (``agent-gate audit --json``, the HTTP API)."""
    return {
        "seq": e.seq, "at": e.at.isoformat(), "task": e.task_id, "call": e.call_id,
        "tool": e.tool, "event": e.event, "from": e.from_state, "to": e.to_state,
        "actor": e.actor, "detail": e.detail, "hash": e.hash,
    }
