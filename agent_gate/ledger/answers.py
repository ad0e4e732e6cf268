"""A person's answers to a call that waits: an approval (perhaps with a grant), a denial.

Apart from ``flows`` because an answer is not a decision of the gate: it is recorded
beside the call (``approvals``), and the call moves only when the gate next decides
it (an approval) or at once (a denial that ends it). Under a quorum rule a denial may
also only be recorded: the call is rejected when enough distinct people denied it.
Each answer is taken with the task locked and compared with the arguments the
person was shown (``flows.shown_args_refusal``) in its own transaction.

Two judgements every answer shares are made here, once: whether the call still waits
for a person (``answerable``, read under the task's lock by ``waiting_call`` for
approve, edit and deny alike; the gate asks it too before it does work for an answer)
and whether an approval's lifetime is one (``lifetime_ms``, the ledger's check of
``approvals.ttl_problem`` for approve and edit alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from agent_gate.errors import GateUsageError, NotAwaitingApproval
from agent_gate.ledger import approvals, audit, grants
from agent_gate.ledger.flows import (
    MAX_REASON_CHARS,
    apply_or_lose,
    reread,
    shown_args_refusal,
    write,
)
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CallRecord, Transition
from agent_gate.ledger.states import CallState, Event
from agent_gate.ledger.txn import Lost, Txn
from agent_gate.privacy.scrub import bound

__all__ = ["GrantTerms", "answerable", "approve", "approved", "deny", "distinct_denials",
           "judged_ms", "lifetime_ms", "waiting_call"]


@dataclass(frozen=True, slots=True)
class GrantTerms:
    """The grant an approver chose, as the policy's option spells it out."""

    option: str
    rule_ids: tuple[str, ...]
    max_calls: int | None
    seconds: int | None


def approve(
    engine: Engine,
    rec: CallRecord,
    *,
    by: str,
    reason: str | None,
    expires_ms: int | None,
    ttl_ms: int | None,
    policy_hash: str | None,
    args_hash: str | None = None,
    grant: GrantTerms | None = None,
) -> tuple[approvals.ApprovalRecord, bool]:
    """``Ledger.approve``: record a person's approval of a call that waits for one
    (``args_hash``: only if its arguments still hash to it, ``shown_args_refusal``);
    ``grant``: with a grant of those terms, given in the same transaction."""
    judged_ms(ttl_ms)
    with write(engine) as txn:
        current = waiting_call(txn, rec)
        refused = shown_args_refusal(txn, current, args_hash, answer="approve",
                                     actor=f"operator:{by}")
        if refused is None:
            given, new = approved(txn, current, by=by, reason=reason, expires_ms=expires_ms,
                                   ttl_ms=ttl_ms, policy_hash=policy_hash,
                                   fresh=grant is not None)
            if grant is not None:
                _give(txn, current, given, grant, by)
    if refused is not None:
        raise refused  # after the commit: the refusal stays in the trail
    return given, new


def answerable(named: CallRecord, current: CallRecord | None) -> CallRecord:
    """The one judge of "may a person answer this call": ``current`` (the row of the
    call ``named``, as read now; None: gone) if it waits in ``awaiting_approval``,
    whatever else happened to it meanwhile (escalated, edited, answered by someone
    else, an approval expired: each answer has its own rules for those);
    ``NotAwaitingApproval`` otherwise, in one wording whichever answer it was."""
    if current is None or current.state is not CallState.AWAITING_APPROVAL:
        state = current.state.value if current else "missing"
        raise NotAwaitingApproval(f"call {named.call_id!r} of task {named.task_id!r} is "
                                  f"{state}, not awaiting approval")
    return current


def waiting_call(txn: Txn, rec: CallRecord) -> CallRecord:
    """``rec`` as it stands under its task's lock, if it still waits for a person: what
    every answer (approve, edit, deny) starts from (``answerable``). Not its version:
    an answer is bound to the arguments the person saw (``shown_args_refusal``), and
    a row that moved on while it waits is answered as it stands, whichever answer."""
    txn.lock_task(rec.task_id)
    return answerable(rec, txn.read_call(id=rec.row_id))


def lifetime_ms(ttl: float | None) -> int | None:
    """An approval's lifetime in seconds (None: no expiry) as the milliseconds the
    ledger stores, judged by ``approvals.ttl_problem``: ``GateUsageError`` otherwise.
    The gate turns a person's ``ttl`` into milliseconds through this alone."""
    why = approvals.ttl_problem(ttl)
    if why is not None:
        raise GateUsageError(f"ttl: {why} (or None: no expiry)")
    return None if ttl is None else int(ttl * 1000)


def judged_ms(ttl_ms: int | None) -> None:
    """``lifetime_ms``'s judgement of milliseconds given to the ledger directly
    (``Ledger.approve``, ``Ledger.edit_and_approve``): the same rule and error."""
    if ttl_ms is not None:
        lifetime_ms(ttl_ms / 1000)


