"""What an operator may do through ``agent-gate serve``, checked and audited once.

The JSON API and the web inbox both call this: reading waiting calls, a call's
details, tasks and the trail; approving, denying and resolving. Each answer is
checked against the operator's rights (``operators``) and, for approvals, against
the policy's approvers through ``Gate.approve``; a task's own principal may not
approve its own calls unless the policy sets ``approvers.self_approval`` (with no
policy file there is nothing that could set it, so it is refused). A refusal is
appended to the audit chain under the operator's name before it is raised.

One lock serializes the ledger work of the server's threads: a handful of people
answering calls never wait on it, and the ledger's kept connections are then never
shared between threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from agent_gate.authorize import PolicyAuthorizer, principal_from_json
from agent_gate.errors import (
    AgentGateError,
    AmbiguousCall,
    AnswerMismatch,
    ApprovalRefused,
    GateUsageError,
    NotAwaitingApproval,
    NotInDoubt,
    OperatorRefused,
    error_code,
)
from agent_gate.gate import DEFAULT_APPROVAL_TTL, Gate
from agent_gate.gate.admission import Arguments
from agent_gate.gate.answered import progress
from agent_gate.gate.reveal import Revealed, reveal, sealed_fields
from agent_gate.ledger.grants import GrantRecord
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState
from agent_gate.ledger.views.details import CallDetails, answers_page, details_page
from agent_gate.ledger.views.inbox import (
    InboxCounts,
    InboxQuery,
    InboxRow,
    inbox_mark,
    read_inbox,
)
from agent_gate.ledger.views.operators import Operator, OperatorRight, Operators, actor_of
from agent_gate.ledger.views.pages import AuditQuery, TaskQuery, audit_json, settled, task_json
from agent_gate.policy import Policy
from agent_gate.policy.approval import quorum_rule_ids
from agent_gate.policy.edits import EditRefused
from agent_gate.tools import ToolRegistry

__all__ = ["CallRights", "InboxService", "OperatorAnswer", "RowResult", "status_of"]

_PAGE = 50
DETAILS_PAGE = 100
"""Calls with their whole details in one page of ``/api/approvals`` and ``/api/in-doubt``."""
_MAX_ROW_ID = 2**31 - 1


_AUDITED = (OperatorRefused, ApprovalRefused, AnswerMismatch)
"""The refused answers the path records itself: rights (``_refuse``), the policy
(``approval_refused``), a changed argument (``answer_refused``)."""


def status_of(exc: AgentGateError) -> int:
    """The HTTP status of a refused answer: 422 an edit that cannot stand (a field not
    editable, the schema, the policy), 403 outside one's rights, 404 no such call,
    409 the call is not in a state for it (or ambiguous), 412 it was given for other
    arguments than the call's (as a failed ``If-Match``), 400 anything else."""
    if isinstance(exc, EditRefused):
        return 422
    if isinstance(exc, OperatorRefused | ApprovalRefused):
        return 403
    if isinstance(exc, AnswerMismatch):
        return 412
    if isinstance(exc, NotAwaitingApproval | NotInDoubt | AmbiguousCall):
        return 409
    if isinstance(exc, GateUsageError) and str(exc).startswith("no "):
        return 404
    return 400


@dataclass(frozen=True, slots=True)
class OperatorAnswer:
    """An operator's answer to one call as a front end (API, inbox, Slack) hands it in:
    the call by the ledger's own id for it (``ref``, its row id: never a name the model
    chose), and the hash of the arguments the operator was shown. Not ``gate.Answer``,
    which is what a waiting agent reads back once a person answered."""

    ref: int
    args_hash: str
    reason: str | None = None
    expires_in: float | None = DEFAULT_APPROVAL_TTL
    """Seconds the approval stays usable; None: no expiry."""
    grant: str | None = None
    """A grant option the call's approve rule offers, given with the approval."""
    edit: Mapping[str, Any] | None = None
    """Editable argument fields changed before approving (``gate.edit``); None: none."""


