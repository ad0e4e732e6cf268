"""Decisions: schema validation and policy, turned into one ``Ruling``.

Every decision the gate takes about a call is a ``Ruling`` (``ledger.store``): the
arrow to take (``event``), the reason code and text, what the audit trail records,
the quota it charges and the columns it sets. ``event`` None means the call cannot
be decided here and stays where it is (the reason says why).

Who decides, and where:

* a call that can never run (``admission``'s early ruling), an unknown tool, arguments
  that fail the schema: decided here, outside any transaction;
* no policy: allowed; a custom ``Authorizer``: asked outside any transaction (it
  may call out), its answer applied with one compare-and-set;
* a policy file: decided *inside* the ledger transaction that commits it, with the
  task locked, so the quota usage read is the usage the decision charges
  (``ruling`` returns None: "the policy decides in the transaction"; the ledger
  calls back ``policy_ruling``). Claims of a version this process did not itself
  authorize re-check (``recheck``) and approvals are checked again when used
  (``approval_ruling``), each in the transaction that commits the claim.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from agent_gate.authorize import PolicyAuthorizer, principal_from_json, scope_from_json
from agent_gate.errors import ApprovalRefused, GateUsageError
from agent_gate.gate import answered
from agent_gate.gate.admission import Arguments, stable_key
from agent_gate.gate.desk import escalation_text
from agent_gate.ledger.answers import GrantTerms
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import CallRecord, Deadline, Ruling
from agent_gate.ledger.states import CallState, Event, verdict_arrow
from agent_gate.ledger.store import Ledger
from agent_gate.policy import PolicyDecision, Principal, TaskHistory, TaskScope, Verdict
from agent_gate.policy.approval import Requirement
from agent_gate.privacy.scrub import bound
from agent_gate.telemetry import Observer
from agent_gate.tools import (
    ArgumentsInvalid,
    ArgumentsNotObject,
    CallInfo,
    Effect,
    Idempotency,
    Tool,
    ToolRegistry,
    ToolSpec,
)

__all__ = ["Authorizer", "Decider", "Decision", "Verdict"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A custom ``Authorizer``'s decision and what it rests on (for the audit trail)."""

    verdict: Verdict
    reason: str | None = None
    rule_ids: tuple[str, ...] = ()
    policy_hash: str | None = None


class Authorizer(Protocol):
    """A custom decision-maker for ``Gate(policy=...)``: one decision per call.

    Called once, when a ``received`` call has passed schema validation; never
    for a call that is replayed from the ledger. It is called outside any ledger
    transaction (it may be slow, e.g. ask a remote service), so it cannot keep
    per-task quotas, and a call it sends to approval can be approved but is only run
    by a gate with a policy file (whose hash the approval is bound to). A policy
    file (``Policy``, a path, ``PolicyAuthorizer``) has none of these limits.
    """

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision: ...


