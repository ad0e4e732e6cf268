"""Backtesting a draft policy: the ledger's past calls judged again, nothing written.

Before a tightened policy is rolled out, a team wants to know which real calls it
would have decided otherwise. ``backtest`` reads the calls (their judged arguments,
unsealed with the seal key where the policy sealed them; never printed), the
principal and scope bound to their task, and the verdict their own policy gave when
they arrived (the audit trail's first decision), then asks the draft with the usage
the task had counted by then, and reports every verdict that would change, by
transition and by the draft's deciding rule, plus every call the draft cannot judge
(sealed without a key, never a JSON object, rejected by the schema before any policy
saw it, or decided by no policy file).

Usage is replayed per task in arrival order: a call counts toward the draft's limits
when it was in fact authorized (as the ledger charges), whatever the draft would have
said; the draft's limits are computed over the draft's own counters.

The database is opened read-only (SQLite ``mode=ro``; PostgreSQL sessions with
``default_transaction_read_only``), so a backtest cannot write the ledger even by
mistake.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, cast

from sqlalchemy import Engine, create_engine, select
from sqlalchemy.engine import make_url

from agent_gate.authorize import principal_from_json, scope_from_json
from agent_gate.errors import LedgerConfigError
from agent_gate.gate.admission import Arguments
from agent_gate.ledger.models import AUDIT_EVENTS, TASKS, TOOL_CALLS
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState
from agent_gate.policy import Policy, Principal, TaskScope, Verdict

__all__ = ["BacktestReport", "CallRef", "Change", "Unjudged", "backtest", "read_only_engine"]

COUNTED_STATES: Final = frozenset({
    CallState.AUTHORIZED, CallState.EXECUTING, CallState.SUCCEEDED, CallState.FAILED,
    CallState.IN_DOUBT,
})
"""States a call reaches only once authorized: it was charged to its task's counters."""


@dataclass(frozen=True, slots=True)
class CallRef:
    """Which call: its task, call id and row, its tool and when it arrived."""

    task_id: str
    call_id: str
    row_id: int
    tool: str
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "call_id": self.call_id, "row_id": self.row_id,
                "tool": self.tool, "at": self.at.isoformat()}


@dataclass(frozen=True, slots=True)
class Change:
    """A call the draft decides otherwise than its own policy did."""

    call: CallRef
    before: Verdict
    after: Verdict
    before_rules: tuple[str, ...]
    after_rules: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.call.to_dict(), "before": self.before.value, "after": self.after.value,
                "before_rules": list(self.before_rules), "after_rules": list(self.after_rules)}


@dataclass(frozen=True, slots=True)
class Unjudged:
    """A call the draft cannot judge, and why (never its arguments)."""

    call: CallRef
    why: str


@dataclass(frozen=True, slots=True)
class BacktestReport:
    """What ``agent-gate policy backtest`` prints."""

    draft_source: str
    draft_hash: str
    judged: int
    changes: tuple[Change, ...]
    unjudged: tuple[Unjudged, ...]
    same_verdict_other_rules: int = 0

    @property
    def unchanged(self) -> int:
        return self.judged - len(self.changes)

    def by_transition(self) -> dict[tuple[Verdict, Verdict], list[Change]]:
        found: dict[tuple[Verdict, Verdict], list[Change]] = defaultdict(list)
        for change in self.changes:
            found[(change.before, change.after)].append(change)
        return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))

    def by_rule(self) -> dict[str, list[Change]]:
        """Changes by the draft's deciding id (a change decided by two ids is in both)."""
        found: dict[str, list[Change]] = defaultdict(list)
        for change in self.changes:
            for rule_id in change.after_rules or ("-",):
                found[rule_id].append(change)
        return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))

    def by_reason(self) -> dict[str, list[Unjudged]]:
        found: dict[str, list[Unjudged]] = defaultdict(list)
        for item in self.unjudged:
            found[item.why].append(item)
        return dict(found)

    def to_dict(self) -> dict[str, Any]:
        return {
            "draft": self.draft_source,
            "draft_hash": self.draft_hash,
            "judged": self.judged,
            "unchanged": self.unchanged,
            "same_verdict_other_rules": self.same_verdict_other_rules,
            "changed": len(self.changes),
            "transitions": [
                {"before": b.value, "after": a.value, "count": len(items),
                 "calls": [c.call.to_dict() for c in items]}
                for (b, a), items in self.by_transition().items()
            ],
            "rules": [
                {"rule_id": rule_id, "count": len(items),
                 "calls": [c.to_dict() for c in items]}
                for rule_id, items in self.by_rule().items()
            ],
            "unjudged": [
                {"why": why, "count": len(items), "calls": [u.call.to_dict() for u in items]}
                for why, items in self.by_reason().items()
            ],
        }


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


def _decisions(conn: Any, since: datetime | None, task: str | None) -> dict[int, dict[str, Any]]:
    """Each call's first decision out of ``received``, as its audit entry recorded it."""
    stmt = (
        select(AUDIT_EVENTS.c.call_row_id, AUDIT_EVENTS.c.detail)
        .join(TOOL_CALLS, TOOL_CALLS.c.id == AUDIT_EVENTS.c.call_row_id)
        .where(AUDIT_EVENTS.c.from_state == CallState.RECEIVED.value)
        .where(AUDIT_EVENTS.c.to_state != CallState.RECEIVED.value)
        .order_by(AUDIT_EVENTS.c.id)
    )
    if since is not None:
        stmt = stmt.where(TOOL_CALLS.c.created_at >= since)
    if task is not None:
        stmt = stmt.where(TOOL_CALLS.c.task_id == task)
    found: dict[int, dict[str, Any]] = {}
    for row_id, detail in conn.execute(stmt):
        if row_id not in found:
            found[row_id] = json.loads(detail) if detail else {}
    return found


