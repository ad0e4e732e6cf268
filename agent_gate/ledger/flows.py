"""The ledger's write flows: each one short transaction of compare-and-set updates.

Every change of a call's state goes through ``apply``, which asks the transaction
(``txn.Txn``, the one seam under the rules) for one compare-and-set (``UPDATE
tool_calls SET ... WHERE id=? AND state=? AND version=?`` plus the guard) and
appends the audit event in it. The flows differ only in what else commits with the
arrow: a decision taken with the task locked (``authorize``, ``claim_rechecked``,
``claim_approved``, all through ``_decided``), an approval consumed, quota charged,
an answer remembered. ``store.Ledger`` is the facade over these functions.

The answer flows beside this module (``answers``, ``edits``: a person's answer is
not a decision of the gate) are built from the same blocks, and these are all they
take from here: ``write`` (the transaction), ``apply_or_lose`` (an arrow inside a
flow of several steps), ``reread`` (the row as it stands after a flow lost) and
``shown_args_refusal`` (the arguments the person was shown). Every name with an
underscore is this module's own: ``tests/ledger/test_seam.py`` fails when another
ledger module imports one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from sqlalchemy import Engine

from agent_gate.errors import AnswerMismatch
from agent_gate.ledger import approvals, audit, deadlines, quota
from agent_gate.ledger.backend import joined, reading, writing
from agent_gate.ledger.cas import NO_GUARD
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import (
    CallRecord,
    DbNowPlus,
    Guard,
    Produced,
    Ruling,
    Transition,
    TxnConnection,
)
from agent_gate.ledger.states import KEEPS_CHARGES, CallState, Event, arrow
from agent_gate.ledger.txn import Lost, Txn
from agent_gate.plainjson import canonical_json
from agent_gate.privacy.scrub import bound

if TYPE_CHECKING:
    from agent_gate.privacy.results import StoredResult

__all__ = [
    "MAX_REASON_CHARS",
    "STATE_NOT_IN_AUDIT",
    "Decide",
    "Lost",
    "apply",
    "apply_or_lose",
    "apply_ruling",
    "authorize",
    "claim",
    "claim_approved",
    "claim_rechecked",
    "finish",
    "lock_task",
    "lose_if_abandoned",
    "renew",
    "reread",
    "resolve",
    "transition",
    "write",
]

MAX_REASON_CHARS = 900
STATE_NOT_IN_AUDIT = "state_not_in_audit"
"""Reason code (and audit event) of a claim refused because the row's state is not
the one its audit trail last recorded."""
Decide = Callable[[LedgerTxn, CallRecord], Ruling]
"""A decision taken inside the transaction that applies it (the task locked)."""
Within = Callable[[Txn, CallRecord], None]
"""Bookkeeping that must commit with a transition or not at all."""

Lease = tuple[str, int]
"""(owner, milliseconds by the database clock) of an arrow that takes a lease."""
_NEW_ATTEMPT: Mapping[str, Any] = {
    "finished_at": None, "result": None, "result_sha256": None, "result_bytes": None,
    "error": None,
}
"""What ``Effects.new_attempt`` clears: the last attempt's end and outcome."""


class Step(TypedDict, total=False):
    """``apply``'s keywords, as the flows above it forward them: one list, not three."""

    actor: str | None
    code: str | None
    reason: str | None
    changes: Mapping[str, Any] | None
    guard: Guard | None
    detail: Mapping[str, Any] | None
    lease: Lease | None


# ------------------------------------------------------------ the building blocks


def write(engine: Engine) -> AbstractContextManager[Txn]:
    """A write transaction (``backend.writing``): its audit entries are linked into
    the chain right before it commits."""
    return writing(engine)


def lock_task(txn: Txn, task_id: str) -> None:
    """Serialize the writers of one task until the transaction ends (``Txn.lock_task``)."""
    txn.lock_task(task_id)


def _row(txn: Txn, row_id: int) -> CallRecord:
    current = txn.read_call(id=row_id)
    if current is None:  # pragma: no cover - rows are never deleted
        raise RuntimeError(f"ledger row {row_id} vanished")
    return current