def approved(
    txn: Txn, current: CallRecord, *, by: str, reason: str | None,
    expires_ms: int | None, ttl_ms: int | None, policy_hash: str | None, fresh: bool,
) -> tuple[approvals.ApprovalRecord, bool]:
    """``by``'s approval of ``current`` as it stands, audited (``fresh``: always a new
    one; else this approver's standing, usable approval is returned as it is)."""
    bound_hash = policy_hash or current.policy_hash
    last = approvals.latest(txn, current.row_id)
    # The standing approval is returned as is only if it is this approver's:
    # another person's approval (perhaps one the policy refuses) is no answer.
    if not fresh and last is not None and last.decided_by == by and approvals.problem(
        last, args_hash=current.args_hash, stored_args_hash=current.args_hash,
        policy_hash=bound_hash,
    ) is None:
        return last, False
    given = approvals.insert_answer(
        txn, call_row_id=current.row_id, task_id=current.task_id,
        call_id=current.call_id, verdict=approvals.APPROVED,
        args_hash=current.args_hash, policy_hash=bound_hash, by=by,
        reason=bound(reason, MAX_REASON_CHARS) if reason else None,
        expires_ms=expires_ms, ttl_ms=ttl_ms,
    )
    audit.append(
        txn, task_id=current.task_id, call_row_id=current.row_id,
        call_id=current.call_id, event="approval_granted",
        from_state=current.state.value, to_state=current.state.value,
        actor=f"operator:{by}",
        detail={"approval_id": given.id, "args_hash": given.args_hash,
                "policy_hash": given.policy_hash, "expires_ms": given.expires_ms,
                **({"reason": bound(reason, 300)} if reason else {})},
    )
    return given, True


def _give(txn: Txn, current: CallRecord, given: approvals.ApprovalRecord,
          terms: GrantTerms, by: str) -> None:
    """The grant that comes with ``given``, audited on the approved call."""
    if given.policy_hash is None:
        raise NotAwaitingApproval(f"call {current.call_id!r} was decided under no policy "
                                  "file: there is no grant to give")
    made = grants.give(
        txn, task_id=current.task_id, tool=current.tool, policy_hash=given.policy_hash,
        option=terms.option, rule_ids=terms.rule_ids, max_calls=terms.max_calls,
        seconds=terms.seconds, approval_id=given.id, by=by,
    )
    audit.append(
        txn, task_id=current.task_id, call_row_id=current.row_id, call_id=current.call_id,
        event="grant_given", from_state=current.state.value, to_state=current.state.value,
        actor=f"operator:{by}",
        detail={"grant_id": made.id, "option": made.option, "tool": made.tool,
                "max_calls": made.max_calls, "expires_ms": made.expires_ms,
                "policy_hash": made.policy_hash, "approval_id": given.id},
    )


def distinct_denials(answers: list[approvals.ApprovalRecord], args_hash: str) -> set[str]:
    """Who denied the call as it is now (a denial given for other arguments is not one)."""
    return {a.decided_by for a in answers if a.denied and a.args_hash == args_hash}


def deny(
    engine: Engine, rec: CallRecord, *, by: str, reason: str | None,
    args_hash: str | None = None, quorum: int = 1,
) -> Transition:
    """``Ledger.deny``: ``awaiting_approval -> rejected``, the answer remembered
    (``args_hash``: only if the arguments still hash to it, ``shown_args_refusal``).
    ``quorum`` > 1 (a rule's ``deny: quorum``): the denial is recorded and the call is
    rejected only once that many distinct people denied it (``won`` False until then)."""
    text = f"denied by {by}" + (f": {bound(reason, 300)}" if reason else "")
    try:
        with write(engine) as txn:
            current = waiting_call(txn, rec)
            refused = shown_args_refusal(txn, current, args_hash, answer="deny",
                                         actor=f"operator:{by}")
            if refused is None:
                result = _denied(txn, current, by=by, reason=reason, text=text, quorum=quorum)
    except Lost:  # a writer that takes no task lock moved the row between read and update
        raise NotAwaitingApproval(
            f"call {rec.call_id!r} of task {rec.task_id!r} changed to "
            f"{reread(engine, rec).state.value} while being denied"
        ) from None
    if refused is not None:
        raise refused
    return result


def _denied(txn: Txn, current: CallRecord, *, by: str, reason: str | None, text: str,
            quorum: int) -> Transition:
    answer = bound(reason, MAX_REASON_CHARS) if reason else None
    if quorum > 1:
        approvals.insert_answer(
            txn, call_row_id=current.row_id, task_id=current.task_id,
            call_id=current.call_id, verdict=approvals.DENIED, args_hash=current.args_hash,
            policy_hash=current.policy_hash, by=by, reason=answer, expires_ms=None,
        )
        who = distinct_denials(approvals.answers_in(txn, current.row_id), current.args_hash)
        if len(who) < quorum:
            audit.append(
                txn, task_id=current.task_id, call_row_id=current.row_id,
                call_id=current.call_id, event="denial_recorded",
                from_state=current.state.value, to_state=current.state.value,
                actor=f"operator:{by}", detail={"denials": len(who), "quorum": quorum},
            )
            return Transition(False, current)
        text = f"denied by {', '.join(sorted(who))} ({len(who)} of {quorum})"
        return Transition(True, apply_or_lose(txn, current, Event.DENY, actor=f"operator:{by}",
                                              code=ReasonCode.DENIED_BY_OPERATOR, reason=text))
    denied = apply_or_lose(txn, current, Event.DENY, actor=f"operator:{by}",
                           code=ReasonCode.DENIED_BY_OPERATOR, reason=text)
    approvals.insert_answer(
        txn, call_row_id=denied.row_id, task_id=denied.task_id, call_id=denied.call_id,
        verdict=approvals.DENIED, args_hash=denied.args_hash,
        policy_hash=denied.policy_hash, by=by, reason=answer, expires_ms=None,
    )
    return Transition(True, denied)