@dataclass(frozen=True, slots=True)
class _Stored:
    """The columns of a ``tool_calls`` row a backtest reads: what ``Arguments.of`` needs
    to hand back the real arguments (unsealed), and what the report names. Reading a
    whole ``CallRecord`` (results, errors, leases) cost more than judging the call."""

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


_COLUMNS: Final = (
    TOOL_CALLS.c.id, TOOL_CALLS.c.task_id, TOOL_CALLS.c.call_id, TOOL_CALLS.c.tool,
    TOOL_CALLS.c.args_hash, TOOL_CALLS.c.arguments, TOOL_CALLS.c.sealed_arguments,
    TOOL_CALLS.c.state, TOOL_CALLS.c.reason_code, TOOL_CALLS.c.created_at,
)


def _stored(row: Any) -> _Stored:
    (row_id, task_id, call_id, tool, args_hash, arguments, sealed, state, code, at) = row[:10]
    return _Stored(row_id, task_id, call_id, tool, args_hash,
                   json.loads(arguments) if arguments is not None else None, sealed,
                   CallState(state), code, at if at.tzinfo else at.replace(tzinfo=UTC))


def _calls(conn: Any, since: datetime | None, task: str | None) -> Iterator[Any]:
    stmt = (
        select(*_COLUMNS, TASKS.c.principal, TASKS.c.scope)
        .join(TASKS, TASKS.c.id == TOOL_CALLS.c.task_id)
        .order_by(TOOL_CALLS.c.task_id, TOOL_CALLS.c.id)
    )
    if since is not None:
        stmt = stmt.where(TOOL_CALLS.c.created_at >= since)
    if task is not None:
        stmt = stmt.where(TOOL_CALLS.c.task_id == task)
    yield from conn.execution_options(stream_results=True, yield_per=2000).execute(stmt)


@dataclass
class _Task:
    """One task's counters as the draft counts them, replayed in arrival order."""

    task_id: str = ""
    context: tuple[Principal, TaskScope] = (Principal(), TaskScope())
    usage: dict[str, Decimal] = field(default_factory=dict)


def _charge(draft: Policy, tool: str, arguments: Mapping[str, Any], task: _Task) -> None:
    charges: dict[str, Decimal] = {}
    for limit in draft.limits(tool):
        amount = limit.amount(arguments)
        if amount is not None:
            charges[limit.key] = amount
    for key, amount in charges.items():
        task.usage[key] = task.usage.get(key, Decimal(0)) + amount


def backtest(
    draft: Policy,
    url: str,
    *,
    since: datetime | None = None,
    task: str | None = None,
    seal_key: Any = None,
) -> BacktestReport:
    """Judge the ledger's past calls at ``url`` under ``draft``; see the module docstring.

    ``seal_key`` is found as the gate finds it (``$AGENT_GATE_SEAL_KEY``, the key file
    beside a SQLite ledger) when not given; without one, sealed calls are unjudged.
    """
    engine = read_only_engine(url)
    keys = Arguments(seal_key, url, None)
    changes: list[Change] = []
    unjudged: list[Unjudged] = []
    judged = other_rules = 0
    current = _Task()
    try:
        with engine.connect() as conn:
            decisions = _decisions(conn, since, task)
            for row in _calls(conn, since, task):
                rec = _stored(row)
                if rec.task_id != current.task_id:
                    current = _Task(rec.task_id, context=(
                        principal_from_json(row[10]), scope_from_json(rec.task_id, row[11])))
                ref = CallRef(rec.task_id, rec.call_id, rec.row_id, rec.tool, rec.created_at)
                arguments, why = keys.of(cast(CallRecord, rec))  # the fields `of` reads
                decision = decisions.get(rec.row_id, {})
                verdict = decision.get("verdict")
                if arguments is None:
                    unjudged.append(Unjudged(ref, _unjudged_why(rec, why)))
                    continue
                if verdict not in ("allow", "approve", "deny"):
                    unjudged.append(Unjudged(ref, _undecided_why(rec, decision)))
                else:
                    principal, scope = current.context
                    usage = {k: current.usage.get(k, Decimal(0))
                             for k in {limit.key for limit in draft.limits(rec.tool)}}
                    after = draft.evaluate(rec.tool, arguments, principal=principal,
                                           task_scope=scope, usage=usage)
                    judged += 1
                    before_rules = tuple(decision.get("rule_ids") or ())
                    if after.effect.value != verdict:
                        changes.append(Change(ref, Verdict(verdict), after.effect,
                                              before_rules, after.rule_ids))
                    elif tuple(sorted(after.rule_ids)) != tuple(sorted(before_rules)):
                        other_rules += 1
                if rec.state in COUNTED_STATES:
                    _charge(draft, rec.tool, arguments, current)
    finally:
        engine.dispose()
    return BacktestReport(
        draft_source=draft.source,
        draft_hash=draft.hash,
        judged=judged,
        changes=tuple(changes),
        unjudged=tuple(unjudged),
        same_verdict_other_rules=other_rules,
    )


def _unjudged_why(rec: _Stored, why: str | None) -> str:
    if rec.sealed_arguments is not None:
        if why and "no seal key" in why:
            return "sealed arguments and no seal key"
        return "sealed arguments that cannot be opened"
    return "arguments never formed a JSON object"


def _undecided_why(rec: _Stored, decision: Mapping[str, Any]) -> str:
    code = decision.get("code") or rec.reason_code
    if rec.state is CallState.RECEIVED and not decision:
        return "not decided yet"
    if code:
        return f"never judged by a policy file ({code})"
    return "decided by no policy file"