def apply(
    txn: Txn,
    rec: CallRecord,
    event: Event,
    *,
    actor: str | None = None,
    code: str | None = None,
    reason: str | None = None,
    changes: Mapping[str, Any] | None = None,
    guard: Guard | None = None,
    detail: Mapping[str, Any] | None = None,
    lease: Lease | None = None,
    unread: bool = False,
) -> CallRecord | None:
    """One compare-and-set and its audit event in ``txn``.

    The columns the arrow sets are the table's (``states.ARROWS``): ``lease`` is the
    (owner, milliseconds) of an arrow that takes one (CLAIM). ``changes`` adds the
    caller's own (an outcome, the deciding policy). Returns the updated row, or None
    when the row was no longer at ``rec.state``/``rec.version`` (nothing written).

    ``unread`` (``Txn.compare_and_set``): nothing in the transaction reads the row
    the arrow leaves; what is returned may be only its next state, version and
    attempt (the row as stored: ``txn.committed`` after the commit), and a row that
    had moved on then rolls the transaction back (``Lost``).
    """
    target, effects = arrow(rec.state, event)
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "state": target._value_,
        "version": rec.version + 1,
        "updated_at": now,
        "reason_code": code,
        "reason": bound(reason, MAX_REASON_CHARS) if reason is not None else None,
    }
    if effects.new_attempt:
        values.update(_NEW_ATTEMPT, attempt=rec.attempt + 1, started_at=now)
    if effects.takes_lease:
        if lease is None:
            raise ValueError(f"{event.value!r} takes a lease: name its owner and length")
        values["lease_owner"], values["lease_expires_ms"] = lease[0], DbNowPlus(lease[1])
    else:
        values["lease_owner"] = None
        values["lease_expires_ms"] = None
    if effects.finishes:
        values["finished_at"] = now
    values.update(changes or {})
    matched, current = txn.compare_and_set(rec, values, guard or NO_GUARD, unread=unread)
    if matched != 1:
        return None
    info: dict[str, Any] = {"version": rec.version + 1}
    if code:
        info["code"] = code
    if values.get("attempt") is not None:
        info["attempt"] = values["attempt"]
    info.update(detail or {})
    if effects.refunds and code not in KEEPS_CHARGES:
        # In the same entry as the arrow, as charges are: ``audit verify`` then expects
        # the call's charges gone, and a refund outside agent-gate shows.
        refunded = quota.refund(txn, rec.row_id)
        if refunded:
            info["refunds"] = refunded
    audit.append(
        txn,
        task_id=rec.task_id,
        call_row_id=rec.row_id,
        call_id=rec.call_id,
        event=event._value_,
        from_state=rec.state._value_,
        to_state=target._value_,
        actor=actor,
        detail=info,
        at=now,
    )
    # The dialect cannot RETURN from an UPDATE: read it back.
    return current if current is not None else _row(txn, rec.row_id)


def apply_or_lose(
    txn: Txn, rec: CallRecord, event: Event, *, unread: bool = False, **step: Unpack[Step]
) -> CallRecord:
    """``apply`` inside a flow of several steps: the row the arrow left, or ``Lost``
    (raised out of ``write``, it rolls every step back), never a half-done flow."""
    current = apply(txn, rec, event, unread=unread, **step)
    if current is None:
        raise Lost
    return current


def apply_ruling(
    txn: Txn,
    rec: CallRecord,
    ruling: Ruling,
    *,
    actor: str | None,
    lease: Lease | None = None,
    detail: Mapping[str, Any] | None = None,
    unread: bool = False,
) -> CallRecord:
    """Apply a decision's arrow and what the table says commits with it: the approval
    it consumes (APPROVE), the quota charges (ALLOW, APPROVE), the deadline of a wait
    (REQUIRE_APPROVAL). ``unread``: ``apply``."""
    assert ruling.event is not None
    effects = arrow(rec.state, ruling.event).effects
    recorded = ruling.detail if detail is None else detail
    charges = ruling.charges if effects.charges else {}
    if charges and ruling.event is Event.CLAIM:
        # A re-checked claim charges only what a refund gave back (the call was found
        # not applied and runs again); a call still charged is left as it is.
        charges = quota.charge(txn, task_id=rec.task_id, call_row_id=rec.row_id,
                               amounts=charges)
    if charges:
        # In the entry as stored (``quota.charge``'s text), so that ``audit verify`` finds
        # a charge deleted or lowered: the task could otherwise spend past its limit.
        recorded = {**(recorded or {}),
                    "charges": {k: str(v) for k, v in sorted(charges.items())}}
    applied = apply_or_lose(
        txn, rec, ruling.event, actor=actor, code=ruling.code, reason=ruling.reason,
        changes=ruling.changes, detail=recorded, lease=lease, unread=unread,
    )
    if effects.arms_deadline and ruling.deadline is not None:
        deadlines.arm(txn, rec, rec.version + 1, ruling.deadline)
    if effects.consumes_approval and (
        ruling.approval_id is None
        or not all(approvals.consume(txn, i, applied.attempt + 1)
                   for i in (ruling.approval_id, *ruling.quorum_ids))
    ):
        raise Lost
    if charges and ruling.event is not Event.CLAIM:
        quota.charge(txn, task_id=rec.task_id, call_row_id=rec.row_id, amounts=charges)
    return applied