@dataclass(frozen=True, slots=True)
class CallRights:
    """What one operator may do to one call (``InboxService.rights``): each offer is
    made from it, and the answer is judged the same way when it is posted."""

    approve: bool = False
    """Approve it, or edit then approve it (the edit form also needs editable fields)."""
    deny: bool = False
    resolve: bool = False
    why: str | None = None
    """Why not approve (or resolve), in words for the call's page; None: they may."""

    def to_dict(self) -> dict[str, Any]:
        """The API's and the templates' keys: ``may_answer`` is any of the three, what
        "only mine" keeps."""
        return {"may_answer": self.approve or self.deny or self.resolve,
                "may_approve": self.approve, "may_deny": self.deny,
                "may_resolve": self.resolve, "not_yours": self.why}


def _not_covered(tool: str) -> str:
    return f"your rights do not cover {tool} calls: another operator answers this one"


@dataclass(frozen=True, slots=True)
class RowResult:
    """What became of one row of a bulk answer: answered, or refused and why."""

    ref: int
    call_id: str | None
    tool: str | None
    done: bool
    status: int
    message: str
    error: str | None = None
    """A refusal's machine code: its error's type name, as a single answer's body
    names it (``AnswerMismatch``, ``NotAwaitingApproval``...); None when answered."""

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "call_id": self.call_id, "tool": self.tool,
                "done": self.done, "status": self.status, "message": self.message,
                "error": self.error}


def call_json(d: CallDetails) -> dict[str, Any]:
    """A call as the API and the inbox show it: ``CallDetails.to_dict()`` and ``ref``,
    the id every link and answer names it by."""
    return {"ref": d.call.row_id, **d.to_dict()}


