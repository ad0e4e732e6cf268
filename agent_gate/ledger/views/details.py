"""Everything the ledger knows about one call, as one value: ``CallDetails``.

What an operator reads before deciding (``agent-gate call show``; the same value,
``to_dict()``, is what an HTTP API serves): the tool, the arguments as stored
(redacted fields as their stand-ins: nothing here unseals), the schema verdict, the
policy's decision with rule ids and reasons, every answer a person gave, every
audit entry with its actor and time, the attempts, and the stored result or error,
bounded. Read in one snapshot, from the call's row, its approvals and its trail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select
from sqlalchemy import text as sql_text

from agent_gate.ledger import approvals, deadlines
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.audit import AuditRecord, record_of
from agent_gate.ledger.backend import begin_read
from agent_gate.ledger.deadlines import WaitDeadline
from agent_gate.ledger.edits import EditRecord, edits_of, edits_of_calls
from agent_gate.ledger.models import AUDIT_EVENTS, SWEPT_STATES, SWEPT_WHERE
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CALL_COLUMNS, CALLS, CallRecord, call_record
from agent_gate.ledger.states import CallState
from agent_gate.privacy.scrub import bound

if TYPE_CHECKING:
    from agent_gate.ledger.txn import Txn

__all__ = [
    "DEFAULT_MAX_SHOWN",
    "Attempt",
    "CallDetails",
    "DecisionRecord",
    "SchemaVerdict",
    "answers_page",
    "details_page",
    "read_details",
]

DEFAULT_MAX_SHOWN = 4000
"""Characters of a stored result's JSON text shown; past it only a preview and its size."""

_EVENTS = AUDIT_EVENTS
REDACTED_KEY = "redacted"
"""The key that marks a stand-in (``privacy.redaction.REDACTED_KEY``; not imported from
there: a ledger reader such as ``agent-gate tasks`` must not load the policy layer)."""

_SCHEMA_CODES = {
    ReasonCode.UNKNOWN_TOOL.value: "unknown_tool",
    ReasonCode.ARGUMENTS_NOT_OBJECT.value: "not_an_object",
    ReasonCode.ARGUMENTS_NOT_JSON.value: "not_json",
    ReasonCode.SCHEMA_INVALID.value: "invalid",
    ReasonCode.ARGUMENTS_TOO_DEEP.value: "too_deep",
    ReasonCode.ARGUMENTS_INCOMPLETE.value: "incomplete",
}
"""Decision codes that mean the arguments never reached the policy, and what they say."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True, slots=True)
class SchemaVerdict:
    """``valid``, ``not_judged`` (still received), or why the arguments were refused
    (``invalid`` with each error's JSON pointer and keyword, ``unknown_tool``...)."""

    status: str
    errors: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "errors": list(self.errors)}


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """The newest decision taken on the call, as its audit trail recorded it: its
    verdict, rules and their reasons (a ``PolicyDecision`` or a custom ``Decision``,
    read back)."""

    verdict: str | None
    code: str | None
    policy_hash: str | None
    rule_ids: tuple[str, ...]
    reasons: tuple[str, ...]
    seq: int
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "code": self.code, "policy_hash": self.policy_hash,
                "rule_ids": list(self.rule_ids), "reasons": list(self.reasons),
                "seq": self.seq, "at": _iso(self.at)}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of the tool: claimed (``executing``) by ``owner`` and, unless it still
    runs, ended in ``ended_in``."""

    number: int
    owner: str | None
    started_at: datetime
    ended_at: datetime | None
    ended_in: str | None
    code: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "owner": self.owner,
                "started_at": _iso(self.started_at), "ended_at": _iso(self.ended_at),
                "ended_in": self.ended_in, "code": self.code}


@dataclass(frozen=True, slots=True)
class CallDetails:
    """One call as the ledger holds it; ``to_dict()`` is its JSON form."""

    call: CallRecord
    schema: SchemaVerdict
    decision: DecisionRecord | None
    approvals: tuple[ApprovalRecord, ...]
    history: tuple[AuditRecord, ...]
    attempts: tuple[Attempt, ...]
    result_text: str | None
    """The stored result's JSON text, cut at the bound (``result_truncated``)."""
    result_truncated: bool
    deadline: WaitDeadline | None = None
    """The deadline of its wait for a person (an approve rule's ``approval: timeout``)."""
    edits: tuple[EditRecord, ...] = ()
    """Approvers' edits of the arguments, oldest first (``ledger.edits``)."""

    @property
    def redacted(self) -> bool:
        """Some argument fields are stand-ins (the full values are sealed, not shown)."""
        args = self.call.arguments
        return self.call.sealed_arguments is not None and isinstance(args, dict) and any(
            isinstance(v, dict) and REDACTED_KEY in v for v in _values(args))

    def to_dict(self) -> dict[str, Any]:
        c = self.call
        return {
            "task_id": c.task_id,
            "call_id": c.call_id,
            "tool": c.tool,
            "effect": c.effect,
            "idempotency": c.idempotency,
            "state": c.state.value,
            "version": c.version,
            "code": c.reason_code,
            "reason": c.reason,
            "arguments": c.arguments,
            "args_hash": c.args_hash,
            "redacted": self.redacted,
            "schema": self.schema.to_dict(),
            "decision": self.decision.to_dict() if self.decision else None,
            "policy_hash": c.policy_hash,
            "rule_ids": list(c.rule_ids),
            "approvals": [a.to_dict() for a in self.approvals],
            "deadline": self.deadline.to_dict() if self.deadline is not None else None,
            "edited": list(c.edited),
            "edits": [e.to_dict() for e in self.edits],
            "history": [_entry(e) for e in self.history],
            "attempts": [a.to_dict() for a in self.attempts],
            "lease": {"owner": c.lease_owner, "expires_ms": c.lease_expires_ms},
            "result": {
                "json": self.result_text,
                "truncated": self.result_truncated,
                "omitted": c.result_omitted,
                "sha256": c.result_sha256,
                "bytes": c.result_bytes,
            },
            "error": c.error,
            "created_at": _iso(c.created_at),
            "updated_at": _iso(c.updated_at),
            "started_at": _iso(c.started_at),
            "finished_at": _iso(c.finished_at),
            "trace": {"trace_id": c.trace_id, "span_id": c.span_id},
        }