def refuse_unaudited(txn: Txn, rec: CallRecord, actor: str | None) -> CallRecord | None:
    """The row, marked refused, if it is still as ``rec`` saw it but its audit
    trail last recorded another state; None when the trail backs it (or the row
    moved on, and the caller's compare-and-set loses the race as usual).

    Run before a transition that leads to running the tool: a state rewritten
    outside agent-gate (a finished call put back to ``authorized``) must not run
    the tool again. One indexed read per claim.
    """
    trail = audit.audited_state(txn, rec.task_id, rec.row_id)
    if trail == rec.state._value_:
        return None
    current = txn.read_call(id=rec.row_id)
    if current is None or (current.state, current.version) != (rec.state, rec.version):
        return None
    recorded = repr(trail) if trail is not None else "no state"
    reason = (
        f"not run: the row says {current.state.value!r} but its audit trail last recorded "
        f"{recorded}; the state was changed outside agent-gate (agent-gate audit verify)"
    )
    txn.compare_and_set(current, {"reason_code": STATE_NOT_IN_AUDIT, "reason": reason},
                        NO_GUARD)
    audit.append(
        txn, task_id=current.task_id, call_row_id=current.row_id,
        call_id=current.call_id, event=STATE_NOT_IN_AUDIT,
        from_state=current.state.value, to_state=current.state.value, actor=actor,
        detail={"audited_state": trail, "version": current.version},
    )
    return txn.read_call(id=rec.row_id)


def reread(engine: Engine, rec: CallRecord) -> CallRecord:
    """``rec``'s row as committed now, in a read transaction of its own: what a flow
    that lost (``Lost``) reports, since its own transaction was rolled back."""
    with reading(engine) as txn:
        return _row(txn, rec.row_id)


def _locked_row(txn: Txn, rec: CallRecord) -> CallRecord:
    """Lock ``rec``'s task, then read the row: ``Lost`` unless it is still at
    ``rec``'s state and version (someone else moved it since it was read)."""
    txn.lock_task(rec.task_id)
    current = txn.read_call(id=rec.row_id)
    if current is None or (current.state, current.version) != (rec.state, rec.version):
        raise Lost
    return current


def _decided(
    engine: Engine,
    rec: CallRecord,
    decide: Decide,
    then: Callable[[Txn, CallRecord, Ruling], CallRecord],
    *,
    audited_for: str | None = None,
    needs_event: bool = False,
) -> tuple[Transition, Ruling | None]:
    """The shape of every flow that decides inside its own transaction.

    Lock the task and re-read the row (a row that moved on: ``won=False``, nothing
    decided); with ``audited_for``, refuse a row its audit trail does not back; ask
    ``decide``; a ruling without an event changes nothing (or, ``needs_event``, is a
    bug); else ``then`` applies it. A compare-and-set lost anywhere rolls it all back.
    """
    try:
        with write(engine) as txn:
            current = _locked_row(txn, rec)
            if audited_for is not None:
                refused = refuse_unaudited(txn, current, audited_for)
                if refused is not None:
                    return Transition(False, refused), None
            ruling = decide(LedgerTxn(txn), current)
            if ruling.event is None:
                if needs_event:
                    raise ValueError("an authorization ruling must name an event")
                return Transition(False, current), ruling
            applied = then(txn, current, ruling)
    except Lost:
        return Transition(False, reread(engine, rec)), None
    return Transition(True, applied), ruling


# ------------------------------------------------------------------- the flows


def transition(
    engine: Engine,
    rec: CallRecord,
    event: Event,
    *,
    within: Within | None = None,
    audited_only: bool = False,
    **step: Unpack[Step],
) -> Transition:
    """``Ledger.transition``: one arrow, if the row is still where ``rec`` saw it.

    Without ``within`` nothing in the transaction reads the updated row (``apply``'s
    ``unread``): the backend may answer the arrow with the commit, and one that lost
    then rolls it all back."""
    try:
        with write(engine) as txn:
            if audited_only:
                refused = refuse_unaudited(txn, rec, step.get("actor"))
                if refused is not None:
                    return Transition(False, refused)
            current = apply(txn, rec, event, unread=within is None, **step)
            if current is None:
                return Transition(False, _row(txn, rec.row_id))
            if within is not None:
                within(txn, current)
    except Lost:  # the row had moved on: nothing was committed
        return Transition(False, reread(engine, rec))
    return Transition(True, txn.committed(current))


