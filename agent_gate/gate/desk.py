"""A person's answer to a call that waits: find it, approve it or deny it.

Why a module apart from the facade: ``agent-gate approve`` and ``deny`` without
``--policy`` need the ledger and nothing else, and importing the ``Gate`` (the policy
models, jsonschema, the providers) was most of what those commands spent starting.
``Gate.approve``/``Gate.deny`` call these same functions, passing their policy as the
``ApprovalCheck``: one body whichever way an answer arrives.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Protocol

from agent_gate.errors import AmbiguousCall, ApprovalRefused, GateUsageError
from agent_gate.ledger.answers import answerable, lifetime_ms

if TYPE_CHECKING:
    from agent_gate.ledger.answers import GrantTerms
    from agent_gate.ledger.approvals import ApprovalRecord
    from agent_gate.ledger.records import CallRecord, Transition
    from agent_gate.ledger.store import Ledger
    from agent_gate.telemetry import Observer

__all__ = ["MCP_PROVIDER", "ApprovalCheck", "approve", "deny", "escalation_text", "find_one",
           "runs_next"]


def escalation_text(approver: str, role: str, with_policy: bool) -> str:
    """Why ``approver`` may not answer a call escalated to ``role``."""
    if not with_policy:
        return (f"the call was escalated to role {role!r} when its deadline passed; answer "
                "it under the policy (--policy FILE) whose operators: names who holds it")
    return (f"the call was escalated to role {role!r} when its deadline passed, and "
            f"{approver!r} does not hold it (operators:)")

MCP_PROVIDER = "mcp"
"""The provider the MCP proxy records its tasks under (``integrations.mcp``): a call
it holds runs in the proxy once approved, never by ``agent-gate resume``."""


def runs_next(provider: str | None, task_id: str) -> str:
    """What runs a call once a person let it run (approved, or resolved as not
    applied), said to that person: the proxy that holds it, or a resume."""
    if provider == MCP_PROVIDER:
        return ("the MCP proxy that holds it runs it once: a request still waiting gets "
                "the result, else the client's next send of the same call does "
                "(not agent-gate resume)")
    return (f"agent-gate resume {shlex.quote(task_id)} --tools MODULE[:ATTR] --policy FILE "
            "runs it once, under that policy")


class ApprovalCheck(Protocol):
    """What a gate's policy file adds to an approval (``decide.Decider`` with rules)."""

    @property
    def policy_hash(self) -> str:
        """The hash an approval given under this policy is bound to."""
        ...

    def approver_refusal(self, rec: CallRecord, approver: str) -> str | None:
        """Why ``approver`` may not approve ``rec`` (None: they may)."""
        ...

    def rebinding_refusal(self, rec: CallRecord) -> str | None:
        """Why this policy will not take over the approval of ``rec``, which another
        policy asked for (None: it allows or asks too)."""
        ...

    def grant_terms(self, rec: CallRecord, option: str) -> GrantTerms:
        """The grant ``option`` gives for ``rec`` (``ApprovalRefused``: the rules that
        sent it to a person do not offer it)."""
        ...

    def denials_needed(self, rec: CallRecord) -> int:
        """How many distinct people must deny ``rec`` to end it (1: the first does)."""
        ...

    def denial_refusal(self, rec: CallRecord, approver: str) -> str | None:
        """Why ``approver`` may not deny ``rec`` (None: they may)."""
        ...

    def escalation_refusal(self, approver: str, role: str | None) -> str | None:
        """Why ``approver`` may not answer a call escalated to ``role`` (None: they may)."""
        ...


def _escalation(ledger: Ledger, rec: CallRecord, who: str, check: ApprovalCheck | None,
                answer: str) -> None:
    """Refuse, audited, an answer to a call escalated to a role ``who`` does not hold
    (``ledger.deadlines``); without a policy nobody's roles are known: refused too."""
    found = ledger.deadline(rec)
    role = found.role if found is not None and found.escalated else None
    if role is None:
        return
    refusal = (check.escalation_refusal(who, role) if check is not None
               else escalation_text(who, role, False))
    if refusal is not None:
        ledger.note(rec, "approval_refused", actor=f"operator:{who}",
                    detail={"reason": refusal, "answer": answer, "escalated_to": role})
        raise ApprovalRefused(refusal)