def _values(value: Any, depth: int = 0) -> list[Any]:
    """Every value nested in a JSON object (stand-ins may sit at any depth)."""
    if depth > 32:
        return []
    children = list(value.values()) if isinstance(value, dict) else (
        value if isinstance(value, list) else [])
    return [v for c in children for v in (c, *_values(c, depth + 1))]


def _entry(e: AuditRecord) -> dict[str, Any]:
    return {"seq": e.seq, "at": _iso(e.at), "event": e.event, "from": e.from_state,
            "to": e.to_state, "actor": e.actor, "detail": e.detail}


def read_details(
    txn: Txn, task_id: str, call_id: str, *, max_shown: int = DEFAULT_MAX_SHOWN
) -> CallDetails | None:
    """The call's details in the snapshot ``txn`` reads, or None if there is no such call."""
    rec = txn.read_call(task_id=task_id, call_id=call_id)
    if rec is None:
        return None
    conn = txn.conn
    history = tuple(
        record_of(r) for r in conn.execute(
            select(_EVENTS)
            .where(_EVENTS.c.call_row_id == rec.row_id)  # the (call_row_id, id) index
            .order_by(_EVENTS.c.id)
        ).mappings()
    )
    return _assemble(rec, history, approvals.answers(conn, rec.row_id), max_shown,
                     deadlines.of_call(txn, rec),
                     edits_of(conn, rec.row_id) if rec.edited else ())


def details_page(
    engine: Engine, states: Sequence[CallState], *, after: int | None = None,
    limit: int = 100, max_shown: int = DEFAULT_MAX_SHOWN,
) -> list[CallDetails]:
    """The details of the calls in ``states`` (swept states, across tasks), a page at a
    time in ``ref`` order after ``after``, in one snapshot and four statements
    whatever the page holds: its rows, their trails, their answers, their deadlines
    (read one call at a time, a page of 10,000 waiting calls was 30,001 statements),
    and a fifth, their edits, when an approver edited one of them (it was one per
    edited call)."""
    values = [s.value for s in states]
    if not set(values) <= set(SWEPT_STATES):
        raise ValueError("a page of details lists swept states only")
    stmt = select(*CALL_COLUMNS).where(CALLS.c.state.in_(values), sql_text(SWEPT_WHERE))
    if after is not None:
        stmt = stmt.where(CALLS.c.id > after)
    with begin_read(engine) as conn:
        recs = [call_record(r) for r in conn.execute(stmt.order_by(CALLS.c.id).limit(limit))]
        ids = [r.row_id for r in recs]
        trails: dict[int, list[AuditRecord]] = {i: [] for i in ids}
        if ids:
            for r in conn.execute(select(_EVENTS).where(_EVENTS.c.call_row_id.in_(ids))
                                  .order_by(_EVENTS.c.id)).mappings():
                trails[int(r["call_row_id"])].append(record_of(r))
        answers = approvals.answers_of(conn, ids)
        waits = deadlines.of_calls(conn, recs)
        edits = edits_of_calls(conn, [r.row_id for r in recs if r.edited])
    return [_assemble(r, tuple(trails[r.row_id]), answers[r.row_id], max_shown,
                      waits.get(r.row_id), edits.get(r.row_id, ())) for r in recs]