def authorize(
    engine: Engine, rec: CallRecord, decide: Decide, *, actor: str | None = None
) -> tuple[Transition, Ruling | None]:
    """``Ledger.authorize``: decide a ``received`` call and apply it, task locked."""
    return _decided(
        engine, rec, decide,
        lambda txn, current, ruling: apply_ruling(txn, current, ruling, actor=actor),
        needs_event=True,
    )


def claim_approved(
    engine: Engine, rec: CallRecord, *, owner: str, lease_ms: int, decide: Decide
) -> tuple[Transition, Ruling | None]:
    """``Ledger.claim_approved``: ``awaiting_approval -> authorized -> executing``."""

    def then(txn: Txn, current: CallRecord, ruling: Ruling) -> CallRecord:
        if ruling.event is Event.DENY:
            return apply_ruling(txn, current, ruling, actor=owner)
        if ruling.event is not Event.APPROVE or ruling.approval_id is None:
            raise ValueError("an approved claim needs APPROVE and the approval's id")
        approval = {"approval_id": ruling.approval_id}
        authorized = apply_ruling(
            txn, current, ruling, actor=owner, detail={**(ruling.detail or {}), **approval}
        )
        return apply_or_lose(
            txn, authorized, Event.CLAIM, actor=owner, lease=(owner, lease_ms), detail=approval
        )

    return _decided(engine, rec, decide, then, audited_for=owner)


def claim_rechecked(
    engine: Engine, rec: CallRecord, *, owner: str, lease_ms: int, decide: Decide
) -> tuple[Transition, Ruling | None]:
    """``Ledger.claim_rechecked``: ``authorized -> executing`` after a re-check."""

    def then(txn: Txn, current: CallRecord, ruling: Ruling) -> CallRecord:
        return apply_ruling(txn, current, ruling, actor=owner, lease=(owner, lease_ms))

    return _decided(engine, rec, decide, then, audited_for=owner)


def claim(
    engine: Engine,
    rec: CallRecord,
    *,
    owner: str,
    lease_ms: int,
    within: Within | None = None,
    trail_checked: bool = True,
) -> Transition:
    """``Ledger.claim``: ``authorized -> executing``, a new attempt leased to ``owner``."""
    return transition(
        engine, rec, Event.CLAIM, actor=owner, within=within, lease=(owner, lease_ms),
        audited_only=trail_checked,
    )


def shown_args_refusal(
    txn: Txn, current: CallRecord, args_hash: str | None, *, answer: str, actor: str | None
) -> AnswerMismatch | None:
    """Why an answer to ``current`` given for arguments hashing to ``args_hash`` is
    refused (None: they are the call's, or no hash was given), the refusal audited.

    ``current`` is the row as read in the answer's own write transaction, after its
    task was locked, and the answer commits in that same transaction: nothing the
    ledger writes can come between this compare and the commit, a compare-and-set as
    an ``If-Match`` is. The entry names both hashes, never an argument."""
    if args_hash is None or current.args_hash == args_hash:
        return None
    held = current.args_hash
    audit.append(
        txn, task_id=current.task_id, call_row_id=current.row_id, call_id=current.call_id,
        event="answer_refused", from_state=current.state.value,
        to_state=current.state.value, actor=actor,
        detail={"answer": answer, "expected_args_hash": args_hash, "actual_args_hash": held},
    )
    return AnswerMismatch(
        f"{answer} of call {current.call_id!r} of task {current.task_id!r} refused: it was "
        f"given for arguments {args_hash[:16]!r}, the call's hash to {str(held)[:16]!r}; "
        "read the call again and answer what it holds now"
    )


def resolve(
    engine: Engine,
    rec: CallRecord,
    event: Event,
    *,
    actor: str,
    code: str,
    reason: str,
    result: StoredResult | None,
    error: Mapping[str, Any] | None,
    args_hash: str | None,
) -> Transition:
    """``Ledger.resolve``: a person settles a call in doubt (a SETTLE_* arrow, or RETRY
    for one that did not apply), only if its arguments still hash to ``args_hash``
    (``shown_args_refusal``; None: not checked). ``won=False``: it moved first."""
    changes, info = _outcome(result, error, None)
    try:
        with write(engine) as txn:
            current = _locked_row(txn, rec)
            refused = shown_args_refusal(txn, current, args_hash, answer="resolve",
                                         actor=actor)
            if refused is None:
                settled = apply_or_lose(txn, current, event, actor=actor, code=code,
                                        reason=reason, changes=changes, detail=info)
    except Lost:
        return Transition(False, reread(engine, rec))
    if refused is not None:
        raise refused
    return Transition(True, settled)