class Decider:
    """Validation and authorization of calls, for one gate's tools and policy."""

    def __init__(
        self,
        tools: ToolRegistry,
        policy: Authorizer | PolicyAuthorizer | None,
        keys: Arguments,
        ledger: Ledger,
    ) -> None:
        self.tools = tools
        self.policy = policy
        self.rules = policy if isinstance(policy, PolicyAuthorizer) else None
        self.keys = keys
        self.ledger = ledger
        self.observer: Observer = Observer()
        """Where a shadow decision is counted (the gate sets its telemetry here)."""

    # ------------------------------------------------------------ the tool's view

    def classes(self, tool: Tool) -> tuple[Effect, Idempotency]:
        """The tool's effect and idempotency after the policy's (safer-only) overrides."""
        if self.rules is None:
            return tool.spec.effect, tool.spec.idempotency
        eff = self.rules.effective(tool.spec)
        return eff.effect, eff.idempotency

    def defers(self, tool_name: str) -> bool:
        """The policy file classes the tool a write or destructive: it runs only after
        the response completed, whatever the code or the caller asked for."""
        if self.rules is None:
            return False
        tool = self.tools.get(tool_name)
        return tool is not None and self.classes(tool)[0] is not Effect.READ

    def info(self, rec: CallRecord) -> CallInfo:
        """What a tool (and a custom Authorizer, a reconcile hook) is told of its call."""
        arguments, _ = self.keys.of(rec)
        return CallInfo(
            task_id=rec.task_id,
            call_id=rec.call_id,
            tool=rec.tool,
            arguments=arguments,
            idempotency_key=stable_key(rec.task_id, rec.idem_key),
            attempt=rec.attempt,
        )

    def runnable(self, rec: CallRecord) -> tuple[Tool, Mapping[str, Any] | BaseModel] | str:
        """The tool and its validated input for a stored call, or why it cannot run here."""
        tool = self.tools.get(rec.tool)
        if tool is None:
            return f"tool {rec.tool!r} is not registered in this process"
        arguments, why = self.keys.of(rec)
        if why is not None:
            return why
        try:
            return tool, tool.handed(arguments)
        except (ArgumentsInvalid, ArgumentsNotObject) as exc:
            return f"stored arguments no longer pass the schema ({exc})"

    # ------------------------------------------------------------ received calls

    def ruling(self, rec: CallRecord, early: Ruling | None) -> Ruling | None:
        """The ruling for a ``received`` call taken outside the ledger; None when the
        policy file must decide inside the transaction (``policy_ruling``)."""
        if early is not None:
            return early
        tool = self.tools.get(rec.tool)
        if tool is None:
            return Ruling(
                Event.REJECT, R.UNKNOWN_TOOL, f"no tool named {rec.tool!r} is registered; not run"
            )
        arguments, why = self.keys.of(rec)
        if why is not None:
            return Ruling(None, R.ARGUMENTS_SEALED, why)
        if arguments is None:
            return Ruling(
                Event.REJECT, R.ARGUMENTS_NOT_OBJECT, "the arguments are not a JSON object; not run"
            )
        try:
            judged = tool.judged(arguments)
        except ArgumentsInvalid as exc:
            errors = [{"pointer": e.pointer, "keyword": e.keyword} for e in exc.errors[:20]]
            listed = "; ".join(str(e) for e in exc.errors[:10])
            return Ruling(
                Event.REJECT,
                R.SCHEMA_INVALID,
                f"the arguments fail the schema of {rec.tool!r} at {listed}; not run",
                {"errors": errors},
            )
        if judged != arguments:
            # Stored in a spelling the tool's model would change (recorded before its
            # validators worked): the policy would judge one value, the tool get another.
            return Ruling(
                Event.REJECT,
                R.SCHEMA_INVALID,
                f"the stored arguments of {rec.tool!r} are not the value its model hands "
                "the tool; not run",
            )
        if self.policy is None:
            return Ruling(Event.ALLOW, R.ALLOWED)
        if self.rules is not None:
            return None
        return self._authorizer_ruling(rec, tool.spec)

    def _authorizer_ruling(self, rec: CallRecord, spec: ToolSpec) -> Ruling:
        assert self.policy is not None and self.rules is None
        decision = self.policy.authorize(rec.task_id, self.info(rec), spec)
        detail = {
            "verdict": decision.verdict.value,
            "rule_ids": list(decision.rule_ids),
            "policy_hash": decision.policy_hash,
        }
        changes = {
            "policy_hash": decision.policy_hash,
            "rule_ids": json.dumps(list(decision.rule_ids)),
        }
        event, code = verdict_arrow(CallState.RECEIVED, decision.verdict)
        return Ruling(event, code, _authorizer_text(decision), detail, changes=changes)

    def ruling_in(self, txn: LedgerTxn, rec: CallRecord, early: Ruling | None) -> Ruling | None:
        """The decision for a ``received`` row inside a ledger transaction; None when
        it cannot be decided in this process (it stays ``received``)."""
        ruling = self.ruling(rec, early)
        if ruling is None:
            return self.policy_ruling(txn, rec)
        return ruling if ruling.event is not None else None

    def policy_ruling(self, txn: LedgerTxn, rec: CallRecord, *, recheck: bool = False) -> Ruling:
        """The policy's ruling inside the ledger transaction that applies it: for a
        ``received`` call (``Ledger.authorize``), or, with ``recheck``, for an
        authorized call being claimed (``Ledger.claim_rechecked``: allowed means
        CLAIM, and the call's own charges do not count against it)."""
        assert self.rules is not None
        arguments, _ = self.keys.of(rec)
        assert arguments is not None  # the ruling / the claim's hash check saw them
        decision = self._evaluate_in(txn, rec, arguments, besides=rec.row_id if recheck else None)
        detail, changes, reason = _decision_record(decision)
        allowed = decision.effect is Verdict.ALLOW
        event, code = verdict_arrow(
            CallState.AUTHORIZED if recheck else CallState.RECEIVED, decision.effect
        )
        if decision.effect is Verdict.APPROVE:  # a grant may stand for the person
            base = Ruling(event, detail=detail, changes=changes,
                          charges=self.rules.charges(rec.tool, arguments))
            covered = (answered.still_granted(txn, self.rules, rec, base) if recheck else
                       answered.granted(txn, self.rules, rec, arguments, decision, base))
            if covered is not None:
                return covered
        if event is Event.CLAIM:  # charged again only if a refund gave its charges back
            return Ruling(event, detail=detail, changes=changes,
                          charges=self.rules.charges(rec.tool, arguments))
        when = " when claimed" if recheck else ""
        return Ruling(
            event,
            code,
            _POLICY_TEXT[decision.effect].format(when=when, reason=reason),
            detail,
            charges=self.rules.charges(rec.tool, arguments) if allowed else {},
            changes=changes,
            deadline=self._deadline(decision) if event is Event.REQUIRE_APPROVAL else None,
        )

    def observe(self, rec: CallRecord, ruling: Ruling | None) -> None:
        """Count a committed decision's shadow evaluation (metrics, log), once.

        Called after the transaction that applied ``ruling`` committed, never from
        inside it: a write transaction may run its body twice (a pipelined intake
        whose guessed row id was taken runs again, ``backend.transact``), and a
        decision that was asked for but not committed was never taken."""
        detail = ruling.detail if ruling is not None and ruling.detail is not None else {}
        shadow = detail.get("shadow")
        if isinstance(shadow, Mapping):  # only a policy file's decision records one
            self.observer.shadow(rec.task_id, rec.call_id, rec.tool, str(detail["verdict"]),
                                 str(shadow["verdict"]), tuple(shadow["rule_ids"]))

    def _deadline(self, decision: PolicyDecision) -> Deadline | None:
        """The deadline the approve rules that decided the call give its wait."""
        assert self.rules is not None
        terms = self.rules.policy.deadline(decision.rule_ids)
        if terms is None:
            return None
        return Deadline(terms.timeout_ms, terms.then, terms.role, terms.rule_id)

    # ------------------------------------------------------------ claims

    def outside(self, rec: CallRecord) -> Ruling | None:
        """A custom Authorizer's answer for a re-checked claim (asked outside any
        transaction, as for a new call); None for a gate without one."""
        if self.policy is None or self.rules is not None:
            return None
        ruling = self.ruling(rec, None)
        return ruling if ruling is not None and ruling.event is not None else None

    def recheck(self, txn: LedgerTxn, current: CallRecord, outside: Ruling | None) -> Ruling:
        """The ruling of a re-checked claim, inside its transaction (task locked)."""
        if self.keys.intact(current) is False:
            return Ruling(
                Event.REJECT,
                R.ARGUMENTS_CHANGED,
                "the stored arguments no longer hash to the ones decided "
                f"(sha256 {current.args_hash[:12]}): changed after the decision; not run",
            )
        if outside is not None:
            if outside.event is Event.ALLOW:  # a custom Authorizer allows it again
                claim, _ = verdict_arrow(CallState.AUTHORIZED, Verdict.ALLOW)
                return Ruling(claim, changes=outside.changes)
            return Ruling(
                outside.event, outside.code, f"re-checked when claimed: {outside.reason}",
                outside.detail,
            )
        if self.rules is None:
            return Ruling(Event.CLAIM)
        return self.policy_ruling(txn, current, recheck=True)

    def approval_ruling(
        self, txn: LedgerTxn, current: CallRecord, arguments: Mapping[str, Any], refused: list[str]
    ) -> Ruling:
        """Whether the call's latest approval may be used now, inside the transaction
        that consumes it: bound to these arguments and this policy, unexpired, given
        by a permitted approver, and the policy does not deny the call now.
        ``refused`` collects an approver refusal, which the caller audits."""
        assert self.rules is not None
        need = answered.requirement_of(self.rules, current)
        if need.quorum:
            counted, short = answered.quorum(
                txn, current, need, lambda a: self._quorum_refusal(txn, current, arguments, a,
                                                                   need))
            if short is not None:
                return Ruling(None, reason=short)
            approval, others = counted[-1], tuple(a.id for a in counted[:-1])
        else:
            approval, others = txn.latest_approval(current.row_id), ()
        if approval is None:
            return Ruling(None, reason="no approval has been given")
        problem = self._quorum_refusal(txn, current, arguments, approval, need, refused)
        if problem is not None:
            return Ruling(None, reason=problem)
        decision = self._evaluate_in(txn, current, arguments)
        detail, changes, reason = _decision_record(decision)
        event, code = verdict_arrow(CallState.AWAITING_APPROVAL, decision.effect)
        if event is not Event.APPROVE:
            return Ruling(
                event,
                code,
                f"denied by policy when its approval was used: {reason}; not run",
                detail,
                changes=changes,
            )
        by = [approval.decided_by] if not others else sorted(
            {approval.decided_by, *(a.decided_by for a in counted[:-1])})
        return Ruling(
            event,
            code,
            f"approved by {', '.join(by)}"
            + (f": {bound(approval.reason, 200)}" if approval.reason else ""),
            {**detail, "approved_by": by[0] if len(by) == 1 else by},
            charges=self.rules.charges(current.tool, arguments),
            approval_id=approval.id,
            quorum_ids=others,
        )

    def _quorum_refusal(
        self, txn: LedgerTxn, current: CallRecord, arguments: Mapping[str, Any],
        approval: ApprovalRecord, need: Requirement, refused: list[str] | None = None,
    ) -> str | None:
        """Why ``approval`` does not count for ``current`` now: unusable (spent, expired,
        other arguments, another policy), or its approver is refused by the tool's
        approvers or lacks the quorum's roles (``refused`` collects that, to audit)."""
        assert self.rules is not None
        problem = approval.unusable(
            args_hash=self.keys.hash_for(current, arguments),
            stored_args_hash=current.args_hash,
            policy_hash=self.rules.hash,
        )
        if problem is not None:
            return problem
        # the judgement made when it was given (the quorum's roles among it)
        refusal = self.approver_refusal(current, approval.decided_by, txn)
        if refusal is None:
            refusal = self.escalation_refusal(approval.decided_by, txn.escalated_to(current))
        if refusal is None:
            return None
        if refused is not None:
            refused.append(refusal)
        return f"approved, but {refusal}; a permitted approver must approve it"

    # ------------------------------------------------------------ approvers

    def approver_refusal(
        self, rec: CallRecord, approver: str, txn: LedgerTxn | None = None
    ) -> str | None:
        """Why this gate's policy does not let ``approver`` approve ``rec`` (None: it
        does, or there is no policy file to say)."""
        if self.rules is None:
            return None
        if txn is not None:
            principal, _ = _task_context(txn, rec.task_id)
            principal_id = principal.id
        else:
            task = self.ledger.task(rec.task_id)
            principal_id = principal_from_json(task.principal if task else None).id
        return self.rules.policy.approval_refusal(rec.tool, approver, principal_id,
                                                  rec.rule_ids)

    def denial_refusal(self, rec: CallRecord, approver: str) -> str | None:
        """Why this gate's policy does not let ``approver`` deny ``rec`` (None: it does:
        only a ``deny: quorum`` rule's roles refuse a denial, ``Policy.denial_refusal``)."""
        if self.rules is None:
            return None
        return self.rules.policy.denial_refusal(rec.tool, approver, rec.rule_ids)

    def escalation_refusal(self, approver: str, role: str | None) -> str | None:
        """Why ``approver`` may not answer a call escalated to ``role`` (None: it was
        not escalated, or the policy's ``operators:`` gives them the role)."""
        if role is None:
            return None
        if self.rules is not None and self.rules.policy.holds_role(approver, role):
            return None
        return escalation_text(approver, role, self.rules is not None)

    @property
    def policy_hash(self) -> str:
        """The hash approvals under this gate's policy file are bound to."""
        assert self.rules is not None
        return self.rules.hash

    def rebinding_refusal(self, rec: CallRecord) -> str | None:
        """Why this gate's policy will not take over the approval of ``rec``, which
        another policy asked for: it denies the call (None: it does not)."""
        decision = self.evaluate_now(rec)
        if decision.effect is not Verdict.DENY:
            return None
        return (f"policy {self.policy_hash} denies call {rec.call_id!r} "
                f"({', '.join(decision.rule_ids)}); deny it instead")

    def grant_terms(self, rec: CallRecord, option: str) -> GrantTerms:
        """The terms of grant ``option`` for ``rec``, if the rules that sent it to a
        person offer it (``ApprovalRefused`` otherwise, naming those they offer)."""
        assert self.rules is not None
        need = answered.requirement_of(self.rules, rec)
        chosen = need.grant(option)
        if chosen is None or rec.policy_hash != self.rules.hash:
            offered = ", ".join(g.id for g in need.grants) or "none"
            raise ApprovalRefused(
                f"grant {option!r} is not offered for call {rec.call_id!r} by the rules "
                f"that sent it to a person ({', '.join(rec.rule_ids) or '-'}) under policy "
                f"{self.rules.hash}; offered: {offered}")
        return GrantTerms(chosen.id, rec.rule_ids, chosen.calls, chosen.seconds)

    def denials_needed(self, rec: CallRecord) -> int:
        """1, or the quorum of a rule that says ``deny: quorum``."""
        if self.rules is None:
            return 1
        need = answered.requirement_of(self.rules, rec)
        return need.min if need.deny_quorum else 1

    def evaluate_arguments(self, rec: CallRecord, arguments: Mapping[str, Any]) -> PolicyDecision:
        """The policy's decision for ``rec`` were its arguments ``arguments`` (an
        approver's edit, ``gate.edit``), as the ledger stands."""
        with self.ledger.reading() as txn:
            return self._evaluate_in(txn, rec, arguments)

    def evaluate_now(self, rec: CallRecord) -> PolicyDecision:
        """The policy's decision for ``rec`` as the ledger stands (outside a write)."""
        arguments, why = self.keys.of(rec)
        if arguments is None:
            raise GateUsageError(why or f"call {rec.call_id!r} has no argument object")
        with self.ledger.reading() as txn:
            return self._evaluate_in(txn, rec, arguments)

    def _evaluate_in(
        self,
        txn: LedgerTxn,
        rec: CallRecord,
        arguments: Mapping[str, Any],
        *,
        besides: int | None = None,
    ) -> PolicyDecision:
        """The policy's decision for ``rec`` with the task's bound context and usage now
        (``besides``: without that call row's own charges)."""
        assert self.rules is not None
        principal_text, scope_text = txn.task_context(rec.task_id)
        principal = principal_from_json(principal_text)
        scope = scope_from_json(rec.task_id, scope_text)
        usage = txn.usage(rec.task_id, self.rules.counters(rec.tool), besides=besides)
        scoped = self.rules.scoped_counters(rec.tool)
        if scoped:  # per principal, over all tasks, in a window: each under its own lock
            usage.update(txn.scoped_usage(rec.task_id, principal_text, scoped, besides=besides))
        tools = self.rules.history_tools(rec.tool)
        history = self._history(txn, rec, tools) if tools else None
        return self.rules.evaluate(
            rec.tool, arguments, principal=principal, scope=scope, usage=usage, history=history
        )

    def _history(self, txn: LedgerTxn, rec: CallRecord, tools: frozenset[str]) -> TaskHistory:
        """The task's earlier calls of ``tools``, read in the deciding transaction (the
        task is locked, so no call of the task changes state until it commits): the
        arguments of each one's latest succeeded call (unsealed), and which had one
        authorized (it may have run: executing, in doubt, failed count too)."""
        succeeded: dict[str, dict[str, Any]] = {}
        authorized: set[str] = set()
        for tool in sorted(tools):
            for earlier in txn.earlier_calls(rec.task_id, tool, rec.row_id):
                if earlier.state in _AUTHORIZED_ONCE:
                    authorized.add(tool)
                if earlier.state is CallState.SUCCEEDED:
                    arguments, _ = self.keys.of(earlier)
                    succeeded[tool] = arguments if arguments is not None else {}
        return TaskHistory(succeeded=succeeded, authorized=frozenset(authorized))