def answers_page(engine: Engine, refs: Sequence[int]
                 ) -> list[tuple[CallRecord, list[ApprovalRecord]]]:
    """These calls (by ``ref``, in ``ref`` order; those gone left out) and every answer
    each received, in one snapshot and two statements whatever their number: what a
    list shows a quorum's "1 of 2" from (read one call at a time, it was two per row)."""
    if not refs:
        return []
    with begin_read(engine) as conn:
        recs = [call_record(r) for r in conn.execute(
            select(*CALL_COLUMNS).where(CALLS.c.id.in_(list(refs))).order_by(CALLS.c.id))]
        answers = approvals.answers_of(conn, [r.row_id for r in recs])
    return [(r, answers[r.row_id]) for r in recs]


def _assemble(rec: CallRecord, history: tuple[AuditRecord, ...],
              answers: list[ApprovalRecord], max_shown: int,
              deadline: WaitDeadline | None, edits: tuple[EditRecord, ...]) -> CallDetails:
    text = None if rec.result is None and rec.result_sha256 is None else json.dumps(
        rec.result, ensure_ascii=False, sort_keys=True)
    if rec.result_omitted:
        text = None
    shown = bound(text, max_shown) if text is not None else None
    return CallDetails(
        call=rec,
        schema=_schema(rec, history),
        decision=_decision(history),
        approvals=tuple(answers),
        history=history,
        attempts=_attempts(history),
        result_text=shown,
        result_truncated=text is not None and shown != text,
        deadline=deadline,
        edits=edits,
    )


def _schema(rec: CallRecord, history: tuple[AuditRecord, ...]) -> SchemaVerdict:
    for e in history:
        if e.from_state == CallState.RECEIVED.value and e.to_state != e.from_state:
            detail = e.detail or {}
            status = _SCHEMA_CODES.get(str(detail.get("code")))
            if status is None:
                return SchemaVerdict("valid")
            return SchemaVerdict(status, tuple(detail.get("errors") or ()))
    if rec.state is CallState.RECEIVED:
        return SchemaVerdict("not_judged")
    status = _SCHEMA_CODES.get(str(rec.reason_code))
    return SchemaVerdict(status or "valid")


def _decision(history: tuple[AuditRecord, ...]) -> DecisionRecord | None:
    for e in reversed(history):
        detail = e.detail or {}
        if "verdict" in detail or "rule_ids" in detail:
            return DecisionRecord(
                verdict=detail.get("verdict"), code=detail.get("code"),
                policy_hash=detail.get("policy_hash"),
                rule_ids=tuple(str(r) for r in detail.get("rule_ids") or ()),
                reasons=tuple(str(r) for r in detail.get("reasons") or ()),
                seq=e.seq, at=e.at,
            )
    return None


def _attempts(history: tuple[AuditRecord, ...]) -> tuple[Attempt, ...]:
    out: list[Attempt] = []
    running: dict[str, Any] | None = None
    for e in history:
        if e.to_state == CallState.EXECUTING.value and e.from_state != e.to_state:
            number = (e.detail or {}).get("attempt")
            running = {"number": int(number) if number else len(out) + 1,
                       "owner": e.actor, "started_at": e.at}
        elif running is not None and e.from_state == CallState.EXECUTING.value \
                and e.to_state != e.from_state:
            out.append(Attempt(**running, ended_at=e.at, ended_in=e.to_state,
                               code=(e.detail or {}).get("code")))
            running = None
    if running is not None:
        out.append(Attempt(**running, ended_at=None, ended_in=None, code=None))
    return tuple(out)