def renew(engine: Engine, rec: CallRecord, *, owner: str, lease_ms: int) -> bool:
    """``Ledger.renew``: push the lease expiry out while the tool runs (no new version).

    Matches on the claimed version, so a renewal can never revive a call that was
    judged lost in the meantime (a version is only ever ``executing`` once).
    """
    if rec.state is not CallState.EXECUTING:
        return False
    with write(engine) as txn:
        matched, _ = txn.compare_and_set(
            rec, {"lease_expires_ms": DbNowPlus(lease_ms)},
            Guard(owner=True, lease_owner=owner),
        )
    return matched == 1


def finish(
    engine: Engine,
    rec: CallRecord,
    event: Event,
    *,
    actor: str | None,
    result: StoredResult | None,
    error: Mapping[str, Any] | None,
    code: str | None,
    reason: str | None,
    lease_owner: str | None,
    detail: Mapping[str, Any] | None,
) -> Transition:
    """``Ledger.finish``: an arrow that stores an outcome (SUCCEED, FAIL, LOSE, SETTLE_*)."""
    guard = Guard(owner=True, lease_owner=lease_owner) if lease_owner is not None else None
    changes, info = _outcome(result, error, detail)
    return transition(
        engine, rec, event, actor=actor, code=code, reason=reason, changes=changes,
        guard=guard, detail=info,
    )


def finish_with(
    engine: Engine, rec: CallRecord, work: Callable[[TxnConnection], Produced], *,
    lease_owner: str, conn: TxnConnection | None = None,
) -> Transition:
    """``Ledger.finish_with``: run ``work`` on this transaction's connection and commit
    what it wrote together with the outcome it produced, or neither: a row that moved
    on (the lease lost) rolls its writes back too; what ``work`` raises rolls back and
    propagates. ``conn``: a transaction the caller holds and commits (another
    library's, on the ledger's database), used through a savepoint instead."""
    guard = Guard(owner=True, lease_owner=lease_owner)
    if conn is not None:
        return _finish_within(engine, conn, rec, work, guard, lease_owner)
    try:
        with write(engine) as txn:
            produced = work(txn.conn)
            changes, info = _outcome(produced.result, None, None)
            current = apply(
                txn, rec, produced.event, actor=lease_owner, code=produced.code,
                reason=produced.reason, changes=changes, guard=guard, detail=info,
            )
            if current is None:
                raise Lost(rec.row_id)  # roll back the tool's writes with the outcome
    except Lost:
        return Transition(False, reread(engine, rec))
    return Transition(True, txn.committed(current))


def _finish_within(
    engine: Engine, conn: TxnConnection, rec: CallRecord,
    work: Callable[[TxnConnection], Produced], guard: Guard, lease_owner: str,
) -> Transition:
    """``finish_with`` inside the caller's transaction: in plain Core (the caller's
    connection is not one the ledger's backend opened), its audit entries linked as
    appended, the savepoint rolled back when the row moved on or ``work`` raised."""
    txn = joined(conn)
    with conn.begin_nested() as savepoint:
        produced = work(conn)
        changes, info = _outcome(produced.result, None, None)
        current = apply(
            txn, rec, produced.event, actor=lease_owner, code=produced.code,
            reason=produced.reason, changes=changes, guard=guard, detail=info,
        )
        if current is None:
            savepoint.rollback()
            return Transition(False, reread(engine, rec))
    return Transition(True, current)


def _outcome(
    result: StoredResult | None, error: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The columns and audit detail an arrow that stores an outcome sets."""
    changes: dict[str, Any] = {}
    info = dict(detail or {})
    if result is not None:
        changes.update(result=result.text, result_sha256=result.sha256,
                       result_bytes=result.size)
        info["result_sha256"] = result.sha256
    if error is not None:
        changes["error"] = canonical_json(dict(error))
        info["error_type"] = error.get("type")
    return changes, info


def lose_if_abandoned(
    engine: Engine, rec: CallRecord, *, actor: str, expired_only: bool, code: str, reason: str
) -> Transition:
    """``Ledger.lose_if_abandoned``: ``executing -> in_doubt`` for a call whose owner
    is gone, re-checked inside the update (same owner, lease still expired)."""
    guard = Guard(owner=True, lease_owner=rec.lease_owner, lease_expired=expired_only)
    return transition(
        engine, rec, Event.LOSE, actor=actor, code=code, reason=reason, guard=guard,
        detail={"owner": rec.lease_owner, "attempt": rec.attempt},
    )
