"""The calls that wait for a person, across every task: filtered, keyset-paged, counted.

What the inbox's list and ``agent-gate pending`` show: calls awaiting approval (and
calls in doubt), oldest first by default, a page at a time. A page reads the rows it
shows and no others, so it costs what it shows whatever the ledger holds:

* the order is the row id (``ref``): the order calls were recorded in. A page walks
  the partial ``tool_calls (id)`` index over the waiting states (revision 0015) in
  that order and stops at its limit, whichever states it lists, on both backends;
  without it PostgreSQL read and sorted every waiting call for each page (measured in
  docs/guides/performance.md: 10,000 waiting calls). The counts read every matching
  call anyway, through it or the partial ``(state)`` index (revision 0008). How a
  query earns a partial index differs: SQLite matches the index's predicate term by
  term, so there the query states both verbatim (``models.WAITING_WHERE``,
  ``models.SWEPT_WHERE``); PostgreSQL proves it from the states, which it can only do
  from constants (a prepared statement's generic plan knows no parameter), so there
  they are written into the statement as constants and nothing else is added (the
  predicates repeated would each divide its estimate of the waiting calls by ten, and
  a plan that expects 98 of 10,000 sorts them rather than walk the index);
* the next page starts after the last ``ref`` shown (``after``), the previous one
  before the first (``before``): keyset paging, never ``OFFSET``, so a call answered
  meanwhile never makes a row be skipped or shown twice;
* filters (tool, task, rule, age, search, the operator's tools: for each state the
  tools of the right it takes, approve or resolve) narrow the same read;
  a call already approved, which waits only for a gate to run it, is left out unless
  asked for (``answered``): one lookup of its approvals through ``(call_row_id, id)``.

``InboxCounts``: the same calls counted by tool and by rule (every filter but tool and
rule applies, so the counts say where else there is work). Arguments are read as
stored: the fields a policy redacts are their stand-ins, never unsealed here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
    text,
)

from agent_gate.ledger.backend import begin_read
from agent_gate.ledger.deadlines import ARMED, ESCALATED, WaitDeadline
from agent_gate.ledger.lease import now_ms
from agent_gate.ledger.models import (
    APPROVAL_DEADLINES,
    APPROVALS,
    SWEPT_WHERE,
    WAITING_WHERE,
)
from agent_gate.ledger.records import CALLS, TASKS
from agent_gate.ledger.sql import db_now_ms
from agent_gate.ledger.states import CallState
from agent_gate.plainjson import canonical_json

__all__ = [
    "INBOX_STATES",
    "MAX_INBOX_PAGE",
    "InboxCounts",
    "InboxQuery",
    "InboxRow",
    "argument_preview",
    "inbox_counts",
    "inbox_mark",
    "inbox_page",
    "read_inbox",
]

INBOX_STATES = (CallState.AWAITING_APPROVAL, CallState.IN_DOUBT)
"""The states a person acts on: approve or deny, resolve."""

MAX_INBOX_PAGE = 500
REDACTED_KEY = "redacted"
"""The key that marks a stand-in (as ``details.REDACTED_KEY``)."""

_LIKE_ESCAPE = "\\"


def _like(value: str) -> str:
    """``value`` as a LIKE pattern's literal text (``%``, ``_`` and the escape escaped)."""
    return (value.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2)
            .replace("%", _LIKE_ESCAPE + "%").replace("_", _LIKE_ESCAPE + "_"))


