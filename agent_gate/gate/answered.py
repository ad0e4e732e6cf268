"""What the approve rules' ``approval:`` block changes in a decision: grants and quorums.

Why a module apart from ``decide``: these rulings read the people's side of a call
(the grants its task holds, the answers its call received) and turn them into an
arrow through the ledger's tables (``states.GRANTED``, ``states.VERDICTS``), while
``decide`` turns the policy's verdict into one. Both run inside the transaction that
applies the ruling, with the task locked.

* ``granted``: a call the policy sends to a person, covered by a live grant of its
  task, spends the grant (one conditional update, ``LedgerTxn.spend_grant``) and is
  allowed, with the grant named in its audit entry. Only a call that would otherwise
  wait reads the grants: a call the policy allows or denies never does.
* ``still_granted``: a claim re-checked later finds the grant that authorized it
  (revoked: it waits for a person after all).
* ``quorum``: a rule with ``approvers: {min: N}`` lets the call run once N distinct
  permitted people approved it as it is now; each of their approvals is consumed
  with the arrow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agent_gate.authorize import PolicyAuthorizer
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import CallRecord, Ruling
from agent_gate.ledger.states import GRANTED, CallState
from agent_gate.policy import PolicyDecision
from agent_gate.policy.approval import Requirement, grant_covers, requirement

__all__ = ["granted", "progress", "quorum", "requirement_of", "still_granted"]


def requirement_of(rules: PolicyAuthorizer, rec: CallRecord) -> Requirement:
    """What the rules that sent ``rec`` to a person ask of its answers."""
    return requirement(rules.policy.document, rec.tool, rec.rule_ids)


def granted(
    txn: LedgerTxn, rules: PolicyAuthorizer, rec: CallRecord, arguments: Mapping[str, Any],
    decision: PolicyDecision, allowed: Ruling,
) -> Ruling | None:
    """``allowed`` as the arrow a grant that covers the call takes, the grant spent;
    None when no live grant covers it (it waits for a person)."""
    document = rules.policy.document
    for grant in txn.live_grants(rec.task_id, rec.tool, rules.hash):
        if not grant_covers(document, rec.tool, decision.rule_ids, grant.option, arguments):
            continue
        if not txn.spend_grant(grant.id, rec.row_id):
            continue  # spent, revoked or expired since it was read: try the next one
        event, code = GRANTED[CallState.RECEIVED]
        left = (f"; {grant.max_calls - grant.used_calls - 1} left"
                if grant.max_calls is not None else "")
        return replace(
            allowed, event=event, code=code,
            reason=f"authorized by grant {grant.id} ({grant.option}) given by "
                   f"{grant.granted_by}{left}",
            detail={**(allowed.detail or {}), "grant_id": grant.id,
                    "granted_by": grant.granted_by},
        )
    return None


def still_granted(txn: LedgerTxn, rules: PolicyAuthorizer, rec: CallRecord,
                  base: Ruling) -> Ruling | None:
    """The claim of a call a grant authorized, re-checked while the policy still asks
    for a person: the grant stands (unrevoked, same policy), so it is claimed."""
    grant = txn.covering_grant(rec.row_id)
    if grant is None or grant.policy_hash != rules.hash:
        return None
    event, _ = GRANTED[CallState.AUTHORIZED]
    return Ruling(event, detail={**(base.detail or {}), "grant_id": grant.id},
                  changes=base.changes, charges=base.charges)


def quorum(
    txn: LedgerTxn, rec: CallRecord, need: Requirement, usable: Callable[[ApprovalRecord],
                                                                        str | None],
) -> tuple[list[ApprovalRecord], str | None]:
    """The approvals that make a quorum for ``rec`` (one per distinct approver, the
    newest usable one each), or those so far and why they are not enough.

    ``usable`` says why one approval does not count (spent, expired, other arguments,
    another policy, an approver the rules refuse); None: it counts."""
    counted: dict[str, ApprovalRecord] = {}
    for answer in txn.answers(rec.row_id):
        if answer.denied or usable(answer) is not None:
            continue
        counted[answer.decided_by] = answer
    if len(counted) >= need.min:
        return list(counted.values()), None
    roles = f" with role {' or '.join(need.roles)}" if need.roles else ""
    return list(counted.values()), (
        f"{len(counted)} of {need.min} approvals: {need.min - len(counted)} more distinct "
        f"approver{'s' if need.min - len(counted) != 1 else ''}{roles} must approve it"
    )


def progress(rules: PolicyAuthorizer, rec: CallRecord,
             answers: list[ApprovalRecord]) -> dict[str, Any]:
    """Where the answers to a waiting call stand, for the people asked (the inbox's
    "1 of 2"): distinct approvers whose approval of these arguments, under this policy,
    is unused and unexpired and who hold a role the quorum counts; who denied; and the
    grant options an approver may choose. What the gate decides is ``quorum``'s count,
    in its own transaction; this is only shown."""
    need = requirement_of(rules, rec)
    operators = rules.policy.document.operators

    def counts(name: str) -> bool:
        entry = operators.get(name)
        return not need.roles or (entry is not None and bool(set(entry.roles) & set(need.roles)))

    approved = sorted({a.decided_by for a in answers
                       if not a.denied and not a.consumed and not a.expired()
                       and a.args_hash == rec.args_hash and a.policy_hash == rules.hash
                       and counts(a.decided_by)})
    denied = sorted({a.decided_by for a in answers if a.denied and a.args_hash == rec.args_hash})
    return {"min": need.min, "roles": list(need.roles), "approved_by": approved,
            "denied_by": denied, "deny": "quorum" if need.deny_quorum else "any",
            "grants": [{"id": g.id, "summary": g.summary()} for g in need.grants]
            if rec.policy_hash == rules.hash else []}
