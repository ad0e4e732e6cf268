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

Usage and history are replayed per task in arrival order: a call counts toward the
draft's limits when the live gate holds its charges (it was authorized and not
refunded: a call found not applied holds none), toward its ``not_after`` when it
was in fact authorized, and toward ``after`` / ``prior:`` when it in fact
succeeded, whatever the draft would have said;
the draft's limits are computed over the draft's own counters. A limit beyond one
task (``per: principal``, ``per: all``) or in a window counts as the live gate
counts it: every counted call of the principal's tasks (or of every task) that
arrived before this one, within the window (``_Scoped``, filled by a first pass
over the calls when the draft has such a limit; a call counts from its arrival,
where the live gate counts it from its authorization, later for an approved one).

The ledger is read through ``ledger.history``, whose connection cannot write (SQLite
``mode=ro``; PostgreSQL sessions with ``default_transaction_read_only``), so a
backtest cannot write the ledger even by mistake.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final, cast

from agent_gate.authorize import principal_from_json, scope_from_json
from agent_gate.gate.admission import Arguments
from agent_gate.ledger.history import PastCall, past_calls
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState
from agent_gate.policy import Policy, PolicyDecision, Principal, TaskHistory, TaskScope, Verdict

__all__ = ["BacktestReport", "CallRef", "Change", "Unjudged", "backtest"]

COUNTED_STATES: Final = frozenset({
    CallState.AUTHORIZED, CallState.EXECUTING, CallState.SUCCEEDED, CallState.FAILED,
    CallState.IN_DOUBT,
})
"""States a call reaches only once authorized: it was charged to its task's counters."""

REFUNDED: Final = frozenset({ReasonCode.RESOLVED, ReasonCode.RECONCILED})
"""The codes an ``authorized`` row carries after its in-doubt write was found not
applied (``states.RECONCILED``'s ``not_applied``, a person's ``resolve``): its charges
were given back (``quota.refund``) and count toward nothing until it runs again; the
idempotent retry that keeps them (``states.KEEPS_CHARGES``) leaves another code."""


def _charged(rec: PastCall) -> bool:
    """Whether the live gate holds the call's charges: it was authorized, and not
    refunded since (a refunded call claimed again is charged again, and moves on)."""
    if rec.state is CallState.AUTHORIZED:
        return rec.reason_code not in REFUNDED
    return rec.state in COUNTED_STATES


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


@dataclass
class _Task:
    """One task's counters as the draft counts them, replayed in arrival order."""

    task_id: str = ""
    context: tuple[Principal, TaskScope] = (Principal(), TaskScope())
    usage: dict[str, Decimal] = field(default_factory=dict)
    succeeded: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    authorized: set[str] = field(default_factory=set)


def _charge(draft: Policy, tool: str, arguments: Mapping[str, Any], task: _Task) -> None:
    charges: dict[str, Decimal] = {}
    for limit in draft.limits(tool):
        amount = limit.amount(arguments)
        if amount is not None:
            charges[limit.key] = amount
    for key, amount in charges.items():
        task.usage[key] = task.usage.get(key, Decimal(0)) + amount


class _Scoped:
    """The counted calls' charges to the draft's scoped counters, by counter and scope
    (the principal's JSON text, or "" for ``per: all``), in arrival order, with
    running sums: the usage before a call, in a window, is two bisections."""

    def __init__(self) -> None:
        self._times: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
        self._sums: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)])
        self._pending: list[tuple[datetime, int, str, str, Decimal]] = []

    def add(self, at: datetime, row_id: int, key: str, scope: str, amount: Decimal) -> None:
        self._pending.append((at, row_id, key, scope, amount))

    def seal(self) -> None:
        """Order what was added (the calls came in task order) and sum it up."""
        for at, row_id, key, scope, amount in sorted(self._pending):
            self._times[(key, scope)].append((at, row_id))
            sums = self._sums[(key, scope)]
            sums.append(sums[-1] + amount)
        self._pending = []

    def used(self, key: str, scope: str, at: datetime, row_id: int,
             window: int | None) -> Decimal:
        """What the calls that arrived before (``at``, ``row_id``) charged, in the window."""
        times, sums = self._times.get((key, scope), []), self._sums[(key, scope)]
        end = bisect_left(times, (at, row_id))
        start = 0 if window is None else bisect_left(times, (at - timedelta(seconds=window), -1))
        return sums[end] - sums[min(start, end)]