@dataclass(frozen=True, slots=True)
class InboxQuery:
    """Which waiting calls, and which page of them.

    ``states``: awaiting approval, in doubt, or both. ``tool``/``task_id``/``rule``:
    exact matches (a call matches a rule when the rule is among those that decided it).
    ``waiting_before``: calls that reached their state at or before this time (the age
    filter). ``search``: a call id or task id, whole or its beginning. ``tools``: only
    these tools, whatever the state (None: every tool). ``tools_by_state``: only these
    tools in each state (an operator's rights, which differ by state). ``roles``: no
    call escalated to a role outside these (an operator's roles; None: escalated calls
    too).
    ``after``/``before``: a ``ref`` the previous page ended at / the next page started
    at. ``newest_first``: the newest call first instead of the oldest.
    """

    states: tuple[CallState, ...] = (CallState.AWAITING_APPROVAL,)
    tool: str | None = None
    task_id: str | None = None
    rule: str | None = None
    waiting_before: datetime | None = None
    search: str | None = None
    tools: tuple[str, ...] | None = None
    tools_by_state: tuple[tuple[CallState, tuple[str, ...] | None], ...] | None = None
    """(state, tools: None for every tool) pairs: a call is listed only if its tool is
    among its state's, so an operator's ``approve`` tools narrow the calls awaiting
    approval and their ``resolve`` tools the calls in doubt, each its own (one list
    for both would show the calls of either right in either state); a state no pair
    names lists nothing. In the statement, so a page and its counts agree. None: no
    state narrowed (``tools`` still applies)."""
    roles: tuple[str, ...] | None = None
    """With ``tools_by_state``, what an operator may answer: a call whose wait was escalated to a
    role (``then: escalate``) is answered only by its holders (``gate.desk``), so it is
    left out here, in the statement, unless the role is among these; () holds none."""
    after: int | None = None
    before: int | None = None
    newest_first: bool = False
    limit: int = 50
    answered: bool = False
    """Also the calls a person approved that wait for a gate to run them (they stay
    ``awaiting_approval`` until one does: ``ledger.approvals``); left out by default,
    nobody needs to answer them again."""
    closed_rules: tuple[tuple[tuple[str, ...] | None, str], ...] = ()
    """With ``tools_by_state``, what an operator may answer: (tools, None for every tool; rule
    id) of the rules whose ``approval: approvers:`` count denials like approvals
    (``deny: quorum``) and name roles the operator holds none of
    (``Policy.closed_rules``): a call awaiting approval that one of them sent is one
    they may neither approve nor deny, left out here, in the statement."""
    quorum_rules: tuple[str, ...] = ()
    """Rule ids that want several approvers (``approval: approvers: min``): a call one of
    them sent stays listed after an approval, since others still have to give theirs."""

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_INBOX_PAGE:
            raise ValueError(f"a page holds 1 to {MAX_INBOX_PAGE} calls, not {self.limit}")
        if not self.states or any(s not in INBOX_STATES for s in self.states):
            raise ValueError("an inbox lists calls awaiting approval or in doubt")


@dataclass(frozen=True, slots=True)
class InboxRow:
    """One waiting call as a list shows it: the ``ref`` every link and answer names it
    by, the hash of the arguments shown (what an answer from this row is bound to)."""

    ref: int
    task_id: str
    call_id: str
    tool: str
    state: CallState
    args_hash: str
    arguments: dict[str, Any] | None
    """As stored: the fields a policy redacts are their stand-ins."""
    sealed: bool
    rule_ids: tuple[str, ...]
    reason: str | None
    created_at: datetime
    since: datetime
    """When the call reached its state (its row's last change)."""
    deadline: WaitDeadline | None = None
    """The deadline of its wait (an approve rule's ``approval: timeout``), if any."""
    principal: str | None = None
    """The id of the principal its task acts for: who may not approve it unless the
    policy lets them (``Policy.approval_refusal``)."""

    def to_dict(self, now: datetime | None = None) -> dict[str, Any]:
        now = now or datetime.now(UTC)
        return {"ref": self.ref, "task_id": self.task_id, "call_id": self.call_id,
                "tool": self.tool, "state": self.state.value, "args_hash": self.args_hash,
                "preview": argument_preview(self.arguments), "sealed": self.sealed,
                "rule_ids": list(self.rule_ids), "reason": self.reason,
                "created_at": self.created_at.isoformat(), "since": self.since.isoformat(),
                "age_seconds": max(0, int((now - self.since).total_seconds())),
                "deadline": self.deadline.to_dict() if self.deadline is not None else None}


@dataclass(frozen=True, slots=True)
class InboxCounts:
    """The matching calls counted: all, by tool, by rule (a call decided by two rules
    counts under both)."""

    total: int
    by_tool: dict[str, int] = field(default_factory=dict)
    by_rule: dict[str, int] = field(default_factory=dict)
    mark: str = ""
    """``inbox_mark`` of the same calls, taken from the same read."""

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "by_tool": dict(self.by_tool),
                "by_rule": dict(self.by_rule)}