class InboxService:
    """The server's one gate on the ledger, and every operator action through it."""

    def __init__(self, url: str, policy: str | PolicyAuthorizer | None = None,
                 tools: ToolRegistry | None = None) -> None:
        # ``tools``: only their JSON Schemas are used here, to check an approver's edit.
        self.gate = Gate(tools if tools is not None else ToolRegistry(), url, policy=policy)
        self.ledger = self.gate.ledger
        self.operators = Operators(self.ledger.engine)
        self.has_policy = policy is not None
        self._keys: Arguments | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self.gate.close()

    @contextmanager
    def _held(self) -> Iterator[None]:
        with self._lock:
            yield

    # ------------------------------------------------------------ who

    def authenticate(self, token: str) -> Operator | None:
        with self._held():
            return self.operators.authenticate(token)

    def holder(self, digest: str) -> Operator | None:
        """The operator whose current token has ``digest`` (None once they are removed,
        or re-added with a new token): what a browser session is bound to."""
        with self._held():
            return self.operators.holder(digest)

    def audit_refusal(self, *, actor: str, event: str, detail: dict[str, Any],
                      task_id: str | None = None, call_id: str | None = None) -> None:
        """Record a refused request (bad token, forged form, too many logins)."""
        with self._held():
            self.operators.record_action(actor=actor, event=event, allowed=False,
                                         task_id=task_id, call_id=call_id, detail=detail)

    def audit_allowed(self, *, actor: str, event: str, detail: dict[str, Any]) -> None:
        with self._held():
            self.operators.record_action(actor=actor, event=event, allowed=True, detail=detail)

    def slack_reply(self, actor: str, ref: int, detail: dict[str, Any]) -> None:
        """Append the entry that has the Slack message of an answered call replaced, or
        a refused click told why (``slack_reply``: the outbox reads it), under the
        clicker's name (``operator:NAME``, or ``slack:USER`` for one who is none)."""
        with self._held():
            rec = self.ledger.get_row(ref)
            self.operators.record_action(actor=actor, event="slack_reply", allowed=True,
                                         task_id=rec.task_id if rec else None,
                                         call_id=rec.call_id if rec else None,
                                         detail=detail)

    def roles(self, op: Operator) -> tuple[str, ...]:
        """The roles the policy's ``operators:`` gives ``op``: who answers a call
        escalated to one (``gate.desk``). None without a policy file, which gives none."""
        rules = self.gate.rules
        return rules.policy.roles_of(op.name) if rules is not None else ()

    def mine(self, op: Operator) -> dict[str, Any]:
        """What a list of the calls ``op`` may answer ("only mine", ``ListView.query``)
        leaves out in its statement besides other tools: calls escalated to a role they
        do not hold, and calls a rule sent whose quorum counts denials and names roles
        they hold none of (``Policy.closed_rules``). A call they may deny but not
        approve (another tool's ``approvers:``, their own task's call, a quorum's roles
        for approvals only) is theirs to answer: it stays, without a tick box."""
        rules = self.gate.rules
        closed = rules.policy.closed_rules(op.name) if rules is not None else ()
        return {"roles": self.roles(op), "closed": closed}

    def rights(self, op: Operator, call: Mapping[str, Any],
               principal: str | None) -> CallRights:
        """What ``op`` may do to ``call`` (a listed row, ``InboxRow.to_dict``, or a
        call's ``call_json``), in a task acting for ``principal``: the judgement every
        offer (a tick box, a form, the API's ``may_*``) is made from, and the same
        one the answer meets when it is posted (``_allowed``, then ``Gate.approve`` /
        ``Gate.deny``: ``Policy.approval_refusal`` and ``denial_refusal``)."""
        tool, state = str(call["tool"]), call["state"]
        if state == CallState.IN_DOUBT.value:
            may = op.may(OperatorRight.RESOLVE, tool)
            return CallRights(resolve=may, why=None if may else _not_covered(tool))
        if state != CallState.AWAITING_APPROVAL.value:
            return CallRights(why=f"the call is {state}: nobody answers it now")
        if not op.may(OperatorRight.APPROVE, tool):
            return CallRights(why=_not_covered(tool))
        deadline = call.get("deadline")
        role = deadline.get("role") if deadline and deadline.get("escalated") else None
        if role is not None and role not in self.roles(op):
            return CallRights(why=f"escalated to role {role}, which you do not hold: an "
                              "operator holding it answers this one")
        rules = self.gate.rules
        if rules is None:  # ``_not_own_call``: nothing could set self_approval
            own = principal is not None and principal == op.name
            return CallRights(approve=not own, deny=True,
                          why=f"{op.name!r} is the principal the task acts for and may "
                              "not approve its own calls" if own else None)
        rule_ids = tuple(call.get("rule_ids") or ())
        approve = rules.policy.approval_refusal(tool, op.name, principal, rule_ids)
        deny = rules.policy.denial_refusal(tool, op.name, rule_ids)
        return CallRights(approve=approve is None, deny=deny is None, why=approve or deny)

    def call_rights(self, op: Operator, call: Mapping[str, Any]) -> CallRights:
        """``rights`` of a call's page (``call_json``), its task's principal read."""
        with self._held():
            task = self.ledger.task(str(call["task_id"]))
        principal = principal_from_json(task.principal if task else None).id
        return self.rights(op, call, principal)

    # ------------------------------------------------------------ reads

    def pending(self, *, after: int | None = None, limit: int = DETAILS_PAGE
                ) -> list[CallDetails]:
        """A page of the calls waiting for a person, in ``ref`` order after ``after``,
        each with its details (three statements a page, whatever its size)."""
        with self._held():
            return details_page(self.ledger.engine, [CallState.AWAITING_APPROVAL],
                                after=after, limit=limit)

    def in_doubt(self, *, after: int | None = None, limit: int = DETAILS_PAGE
                 ) -> list[CallDetails]:
        """A page of the calls in doubt, as ``pending``."""
        with self._held():
            return details_page(self.ledger.engine, [CallState.IN_DOUBT], after=after,
                                limit=limit)

    def inbox(self, query: InboxQuery) -> tuple[list[InboxRow], InboxCounts]:
        """A page of waiting (or in-doubt) calls across tasks, and their counts (a call a
        quorum rule sent stays listed after one approval: ``InboxQuery.quorum_rules``)."""
        rules = self.gate.rules
        if rules is not None:
            query = replace(query, quorum_rules=quorum_rule_ids(rules.policy.document))
        with self._held():
            return read_inbox(self.ledger.engine, query)

    def inbox_mark(self, query: InboxQuery) -> str:
        """The list's ``inbox_mark`` alone: one aggregate, what a poll costs."""
        with self._held():
            return inbox_mark(self.ledger.engine, query)

    def details(self, ref: int) -> CallDetails:
        """The call the ledger's row ``ref`` holds."""
        with self._held():
            rec = self._row(ref)
            found = self.ledger.call_details(rec.task_id, rec.call_id)
        if found is None:  # pragma: no cover - rows are never deleted
            raise GateUsageError(f"no call {ref} in the ledger")
        return found

    def find(self, call_id: str, task_id: str | None) -> CallDetails:
        """The call these names hold (the task may be left out while the id is unique)."""
        with self._held():
            ref = self._find(call_id, task_id).row_id
        return self.details(ref)

    def task_provider(self, task_id: str) -> str | None:
        with self._held():
            task = self.ledger.task(task_id)
        return task.provider if task is not None else None

    def tasks(self, *, after: str | None = None, state: str | None = None,
              limit: int = _PAGE) -> list[dict[str, Any]]:
        with self._held():
            page = self.ledger.tasks_page(TaskQuery(state=state, after=after, limit=limit))
        return [task_json(s) for s in page]

    def timeline(self, task_id: str) -> dict[str, Any]:
        """A task, its calls and its audit entries in order."""
        with self._held():
            task = self.ledger.task(task_id)
            if task is None:
                raise GateUsageError(f"no task {task_id!r} in the ledger")
            calls = self.ledger.calls(task_id)
            entries = self.ledger.audit_page(AuditQuery(task_id=task_id, limit=1000))
        return {"task": task_id, "provider": task.provider, "terminal": task.terminal,
                "principal": task.principal,
                "calls": [{"ref": c.row_id, "call_id": c.call_id, "tool": c.tool,
                           "state": c.state.value, "reason": c.reason} for c in calls],
                "timeline": [audit_json(e) for e in entries]}

    def audit(self, *, after: int | None = None, task_id: str | None = None,
              limit: int = _PAGE) -> list[dict[str, Any]]:
        with self._held():
            # Paging forward stops below any entry a transaction still holds (PostgreSQL).
            upto = settled(self.ledger.engine) if after is not None else None
            # Past the largest id there is nothing after; the column cannot hold more.
            after = min(after, _MAX_ROW_ID) if after is not None else None
            page = self.ledger.audit_page(AuditQuery(task_id=task_id, after=after, limit=limit,
                                                     upto=upto))
        return [audit_json(e) for e in page]

    def head(self) -> dict[str, Any]:
        """The newest checkpoint (``id``, ``hash``, ``anchor``): what to write down and
        pass to ``audit verify --anchor`` later; id 0 before the first checkpoint."""
        from agent_gate.ledger.checkpoints import newest_of

        with self._held():
            newest = newest_of(self.ledger.engine)
        return newest.to_dict() if newest is not None else {"id": 0, "hash": None}

    def verify(self) -> dict[str, Any]:
        with self._held():
            return self.ledger.verify_audit().to_dict()

    # ------------------------------------------------------------ answers

    def approve(self, op: Operator, answer: OperatorAnswer) -> dict[str, Any]:
        with self._held():
            rec = self._allowed(op, OperatorRight.APPROVE, "approve", answer)
            self._not_own_call(op, rec)
            approval, new = self.gate.approve(
                rec.call_id, by=op.name, reason=answer.reason, task_id=rec.task_id,
                ttl=answer.expires_in, args_hash=answer.args_hash, grant=answer.grant,
                edit=answer.edit)
            given = [g.to_dict() for g in self.ledger.grants(task_id=rec.task_id)
                     if g.approval_id == approval.id] if answer.grant else []
            edited = self._row(answer.ref).edited if answer.edit else ()
        return {**approval.to_dict(), "new": new, "tool": rec.tool, "ref": rec.row_id,
                "grants": given, **({"edited": list(edited)} if answer.edit else {})}

    def editable(self, rec: CallRecord) -> tuple[str, ...]:
        """The fields of ``rec`` an approver may edit here: the policy's ``editable``
        for a call waiting under it, and only with the tool's schema at hand."""
        if self.gate.tools.get(rec.tool) is None:
            return ()
        return self.gate.editable_fields(rec)

    def deny(self, op: Operator, answer: OperatorAnswer) -> dict[str, Any]:
        with self._held():
            rec = self._allowed(op, OperatorRight.APPROVE, "deny", answer)
            outcome = self.gate.deny(rec.call_id, by=op.name, reason=answer.reason,
                                     task_id=rec.task_id, args_hash=answer.args_hash)
        return {"ref": rec.row_id, "task_id": outcome.task_id, **outcome.to_dict()}

    def resolve(self, op: Operator, answer: OperatorAnswer, as_: str,
                result: Any = None) -> dict[str, Any]:
        with self._held():
            rec = self._allowed(op, OperatorRight.RESOLVE, "resolve", answer)
            outcome = self.gate.resolve(rec.call_id, as_=as_, task_id=rec.task_id,
                                        result=result, note=answer.reason, by=op.name,
                                        args_hash=answer.args_hash)
        return {"ref": rec.row_id, "task_id": outcome.task_id, **outcome.to_dict()}

    def answer_each(self, op: Operator, verb: str,
                    answers: list[OperatorAnswer]) -> list[RowResult]:
        """Approve or deny each call, each bound to the hash its row showed: every
        answer is its own transaction, so one refused (rights, a changed argument, no
        longer waiting) never keeps the others from being answered. Every refusal is
        in the audit chain once: the ones a single answer records (rights, the
        policy, a changed argument) as it records them, and the ones it leaves to its
        own response (no such call, no longer waiting) as ``operator_<verb>``."""
        act = self.approve if verb == "approve" else self.deny
        out: list[RowResult] = []
        for answer in answers:
            try:
                done = act(op, answer)
            except AgentGateError as exc:
                rec = self.located(answer.ref)
                out.append(RowResult(answer.ref, rec.call_id if rec else None,
                                     rec.tool if rec else None, False, status_of(exc),
                                     str(exc), error_code(exc)))
                if not isinstance(exc, _AUDITED):
                    self._unanswered(op, verb, answer.ref, rec, out[-1])
                continue
            word = "approved" if verb == "approve" else "denied: it will not run"
            out.append(RowResult(answer.ref, done.get("call_id"), done.get("tool"), True,
                                 200, word))
        return out

    def _unanswered(self, op: Operator, verb: str, ref: int, rec: CallRecord | None,
                    row: RowResult) -> None:
        """Record a bulk answer's refusal that nothing recorded on the way."""
        self.audit_refusal(actor=actor_of(op.name), event=verb,
                           task_id=rec.task_id if rec else None,
                           call_id=rec.call_id if rec else None,
                           detail={"ref": ref, "status": row.status, "error": row.error,
                                   "reason": row.message})

    def approval_state(self, ref: int) -> dict[str, Any] | None:
        """A waiting call's quorum progress and grant options (``answered.progress``);
        None when it does not wait or the server runs without a policy file."""
        with self._held():
            rec = self._row(ref)
            rules = self.gate.rules
            if rules is None or rec.state is not CallState.AWAITING_APPROVAL:
                return None
            return progress(rules, rec, self.ledger.answers(rec))

    def quorum_progress(self, rows: list[InboxRow]) -> dict[int, str]:
        """The "1 of 2" of each listed waiting call a quorum rule sent: those calls and
        their answers in two statements for the whole page (``answers_page``); nothing
        read for the rest, nor without a policy file."""
        rules = self.gate.rules
        if rules is None:
            return {}
        wanted = set(quorum_rule_ids(rules.policy.document))
        refs = [row.ref for row in rows
                if row.state is CallState.AWAITING_APPROVAL and wanted & set(row.rule_ids)]
        with self._held():
            found = answers_page(self.ledger.engine, refs)
        out: dict[int, str] = {}
        for rec, answers in found:
            shown = progress(rules, rec, answers)
            out[rec.row_id] = f"{len(shown['approved_by'])} of {shown['min']}"
        return out

    def grants(self, *, task_id: str | None = None, active: bool = False) -> list[GrantRecord]:
        with self._held():
            return self.ledger.grants(task_id=task_id, active=active)

    def revoke_grant(self, op: Operator, grant_id: int, reason: str | None) -> GrantRecord:
        """End a grant, if ``op`` may approve its tool's calls (who may give one may end
        one); refused and audited otherwise."""
        with self._held():
            found = next((g for g in self.ledger.grants() if g.id == grant_id), None)
            if found is None:
                raise GateUsageError(f"no grant {grant_id} in the ledger")
            if not op.may(OperatorRight.APPROVE, found.tool):
                why = f"operator {op.name!r} may not revoke grants of {found.tool!r} calls"
                self.operators.record_action(
                    actor=actor_of(op.name), event="revoke_grant", allowed=False,
                    task_id=found.task_id, detail={"grant_id": grant_id, "reason": why})
                raise OperatorRefused(why)
            return self.ledger.revoke_grant(grant_id, by=op.name, reason=reason)

    def sealed_fields(self, ref: int) -> dict[str, bool]:
        """The call's redacted fields, and which a person with rights may reveal."""
        with self._held():
            return sealed_fields(self._row(ref), self._policy())

    def reveal(self, op: Operator, ref: int, field: str) -> Revealed:
        """One redacted field in clear for ``op`` (``gate.reveal``: rights, the policy's
        ``reveal: never``, the audit under their name)."""
        with self._held():
            if self._keys is None:
                self._keys = Arguments(None, self.ledger.url, None)
            return reveal(self._row(ref), field, op=op, operators=self.operators,
                          keys=self._keys, policy=self._policy())

    def _policy(self) -> Policy | None:
        rules = self.gate.rules
        return rules.policy if rules is not None else None

    def located(self, ref: int) -> CallRecord | None:
        """The call at row ``ref``, if any (to name it in the audit of a refused form)."""
        with self._held():
            return self.ledger.get_row(ref)

    def _row(self, ref: int) -> CallRecord:
        rec = self.ledger.get_row(ref)
        if rec is None:
            raise GateUsageError(f"no call {ref} in the ledger")
        return rec

    def _find(self, call_id: str, task_id: str | None) -> CallRecord:
        recs = self.ledger.find(call_id, task_id or None)
        if not recs:
            raise GateUsageError(f"no call {call_id!r} in the ledger")
        if len(recs) > 1:
            raise AmbiguousCall(f"call id {call_id!r} is in {len(recs)} tasks; name the task")
        return recs[0]

    def _allowed(self, op: Operator, right: OperatorRight, action: str,
                 answer: OperatorAnswer) -> CallRecord:
        """The call, if ``op`` holds ``right`` over its tool; else audited and refused."""
        rec = self._row(answer.ref)
        if not op.may(right, rec.tool):
            why = f"operator {op.name!r} may not {action} {rec.tool!r} calls"
            self._refuse(op, action, rec, why)
        return rec

    def _not_own_call(self, op: Operator, rec: CallRecord) -> None:
        """With no policy file, the task's principal never approves its own calls
        (with one, ``Gate.approve`` asks the policy, which may allow it)."""
        if self.has_policy:
            return
        task = self.ledger.task(rec.task_id)
        principal = principal_from_json(task.principal if task else None).id
        if principal is not None and principal == op.name:
            self._refuse(op, "approve", rec,
                         f"{op.name!r} is the principal task {rec.task_id!r} acts for and "
                         "may not approve its own calls (no policy sets self_approval)")

    def _refuse(self, op: Operator, action: str, rec: CallRecord, why: str) -> None:
        self.operators.record_action(actor=actor_of(op.name), event=action, allowed=False,
                                     task_id=rec.task_id, call_id=rec.call_id,
                                     detail={"tool": rec.tool, "reason": why})
        raise OperatorRefused(why)