def find_one(ledger: Ledger, call_id: str, task_id: str | None) -> CallRecord:
    """The one call ``call_id`` (of ``task_id``) names."""
    recs = ledger.find(call_id, task_id)
    if not recs:
        where = f" in task {task_id!r}" if task_id is not None else ""
        raise GateUsageError(f"no call {call_id!r}{where} in the ledger")
    if len(recs) > 1:
        raise AmbiguousCall(f"call id {call_id!r} exists in {len(recs)} tasks; pass task_id")
    return recs[0]


def approve(
    ledger: Ledger,
    call_id: str,
    *,
    by: str,
    task_id: str | None,
    reason: str | None,
    ttl: float | None,
    check: ApprovalCheck | None = None,
    args_hash: str | None = None,
    grant: str | None = None,
) -> tuple[ApprovalRecord, bool]:
    """Approve a waiting call; returns the approval and whether it is new.

    Bound to the call's argument hash, to the hash of the policy that asked for it
    (or, with ``check``, of that policy once it re-evaluated the call) and to an
    expiry ``ttl`` seconds from the database's clock (None: none). ``args_hash``:
    the hash of the arguments the person was shown (``CallDetails``' ``args_hash``);
    the ledger approves only while the call's are those (``AnswerMismatch``, audited,
    otherwise), compared in the approval's own transaction. ``grant``: one of the
    grant options the call's approve rules offer, given with the approval (needs the
    policy, ``check``: the option's terms are the policy's).
    """
    if not by or not by.strip():
        raise GateUsageError("an approval names who gives it (by=)")
    ttl_ms = lifetime_ms(ttl)
    who = by.strip()
    rec = find_one(ledger, call_id, task_id)
    _escalation(ledger, rec, who, check, "approve")
    policy_hash: str | None = None
    if check is not None:
        refusal = check.approver_refusal(rec, who)
        if refusal is not None:
            ledger.note(rec, "approval_refused", actor=f"operator:{who}",
                        detail={"reason": refusal, "policy_hash": check.policy_hash})
            raise ApprovalRefused(refusal)
        if rec.policy_hash != check.policy_hash:
            answerable(rec, rec)  # before this policy judges it again
            refusal = check.rebinding_refusal(rec)
            if refusal is not None:  # audited as every other refused answer is
                ledger.note(rec, "approval_refused", actor=f"operator:{who}",
                            detail={"reason": refusal, "policy_hash": check.policy_hash,
                                    "asked_by": rec.policy_hash})
                raise ApprovalRefused(refusal)
            policy_hash = check.policy_hash
    terms = None
    if grant is not None:
        if check is None:
            raise GateUsageError("a grant needs the policy that offers it (--policy FILE)")
        terms = check.grant_terms(rec, grant)
    return ledger.approve(
        rec, by=who, reason=reason, policy_hash=policy_hash, ttl_ms=ttl_ms,
        args_hash=args_hash, grant=terms,
    )


def deny(
    ledger: Ledger,
    call_id: str,
    *,
    by: str,
    task_id: str | None,
    reason: str | None,
    observer: Observer,
    args_hash: str | None = None,
    check: ApprovalCheck | None = None,
) -> Transition:
    """Deny a waiting call: ``awaiting_approval -> rejected``; it never runs
    (``args_hash`` as for ``approve``; with ``check``, a rule's ``deny: quorum`` ends
    it only once enough distinct people denied it, and a call escalated to a role is
    denied only by its holders, as the policy's ``operators:`` says)."""
    if not by or not by.strip():
        raise GateUsageError("a denial names who gives it (by=)")
    who = by.strip()
    rec = find_one(ledger, call_id, task_id)
    _escalation(ledger, rec, who, check, "deny")
    refusal = check.denial_refusal(rec, who) if check is not None else None
    if refusal is not None:
        ledger.note(rec, "approval_refused", actor=f"operator:{who}",
                    detail={"reason": refusal, "answer": "deny",
                            "policy_hash": check.policy_hash if check else None})
        raise ApprovalRefused(refusal)
    quorum = check.denials_needed(rec) if check is not None else 1
    tr = ledger.deny(rec, by=who, reason=reason, args_hash=args_hash, quorum=quorum)
    if tr.won:
        observer.operator(rec.task_id, rec.call_id, rec.tool, rec.state.value,
                          tr.record.state.value, f"operator:{who}")
    return tr