_COLUMNS = (CALLS.c.id, CALLS.c.task_id, CALLS.c.call_id, CALLS.c.tool, CALLS.c.state,
            CALLS.c.args_hash, CALLS.c.arguments, CALLS.c.sealed_arguments.is_not(None),
            CALLS.c.rule_ids, CALLS.c.reason, CALLS.c.created_at, CALLS.c.updated_at)
_D = APPROVAL_DEADLINES
_DEADLINE = (_D.c.due_ms, _D.c.then, _D.c.role, _D.c.rule_id, _D.c.outcome,
             db_now_ms().label("now_ms"),
             select(TASKS.c.principal).where(TASKS.c.id == CALLS.c.task_id)
             .correlate(CALLS).scalar_subquery().label("principal"))
"""Besides the call's own columns: its wait's deadline, and its task's principal (one
lookup by the tasks' primary key a row), which decides whether the reader may approve
it."""
_WITH_DEADLINE = CALLS.outerjoin(_D, and_(_D.c.call_row_id == CALLS.c.id,
                                          _D.c.armed_version == CALLS.c.version))
"""A waiting call and the deadline of this wait (by its primary key), if it has one."""


def _where(query: InboxQuery, dialect: str, *, facets: bool = True) -> list[Any]:
    c = CALLS.c
    states = [s.value for s in query.states]
    out: list[Any] = (
        [c.state.in_(bindparam("inbox_states", states, expanding=True,
                               literal_execute=True))]
        if dialect == "postgresql"
        else [c.state.in_(states), text(WAITING_WHERE), text(SWEPT_WHERE)])
    if query.tools is not None:
        out.append(c.tool.in_(query.tools) if query.tools else c.id.is_(None))
    if query.tools_by_state is not None:
        out.extend(_tools_by_state(query.tools_by_state, query.states))
    if query.roles is not None:
        out.append(_not_escalated_past(query.roles))
    if query.closed_rules:
        out.append(_not_closed(query.closed_rules))
    if query.task_id is not None:
        out.append(c.task_id == query.task_id)
    if query.waiting_before is not None:
        out.append(c.updated_at <= query.waiting_before)
    if query.search:
        pattern = _like(query.search) + "%"
        out.append(or_(c.call_id.like(pattern, escape=_LIKE_ESCAPE),
                       c.task_id.like(pattern, escape=_LIKE_ESCAPE)))
    if not query.answered:
        a = APPROVALS.c
        # A usable approval (for these arguments, not used, not expired by this
        # process's clock: a listing, not a decision) through (call_row_id, id).
        unanswered = ~exists().where(
            a.call_row_id == c.id, a.verdict == "approved", a.consumed_at.is_(None),
            a.args_hash == c.args_hash, or_(a.expires_ms.is_(None), a.expires_ms > now_ms()))
        out.append(or_(unanswered, *(
            c.rule_ids.like("%" + _like(canonical_json(r)) + "%", escape=_LIKE_ESCAPE)
            for r in query.quorum_rules)) if query.quorum_rules else unanswered)
    if facets:
        if query.tool is not None:
            out.append(c.tool == query.tool)
        if query.rule is not None:
            # rule_ids is canonical JSON (a list of strings): the rule's own JSON text
            # appears in it exactly when it is one of the list's elements.
            out.append(c.rule_ids.like("%" + _like(canonical_json(query.rule)) + "%",
                                       escape=_LIKE_ESCAPE))
    return out


def _tools_by_state(pairs: tuple[tuple[CallState, tuple[str, ...] | None], ...],
                    states: tuple[CallState, ...]) -> list[Any]:
    """The terms that keep each listed state's calls to its own tools: none when every
    listed state takes every tool, ``tool IN`` alone when one state is listed, else
    one ``state = s AND tool IN`` branch per state (``state = s`` alone for a state
    that takes every tool; no branch for one that takes none)."""
    c = CALLS.c
    of = dict(pairs)
    shown = {s: of.get(s, ()) for s in dict.fromkeys(states)}
    if all(tools is None for tools in shown.values()):
        return []
    if len(shown) == 1:
        (tools,) = shown.values()
        return [c.tool.in_(tools) if tools else c.id.is_(None)]
    branches = [c.state == s.value if tools is None else and_(c.state == s.value,
                                                             c.tool.in_(tools))
                for s, tools in shown.items() if tools is None or tools]
    return [or_(*branches) if branches else c.id.is_(None)]