_AUTHORIZED_ONCE = frozenset({
    CallState.AUTHORIZED, CallState.EXECUTING, CallState.SUCCEEDED, CallState.FAILED,
    CallState.IN_DOUBT,
})
"""States only a call that was authorized reaches: it may have run (``not_after``)."""

_POLICY_TEXT: dict[Verdict, str] = {
    Verdict.ALLOW: "{reason}",
    Verdict.APPROVE: "waits for a human approval{when}: {reason}",
    Verdict.DENY: "denied by policy{when}: {reason}; not run",
}
"""A policy file's verdict -> the audit text of its arrow (the arrow itself and its
reason code: ``ledger.states.VERDICTS``, the one mapping)."""


def _authorizer_text(decision: Decision) -> str | None:
    """The audit text of a custom Authorizer's arrow: its own reason, or a default."""
    if decision.verdict is Verdict.APPROVE:
        return decision.reason or "waits for a human approval"
    if decision.verdict is Verdict.DENY:
        return f"denied by policy: {decision.reason or 'no rule allows it'}; not run"
    return decision.reason


def _task_context(txn: LedgerTxn, task_id: str) -> tuple[Principal, TaskScope]:
    """The principal and scope bound to a task, read in the caller's transaction."""
    principal_text, scope_text = txn.task_context(task_id)
    return principal_from_json(principal_text), scope_from_json(task_id, scope_text)


def _decision_record(decision: PolicyDecision) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A policy decision as the ledger keeps it: audit detail, row columns, one reason.

    The reasons name fields and the policy's constraints, never argument values.
    """
    reason = bound("; ".join(decision.reasons) or decision.effect.value, 700)
    detail: dict[str, Any] = {
        "verdict": decision.effect.value,
        "rule_ids": list(decision.rule_ids),
        "policy_hash": decision.policy_hash,
        "reasons": [bound(r, 240) for r in decision.reasons[:3]],
    }
    exceeded = [c.id for c in decision.exceeded_limits]
    if exceeded:
        detail["exceeded_limits"] = exceeded
    if decision.shadow is not None:  # mode: shadow rules / a shadow policy: recorded, not enforced
        detail["shadow"] = {
            "verdict": decision.shadow.effect.value,
            "rule_ids": list(decision.shadow.rule_ids),
            "policy_hash": decision.shadow.policy_hash,
            "differs": decision.shadow.differs,
        }
    changes = {"policy_hash": decision.policy_hash, "rule_ids": json.dumps(list(decision.rule_ids))}
    return detail, changes, reason