def _scope(per: str, principal: str | None) -> str:
    return principal or "" if per == "principal" else ""


def _scoped_charges(draft: Policy, keys: Arguments, url: str, since: datetime | None,
                    task: str | None) -> _Scoped:
    """First pass: every counted call's charges to the draft's scoped counters."""
    scoped = _Scoped()
    for rec in past_calls(url, since=since, task=task):
        limits = [limit for limit in draft.limits(rec.tool) if limit.scoped]
        if not limits or not _charged(rec):
            continue
        arguments, _ = keys.of(cast(CallRecord, rec))
        if arguments is None:
            continue
        for limit in limits:
            amount = limit.amount(arguments)
            if amount is not None:
                scoped.add(rec.created_at, rec.row_id, limit.key,
                           _scope(limit.per, rec.principal), amount)
    scoped.seal()
    return scoped


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
    keys = Arguments(seal_key, url, None)
    changes: list[Change] = []
    unjudged: list[Unjudged] = []
    judged = other_rules = 0
    current = _Task()
    has_scoped = any(limit.scoped for tool in draft.tools for limit in draft.limits(tool))
    scoped = _scoped_charges(draft, keys, url, since, task) if has_scoped else _Scoped()
    for rec in past_calls(url, since=since, task=task):
        if rec.task_id != current.task_id:
            current = _Task(rec.task_id, context=(
                principal_from_json(rec.principal), scope_from_json(rec.task_id, rec.scope)))
        ref = CallRef(rec.task_id, rec.call_id, rec.row_id, rec.tool, rec.created_at)
        # ``of`` reads only the fields a PastCall shares with a CallRecord
        arguments, why = keys.of(cast(CallRecord, rec))
        verdict = rec.decision.get("verdict")
        if arguments is None:
            unjudged.append(Unjudged(ref, _unjudged_why(rec, why)))
            continue
        if verdict not in ("allow", "approve", "deny"):
            unjudged.append(Unjudged(ref, _undecided_why(rec, rec.decision)))
        else:
            after = _rejudge(draft, rec, arguments, current, scoped)
            judged += 1
            before_rules = tuple(rec.decision.get("rule_ids") or ())
            if after.effect.value != verdict:
                changes.append(Change(ref, Verdict(verdict), after.effect, before_rules,
                                      after.rule_ids))
            elif tuple(sorted(after.rule_ids)) != tuple(sorted(before_rules)):
                other_rules += 1
        if _charged(rec):
            _charge(draft, rec.tool, arguments, current)
        if rec.state in COUNTED_STATES:  # it may run: ``not_after`` counts it, as live
            current.authorized.add(rec.tool)
        if rec.state is CallState.SUCCEEDED:
            current.succeeded[rec.tool] = arguments
    return BacktestReport(
        draft_source=draft.source,
        draft_hash=draft.hash,
        judged=judged,
        changes=tuple(changes),
        unjudged=tuple(unjudged),
        same_verdict_other_rules=other_rules,
    )


def _rejudge(
    draft: Policy, rec: PastCall, arguments: Any, current: _Task, scoped: _Scoped
) -> PolicyDecision:
    """The draft's decision on one past call, with the usage and history the live gate
    would have read at that point of its task (and, for scoped limits, of the ledger)."""
    principal, scope = current.context
    usage = {
        limit.key: scoped.used(limit.key, _scope(limit.per, rec.principal),
                               rec.created_at, rec.row_id, limit.window)
        if limit.scoped else current.usage.get(limit.key, Decimal(0))
        for limit in draft.limits(rec.tool)
    }
    history = TaskHistory(succeeded=current.succeeded, authorized=frozenset(current.authorized))
    return draft.evaluate(rec.tool, arguments, principal=principal, task_scope=scope,
                          usage=usage, history=history)


def _unjudged_why(rec: PastCall, why: str | None) -> str:
    if rec.sealed_arguments is not None:
        if why and "no seal key" in why:
            return "sealed arguments and no seal key"
        return "sealed arguments that cannot be opened"
    return "arguments never formed a JSON object"


def _undecided_why(rec: PastCall, decision: Mapping[str, Any]) -> str:
    code = decision.get("code") or rec.reason_code
    if rec.state is CallState.RECEIVED and not decision:
        return "not decided yet"
    if code:
        return f"never judged by a policy file ({code})"
    return "decided by no policy file"