def _not_escalated_past(roles: tuple[str, ...]) -> Any:
    """No deadline of the call's current wait (its ``armed_version`` is the call's
    version, as ``deadlines.of_call`` reads it) escalated it to a role outside
    ``roles``: one lookup by the deadline table's primary key per call. An alias of
    the table, since a page's statement joins it already for the rows' deadlines."""
    escalated = APPROVAL_DEADLINES.alias("escalated")
    d, c = escalated.c, CALLS.c
    elsewhere = [d.call_row_id == c.id, d.armed_version == c.version,
                 d.outcome == ESCALATED, d.role.is_not(None)]
    if roles:
        elsewhere.append(d.role.not_in(roles))
    return ~exists().where(*elsewhere).correlate(CALLS)


def _not_closed(closed: tuple[tuple[tuple[str, ...] | None, str], ...]) -> Any:
    """Not a call awaiting approval that one of ``closed``'s rules sent (for one of its
    tools): matched in ``rule_ids`` as ``rule`` matches it, one pattern per rule."""
    c = CALLS.c
    sent = [and_(c.rule_ids.like("%" + _like(canonical_json(rule)) + "%",
                                 escape=_LIKE_ESCAPE),
                 *([c.tool.in_(tools)] if tools is not None else []))
            for tools, rule in closed]
    return or_(c.state != CallState.AWAITING_APPROVAL.value, ~or_(*sent))


def inbox_page(conn: Connection, query: InboxQuery) -> list[InboxRow]:
    """One page of waiting calls, in the listing's order."""
    key = CALLS.c.id
    where = _where(query, conn.dialect.name)
    backwards = query.before is not None
    # Reading towards older rows: oldest-first paging back, or newest-first forward.
    descending = query.newest_first != backwards
    if query.after is not None:
        where.append(key < query.after if query.newest_first else key > query.after)
    if query.before is not None:
        where.append(key > query.before if query.newest_first else key < query.before)
    stmt = (select(*_COLUMNS, *_DEADLINE).select_from(_WITH_DEADLINE).where(and_(*where))
            .order_by(key.desc() if descending else key).limit(query.limit))
    rows = [_row(r) for r in conn.execute(stmt)]
    return rows[::-1] if backwards else rows


def read_inbox(engine: Engine, query: InboxQuery) -> tuple[list[InboxRow], InboxCounts]:
    """A page and the counts above it, read in one snapshot (they agree)."""
    with begin_read(engine) as conn:
        return inbox_page(conn, query), inbox_counts(conn, query)


_D = APPROVAL_DEADLINES.c
_MARKS = (func.count(), func.sum(CALLS.c.id), func.sum(CALLS.c.version),
          func.max(CALLS.c.updated_at),
          select(func.coalesce(func.max(APPROVALS.c.id), 0)).scalar_subquery(),
          select(func.coalesce(func.max(_D.fired_ms), 0)).scalar_subquery(),
          select(func.min(_D.due_ms)).where(_D.outcome == ARMED).scalar_subquery())
"""What says the list changed: how many calls, the sums of their ids and of their
versions (every transition adds one), the newest change, the newest answer, the
newest deadline acted on, and whether a deadline still counts down. A call entering
or leaving the list moves the count or the sum of ids; a call changing moves its
version and the newest change; an answer that moves no call (the first of a quorum's
two) moves the newest answer, and an escalation (the call still waits) the newest
deadline acted on, so neither "1 of 2" nor "escalated" is held back by a 304; while
a deadline counts down, the minute its countdown shows is part of the mark. One
aggregate (the deadlines' by their ``outcome, due_ms`` index), no row sent back:
what a poll costs."""


