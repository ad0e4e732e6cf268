"""Acting on passed deadlines: one pass of the sweeper, safe with any number of them.

Why a sweeper and not the worker that waits: nobody may be waiting (the agent went
away, the MCP client closed), and a worker's clock is not the ledger's. A pass reads
the armed deadlines that passed by the database's clock, earliest first, and acts on
each in its own short write transaction:

1. lock the call's task (every answer to a call takes the same lock, so a person's
   approval and a sweeper never interleave) and read the deadline and the call again;
2. a deadline no longer armed (another sweeper acted) or not passed: nothing;
3. a call that has moved on from the wait the deadline was armed for: ``moot``;
   a call with a person's usable approval standing: ``answered`` (they were in time);
4. else ``then``: ``deny`` takes the arrow ``states.DEADLINE_ENDS`` names (rejected,
   reason ``approval_timeout``), ``escalate`` appends an ``approval_escalated`` entry
   to the audit trail and the call keeps waiting, answerable by the role alone.

Each step is a compare-and-set: the deadline's ``outcome = 'armed'`` and the call's
``state, version``. Two sweepers that race for one deadline both try; one update
matches, the other's transaction rolls back (``txn.Lost``) and counts nothing. So a
call is never denied twice nor escalated twice, however many sweepers run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, and_, select, update

from agent_gate.ledger import approvals, audit
from agent_gate.ledger.backend import begin_read
from agent_gate.ledger.deadlines import ANSWERED, ARMED, DENIED, ESCALATED, MOOT
from agent_gate.ledger.flows import apply, write
from agent_gate.ledger.models import APPROVAL_DEADLINES
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.sql import db_now_ms
from agent_gate.ledger.states import DEADLINE_ENDS, CallState, DeadlineEnd
from agent_gate.ledger.txn import Lost, Txn

__all__ = ["ESCALATED_EVENT", "MAX_SWEEP_BATCH", "Fired", "SweepReport", "sweep"]

MAX_SWEEP_BATCH = 1000
ESCALATED_EVENT = ReasonCode.APPROVAL_ESCALATED.value
"""The audit event of an escalation: the call keeps waiting, for the role alone."""
_T = APPROVAL_DEADLINES


@dataclass(frozen=True, slots=True)
class Fired:
    """One deadline a sweeper acted on, and what it did."""

    task_id: str
    call_id: str
    outcome: str
    role: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "call_id": self.call_id, "outcome": self.outcome,
                "role": self.role}


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one pass did: the deadlines this sweeper acted on (another sweeper's are
    not counted), and how many passed deadlines it looked at."""

    looked_at: int
    fired: tuple[Fired, ...] = field(default_factory=tuple)

    def count(self, outcome: str) -> int:
        return sum(1 for f in self.fired if f.outcome == outcome)

    def to_dict(self) -> dict[str, Any]:
        return {"looked_at": self.looked_at, "denied": self.count(DENIED),
                "escalated": self.count(ESCALATED), "answered": self.count(ANSWERED),
                "moot": self.count(MOOT), "fired": [f.to_dict() for f in self.fired]}


def _passed(limit: int) -> Any:
    return (select(_T.c.call_row_id, _T.c.task_id).where(
        _T.c.outcome == ARMED, _T.c.due_ms <= db_now_ms())
        .order_by(_T.c.due_ms, _T.c.call_row_id).limit(limit))


def sweep(engine: Engine, *, by: str, limit: int = 100) -> SweepReport:
    """One pass over at most ``limit`` passed deadlines (``by``: the sweeper, audited
    as ``sweeper:BY``). A pass that finds ``limit`` may leave more for the next."""
    if not 1 <= limit <= MAX_SWEEP_BATCH:
        raise ValueError(f"a sweep acts on 1 to {MAX_SWEEP_BATCH} deadlines, not {limit}")
    with begin_read(engine) as conn:
        due = [(int(r[0]), r[1]) for r in conn.execute(_passed(limit))]
    fired = [f for row_id, task_id in due
             if (f := _fire(engine, row_id, task_id, f"sweeper:{by}")) is not None]
    return SweepReport(len(due), tuple(fired))


def _fire(engine: Engine, row_id: int, task_id: str, actor: str) -> Fired | None:
    try:
        with write(engine) as txn:
            txn.lock_task(task_id)
            row = txn.execute(select(_T).where(
                _T.c.call_row_id == row_id, _T.c.outcome == ARMED, _T.c.due_ms <= db_now_ms(),
            )).mappings().first()
            current = txn.read_call(id=row_id)
            if row is None or current is None:
                return None  # another sweeper acted first, or it was armed anew
            outcome = _judge(txn, row, current)
            _settle(txn, row_id, outcome, actor)
            if outcome == DENIED:
                event, code = DEADLINE_ENDS[DeadlineEnd.DENY]
                rule = f" ({row['rule_id']})" if row["rule_id"] else ""
                denied = apply(txn, current, event, actor=actor, code=code,
                               reason=f"nobody answered before the deadline{rule}: denied, "
                               "not run",
                               detail={"rule": row["rule_id"], "due_ms": int(row["due_ms"])})
                if denied is None:
                    raise Lost
                # The answer as a person's denial is kept: whoever waits for one (gate.wait,
                # the MCP proxy) reads "denied", and is woken (NOTIFY) with the commit.
                approvals.insert_answer(
                    txn, call_row_id=row_id, task_id=current.task_id, call_id=current.call_id,
                    verdict=approvals.DENIED, args_hash=current.args_hash,
                    policy_hash=current.policy_hash, by=actor,
                    reason=f"{code}: nobody answered before the deadline{rule}")
            elif outcome == ESCALATED:
                audit.append(
                    txn, task_id=current.task_id, call_row_id=row_id, call_id=current.call_id,
                    event=ESCALATED_EVENT, from_state=current.state.value,
                    to_state=current.state.value, actor=actor,
                    detail={"role": row["role"], "rule": row["rule_id"],
                            "due_ms": int(row["due_ms"]), "version": current.version})
                approvals.announce(txn, current.task_id, current.call_id)
    except Lost:  # another sweeper (or a person) moved first: theirs is the one
        return None
    return Fired(current.task_id, current.call_id, outcome,
                 row["role"] if outcome == ESCALATED else None)


def _judge(txn: Txn, row: Any, current: CallRecord) -> str:
    """What a passed deadline does to the call as it is now."""
    if (current.state is not CallState.AWAITING_APPROVAL
            or current.version != row["armed_version"]):
        return MOOT
    last = approvals.latest(txn, current.row_id)
    if (last is not None and not last.denied and not last.consumed and not last.expired()
            and last.args_hash == current.args_hash):
        return ANSWERED
    return DENIED if row["then"] == DeadlineEnd.DENY.value else ESCALATED


def _settle(txn: Txn, row_id: int, outcome: str, actor: str) -> None:
    """The deadline's compare-and-set: ``armed`` -> ``outcome``, or ``Lost``."""
    done = txn.execute(update(_T).where(and_(_T.c.call_row_id == row_id, _T.c.outcome == ARMED))
                       .values(outcome=outcome, fired_ms=db_now_ms(), fired_by=actor[:200]))
    if done.rowcount != 1:
        raise Lost