def _mark(total: int, ids: int, versions: int, newest: datetime | None, answer: int,
          fired: int, counting: int | None) -> str:
    if total == 0:  # an empty list shows no row: no answer nor deadline can change it
        return "0"
    minute = int(time.time() // 60) if counting is not None else "-"
    return (f"{total}:{ids}:{versions}:{_utc(newest).isoformat() if newest else '-'}:"
            f"{answer}:{fired}:{minute}")


def inbox_counts(conn: Connection, query: InboxQuery) -> InboxCounts:
    """The calls ``query`` matches (tool and rule aside), by tool and by rule, and
    their ``inbox_mark`` from the same groups."""
    stmt = (select(CALLS.c.tool, CALLS.c.rule_ids, *_MARKS)
            .where(and_(*_where(query, conn.dialect.name, facets=False)))
            .group_by(CALLS.c.tool, CALLS.c.rule_ids))
    total, ids, versions, newest, by_tool, by_rule = 0, 0, 0, None, {}, {}
    answer, fired, counting = 0, 0, None
    for tool, rules, n, id_sum, version_sum, latest, newest_answer, newest_fired, due \
            in conn.execute(stmt):
        total, answer, fired, counting = total + int(n), int(newest_answer or 0), \
            int(newest_fired or 0), due
        ids, versions = ids + int(id_sum or 0), versions + int(version_sum or 0)
        if latest is not None and (newest is None or _utc(latest) > _utc(newest)):
            newest = latest
        by_tool[tool] = by_tool.get(tool, 0) + int(n)
        for rule in _rules(rules):
            by_rule[rule] = by_rule.get(rule, 0) + int(n)
    return InboxCounts(total, dict(sorted(by_tool.items())), dict(sorted(by_rule.items())),
                       _mark(total, ids, versions, newest, answer, fired, counting))


def inbox_mark(engine: Engine, query: InboxQuery) -> str:
    """What the list ``query`` names looks like, in one aggregate statement (tool and
    rule aside, as the counts): equal to ``InboxCounts.mark`` of a full read while
    nothing changed, so a poll compares it and reads no page."""
    with begin_read(engine) as conn:
        total, ids, versions, newest, answer, fired, counting = conn.execute(
            select(*_MARKS).where(and_(*_where(query, conn.dialect.name, facets=False)))
        ).one()
    return _mark(int(total or 0), int(ids or 0), int(versions or 0), newest, int(answer or 0),
                 int(fired or 0), counting)


def _rules(text_: str | None) -> tuple[str, ...]:
    if not text_:
        return ()
    try:
        value = json.loads(text_)
    except ValueError:
        return ()
    return tuple(str(r) for r in value) if isinstance(value, list) else ()


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _row(r: Sequence[Any]) -> InboxRow:
    ref, task_id, call_id, tool, state, args_hash, arguments, sealed, rules, reason, \
        created, updated, due, then, role, rule, outcome, now, principal = r
    deadline = (WaitDeadline(int(due), then, role, rule, outcome, int(now))
                if due is not None and CallState(state) is CallState.AWAITING_APPROVAL
                else None)
    try:
        args = json.loads(arguments) if arguments is not None else None
    except ValueError:
        args = None
    return InboxRow(int(ref), task_id, call_id, tool, CallState(state), args_hash,
                    args if isinstance(args, dict) else None, bool(sealed), _rules(rules),
                    reason, _utc(created), _utc(updated), deadline, _principal(principal))


def _principal(text: str | None) -> str | None:
    """The ``id`` of a task's stored principal (JSON), if it names one."""
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None


def argument_preview(arguments: dict[str, Any] | None, width: int = 120) -> str:
    """One short line of a call's arguments: ``key=value`` pairs, each value cut, a
    redacted field as its stand-in (``‹redacted 412 chars›``), never unsealed."""
    if arguments is None:
        return "(no arguments)"
    parts: list[str] = []
    for key, value in arguments.items():
        parts.append(f"{key}={_short(value)}")
    line = " ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


def _short(value: Any, width: int = 40) -> str:
    if isinstance(value, dict) and REDACTED_KEY in value:
        size = value.get("size")
        unit = "chars" if value.get("type") == "string" else "bytes"
        return f"‹redacted {size} {unit}›" if isinstance(size, int) else "‹redacted›"
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= width else shown[: width - 1] + "…"
