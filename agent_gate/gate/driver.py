"""The driver: one call walked through the ledger's states, one compare-and-set at a time.

Theory of operation. ``drive_call`` records an incoming call (or finds it: a replay,
a duplicate by dedupe key, a conflicting reuse of its id) and hands its row to
``advance``; ``drive_record`` hands a stored row (``resume``, ``recover``). The same
call can arrive in any state: again after it finished (the stored outcome is
returned), while another worker runs it (``in progress``), after its worker died
(``in_doubt``: re-run only if the tool is retry-safe or its reconcile hook says the
write did not happen), or half-way through a crash (``received``/``authorized``:
carried on from there). So ``advance`` is a loop over the row's *current* state:
each pass takes the one arrow that state allows (the table is
``ledger.states``), re-reads the row the compare-and-set left, and goes on until
the row reaches a state this invocation must report (finished, waiting, running
elsewhere). Each pass commits or loses one CAS, so the loop ends within
``_MAX_STEPS`` passes: every arrow moves forward except RETRY, which only an
in-doubt row takes, once per settle.

The driver is a generator that does all database work itself and yields only
what differs between sync and async callers (``runner.RunTool``,
``runner.Reconcile``); ``Runner.serve_sync``/``serve_async`` answer them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from agent_gate.authorize import PolicyAuthorizer
from agent_gate.calls import CallStatus, ToolCall
from agent_gate.errors import GateUsageError
from agent_gate.gate import answered
from agent_gate.gate.admission import Admitted, Arguments, CallContext, admit, check_task_id
from agent_gate.gate.decide import Decider
from agent_gate.gate.finish import Finisher
from agent_gate.gate.outcome import Outcome, outcome_of
from agent_gate.gate.runner import (
    CallWalk,
    Claimed,
    HookFailed,
    Reconcile,
    Request,
    RunTool,
    async_in_loop,
    refuse_async_in_loop,
)
from agent_gate.ledger.lease import Liveness, liveness, now_ms, this_owner
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import CallRecord, Ruling, Transition
from agent_gate.ledger.states import LEASE_ENDS, CallState, Event, LeaseEnd
from agent_gate.ledger.store import Ledger
from agent_gate.telemetry import CallTrace, Observer
from agent_gate.telemetry.base import RowAs
from agent_gate.tools import Idempotency, Reconciled, Reconciliation, Tool, ToolRegistry

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["CallDriver", "lease_end"]

_MAX_STEPS = 16
_Step = Generator[Request, Any, "Outcome | None"]
"""A step that hands requests out (the tool runs, a reconcile hook is asked): it
returns the outcome to report, or None to go on from the row it left."""

_RECONCILED = {
    Reconciliation.SUCCEEDED: "the reconcile hook found that the write happened",
    Reconciliation.FAILED: "the reconcile hook found that the call failed",
    Reconciliation.NOT_APPLIED: (
        "the reconcile hook found that the write did not happen; running it again"
    ),
}


def lease_end(rec: CallRecord) -> LeaseEnd | None:
    """Why the worker that claimed ``rec`` no longer runs it; None: it still does."""
    if liveness(rec.lease_owner) is Liveness.DEAD:
        return LeaseEnd.OWNER_DEAD
    if rec.lease_expires_ms is None or rec.lease_expires_ms < now_ms():
        return LeaseEnd.LEASE_EXPIRED
    return None


def _traced(trace: CallTrace, driver: CallWalk) -> CallWalk:
    """``driver`` reported to ``trace``: its outcome, or the error that escaped it."""
    try:
        outcome = yield from driver
    except BaseException as exc:
        trace.failed(exc)
        raise
    trace.end(outcome)
    return outcome


_LOGS_ONLY = Observer()


def _normalize_verdict(value: Any) -> Reconciled:
    if isinstance(value, Reconciled):
        return value
    raw = getattr(value, "value", value)
    return Reconciled(Reconciliation(raw))


@dataclass(slots=True)
class _Walk:
    """One call's walk through ``CallDriver.advance``: the row as last seen, and
    whether this invocation made the arrow that left it there."""

    rec: CallRecord
    acted: bool
    """``replayed`` is False only when this invocation made the transition that
    produced the state it reports: losing a race to another worker, or finding the
    row already there, means the outcome was read, not produced."""
    early: Ruling | None
    call_id: str
    duplicate_of: str | None
    trace: CallTrace
    fresh: int | None = None
    """The version at which this invocation itself authorized the row, under this
    gate's policy, from arguments it holds: a claim of exactly that version need not
    re-check it. Any later arrow bumps the version."""

    def __post_init__(self) -> None:
        if self.acted and self.rec.state is CallState.AUTHORIZED:
            self.fresh = self.rec.version

    def moved(self, tr: Transition, *, decided: bool = False) -> None:
        """The row a step's compare-and-set left (``decided``: by this gate's decision)."""
        self.rec, self.acted = tr.record, tr.won
        if decided:
            authorized = self.acted and self.rec.state is CallState.AUTHORIZED
            self.fresh = self.rec.version if authorized else None

    def report(self, *, replayed: bool | None = None, **fields: Any) -> Outcome:
        """The outcome of the row as it stands."""
        return outcome_of(
            self.rec, replayed=(not self.acted) if replayed is None else replayed,
            call_id=self.call_id, duplicate_of=self.duplicate_of, **fields,
        )


@dataclass(frozen=True, slots=True)
class CallDriver:
    """Drives calls for one gate: its tools, ledger, decisions and lease length."""

    tools: ToolRegistry
    ledger: Ledger
    decider: Decider
    keys: Arguments
    finisher: Finisher
    lease_ms: int
    observer: Observer = _LOGS_ONLY
    """Traces, metrics and logs (``agent_gate.telemetry``): one ``CallTrace`` per drive."""

    @property
    def rules(self) -> PolicyAuthorizer | None:
        return self.decider.rules

    # ------------------------------------------------------------ entry points

    def drive_call(
        self,
        task_id: str,
        call: ToolCall,
        early: Ruling | None,
        context: CallContext,
        *,
        decide_only: bool = False,
    ) -> CallWalk:
        """Record an incoming call (or find it), then drive its row (``decide_only``:
        no further than its decision, see ``advance``)."""
        trace = self.observer.call(task_id, call.call_id, call.name)
        return (yield from _traced(
            trace, self._drive_call(trace, task_id, call, early, context, decide_only)
        ))

    def _drive_call(
        self,
        trace: CallTrace,
        task_id: str,
        call: ToolCall,
        early: Ruling | None,
        context: CallContext,
        decide_only: bool,
    ) -> CallWalk:
        if call.status is CallStatus.PROVIDER_EXECUTED:
            raise GateUsageError(
                f"call {call.call_id!r} was executed by the provider; the gate does not run it"
            )
        check_task_id(task_id)
        tool = self.tools.get(call.name)
        admitted = admit(
            task_id, call, tool=tool, rules=self.rules, keys=self.keys,
            classes=self.decider.classes, context=context, early=early,
        )
        call, early, new = admitted.call, admitted.early, admitted.row
        if trace.ids is not None:
            new = replace(new, trace_id=trace.ids[0], span_id=trace.ids[1])
        decide = _InsertDecision(self, early, decide_only)
        policy = self.decider.policy
        rec, inserted = self.ledger.record(
            new,
            provider=call.provider,
            actor=this_owner(),
            # A custom Authorizer may call out (a network service): it decides in a
            # transaction of its own, never while this one holds the write lock.
            decide=decide if policy is None or self.rules is not None else None,
            lock=self.rules is not None,
        )
        if decide.failed and inserted:
            trace.seen(rec, inserted)
            raise decide.failed[0]
        if inserted and decide.ruling is not None:  # the last asking, committed with the insert
            self.decider.observe(rec, decide.ruling)
        if inserted and decide.runs and rec.state is CallState.EXECUTING:
            # Decided and claimed in the insert's commit: the decision is seen, then the claim.
            trace.seen(RowAs(CallState.AUTHORIZED, rec.attempt, rec.rule_ids, rec.reason_code),
                       True)
            tool, validated = decide.runs[0]
            return (yield from self._run(Claimed(
                rec, tool, validated, self.decider.info(rec), admitted.asked_id, None
            ), trace))
        return (yield from self._recorded(
            trace, rec, inserted, call, admitted, decide_only=decide_only
        ))

    def _recorded(
        self, trace: CallTrace, rec: CallRecord, inserted: bool, call: ToolCall,
        admitted: Admitted, *, decide_only: bool,
    ) -> CallWalk:
        """Go on from the row ``record`` left: a conflict with the call asked, a call
        seen again, or the walk from its state."""
        new, early = admitted.row, admitted.early
        trace.seen(rec, inserted)
        duplicate_of = rec.call_id if rec.call_id != call.call_id else None
        conflict = rec.tool != call.name or (
            call.complete
            and rec.state is not CallState.INCOMPLETE
            and rec.args_hash != new.args_hash
            and not self._as_sent_before_edit(rec, new.args_hash)
        )
        if conflict:
            return self._conflict(rec, call, new.args_hash, admitted.asked_id, duplicate_of)
        if not inserted:
            self.ledger.note(
                rec,
                "seen_again",
                actor=this_owner(),
                call_id=call.call_id,
                detail={"duplicate_of": duplicate_of} if duplicate_of else None,
            )
        return (
            yield from self.advance(
                rec,
                early=early,
                call_id=admitted.asked_id,
                duplicate_of=duplicate_of,
                acted=inserted and rec.state is not CallState.RECEIVED,
                decide_only=decide_only,
                trace=trace,
            )
        )

    def drive_record(self, rec: CallRecord) -> CallWalk:
        """Drive a stored row (resume, recover): its span links to the one it was first seen in."""
        trace = self.observer.call(
            rec.task_id, rec.call_id, rec.tool, link=(rec.trace_id, rec.span_id)
        )
        return (yield from _traced(trace, self.advance(
            rec, early=None, call_id=rec.call_id, duplicate_of=None, trace=trace
        )))

    def _run(self, claimed: Claimed, trace: CallTrace) -> CallWalk:
        """Run a call this invocation claimed (``executing`` is committed) and record
        what the run ended in."""
        claimed.trace = trace
        trace.seen(claimed.rec, True)
        if claimed.tool.spec.transactional:  # its writes commit with its outcome, here
            with trace.running():
                return self.finisher.finish_in_transaction(claimed)
        ran = yield RunTool(claimed)
        return self.finisher.finish(claimed, ran)

    def _claim_now(self, rec: CallRecord) -> tuple[Tool, Mapping[str, Any] | BaseModel] | None:
        """The tool and input of a call just authorized, if this invocation runs it now
        (so its claim may commit with the decision); None leaves the claim to ``advance``,
        which says why it cannot run (tool missing, an async tool under a running loop)."""
        runnable = self.decider.runnable(rec)
        if isinstance(runnable, str) or async_in_loop(runnable[0]):
            return None
        return runnable

    def _as_sent_before_edit(self, rec: CallRecord, args_hash: str) -> bool:
        """The call seen again as the agent sent it, before an approver edited it: the
        same call (its new version runs), not a conflict. Read only for edited rows."""
        if not rec.edited:
            return False
        edits = self.ledger.edits(rec)
        return bool(edits) and edits[0].old_args_hash == args_hash

    def _conflict(
        self,
        rec: CallRecord,
        call: ToolCall,
        args_hash: str,
        asked_id: str,
        duplicate_of: str | None,
    ) -> Outcome:
        """The call's id (or dedupe key) is held by a call with another tool or other
        arguments: audited and reported, never run."""
        what = "a different tool" if rec.tool != call.name else "different arguments"
        self.ledger.note(
            rec,
            "conflict",
            actor=this_owner(),
            call_id=call.call_id,
            detail={"args_hash": args_hash, "stored_args_hash": rec.args_hash, "tool": call.name},
        )
        held_by = f"call {rec.call_id!r}" if duplicate_of else "this call id"
        return outcome_of(
            rec,
            replayed=False,
            call_id=asked_id,
            state=CallState.REJECTED,
            code=R.CONFLICT,
            reason=(
                f"conflict: {held_by} was recorded with {what} "
                f"(sha256 {rec.args_hash[:12]} != {args_hash[:12]}); not run"
            ),
            duplicate_of=duplicate_of,
        )

    # ------------------------------------------------------------ the walk

    def advance(
        self,
        rec: CallRecord,
        *,
        early: Ruling | None,
        call_id: str,
        duplicate_of: str | None,
        acted: bool = False,
        decide_only: bool = False,
        trace: CallTrace | None = None,
    ) -> CallWalk:
        """Move the row forward from whatever state it is in, one CAS at a time: each
        pass hands the row to its state's step (``_STEPS``, as h11's connection
        dispatches by state), which takes the one arrow that state allows.

        ``acted``: this invocation already moved the row (decided it as it recorded it).
        ``decide_only``: take the call's decision and stop there: never claim, run,
        sweep or reconcile (an agent framework asks before it invokes the tool).
        """
        walk = _Walk(rec, acted, early, call_id, duplicate_of,
                     trace or _LOGS_ONLY.call(rec.task_id, call_id, rec.tool))
        for _ in range(_MAX_STEPS):
            walk.trace.seen(walk.rec, walk.acted)
            state = walk.rec.state
            step = _STEPS.get(state)
            if step is None or (decide_only and state is not CallState.RECEIVED):
                return walk.report()  # terminal, or decided: report what is stored
            done = step(self, walk)
            if isinstance(done, Generator):
                done = yield from done
            if done is not None:
                return done
        return walk.report()  # pragma: no cover

    # -- the steps: one per state that has an arrow to take. Each returns the outcome
    # to report, None to go on from the row it left in ``walk``, or a driver that
    # returns either (the tool runs, a reconcile hook is asked).

    def _on_received(self, walk: _Walk) -> Outcome | None:
        rec = walk.rec
        ruling = self.decider.ruling(rec, walk.early)
        if ruling is None:
            tr, decided = self.ledger.authorize(
                rec, self.decider.policy_ruling, actor=this_owner())
            if tr.won:
                self.decider.observe(rec, decided)
        elif ruling.event is None:
            # Cannot be decided here (sealed arguments without the key): report.
            return walk.report(code=ruling.code, reason=ruling.reason, state=rec.state)
        else:
            tr = self.ledger.transition(
                rec, ruling.event, actor=this_owner(), code=ruling.code,
                reason=ruling.reason, detail=ruling.detail, changes=ruling.changes,
            )
        walk.moved(tr, decided=True)
        return None

    def _on_awaiting_approval(self, walk: _Walk) -> _Step | Outcome | None:
        approved = self._claim_approved(walk.rec, walk.call_id, walk.duplicate_of)
        if isinstance(approved, Claimed):
            return self._run(approved, walk.trace)
        now, waiting, won = approved
        if now.state is CallState.AWAITING_APPROVAL:
            walk.rec = now
            return walk.report(state=now.state, code=R.AWAITING_APPROVAL,
                               reason=waiting or now.reason)
        walk.rec, walk.acted = now, won
        return None

    def _on_authorized(self, walk: _Walk) -> _Step | Outcome | None:
        rec = walk.rec
        claimed = self._claim(rec, walk.call_id, walk.duplicate_of,
                              recheck=rec.version != walk.fresh)
        if not isinstance(claimed, Transition):
            return self._run(claimed, walk.trace)
        if claimed.record.version == rec.version:
            # Cannot run here (tool missing or invalid now, or its state is not what
            # its audit trail recorded): report, leave it.
            walk.rec = claimed.record
            return walk.report()
        # Lost the claim to someone else, or the re-check moved the call.
        walk.moved(claimed)
        return None

    def _on_executing(self, walk: _Walk) -> Outcome | None:
        rec = walk.rec
        ended = lease_end(rec)
        if ended is None:
            return walk.report(
                replayed=True, code=R.IN_PROGRESS,
                reason=f"running under another worker (attempt {rec.attempt}); "
                "not started again",
            )
        tr = self.ledger.lose_if_abandoned(
            rec,
            actor=this_owner(),
            expired_only=ended is LeaseEnd.LEASE_EXPIRED,
            code=LEASE_ENDS[ended].code,
            reason=(
                "the worker running this call died; whether it took effect is unknown"
                if ended is LeaseEnd.OWNER_DEAD
                else "the worker's lease expired; whether it took effect is unknown"
            ),
        )
        walk.moved(tr)
        return None

    def _on_in_doubt(self, walk: _Walk) -> _Step:
        settled = yield from self._settle(walk.rec)
        if settled is None:
            return walk.report()
        walk.moved(settled)
        return None

    # ------------------------------------------------------------ claims

    def _claim(
        self, rec: CallRecord, call_id: str, duplicate_of: str | None, *, recheck: bool
    ) -> Claimed | Transition:
        """Commit ``executing`` for an authorized call, or say why not (the row as is).

        ``recheck``: the call was authorized by someone else, earlier, or under
        another policy (a resume, a replay, a retry): the claim re-checks the stored
        arguments against ``args_hash`` and the policy of this gate, and rejects the
        call (or sends it to a person) instead of running it when either fails.
        """
        intact = self.keys.intact(rec) if recheck else True
        runnable = self.decider.runnable(rec)
        if isinstance(runnable, str):
            if intact is not False:
                return Transition(False, rec)
        else:
            refuse_async_in_loop(runnable[0])
        if recheck:
            outside = self.decider.outside(rec)
            tr, _ = self.ledger.claim_rechecked(
                rec,
                owner=this_owner(),
                lease_ms=self.lease_ms,
                decide=lambda txn, current: self.decider.recheck(txn, current, outside),
            )
        else:
            # This invocation committed this very version: nothing to re-check.
            tr = self.ledger.claim(
                rec, owner=this_owner(), lease_ms=self.lease_ms, trail_checked=False
            )
        if not tr.won or tr.record.state is not CallState.EXECUTING:
            return tr
        assert not isinstance(runnable, str)  # an intact, runnable call was claimed
        tool, validated = runnable
        return Claimed(
            tr.record, tool, validated, self.decider.info(tr.record), call_id, duplicate_of
        )

    def _claim_approved(
        self, rec: CallRecord, call_id: str, duplicate_of: str | None
    ) -> Claimed | tuple[CallRecord, str | None, bool]:
        """Use the call's approval and commit ``executing``, or say why it waits."""
        rules = self.rules
        if rules is None:
            return rec, None, False
        last = self.ledger.approval(rec)
        if last is None:
            return rec, None, False  # nobody answered yet: the policy's reason stands
        runnable = self.decider.runnable(rec)
        if isinstance(runnable, str):
            return rec, f"approved, but it cannot run here: {runnable}", False
        tool, validated = runnable
        refuse_async_in_loop(tool)
        arguments, _ = self.keys.of(rec)
        assert arguments is not None
        refused: list[str] = []
        tr, ruling = self.ledger.claim_approved(
            rec,
            owner=this_owner(),
            lease_ms=self.lease_ms,
            decide=lambda txn, current: self.decider.approval_ruling(
                txn, current, arguments, refused
            ),
        )
        if refused:
            self.ledger.note(
                tr.record,
                "approval_refused",
                actor=this_owner(),
                detail={"reason": refused[0], "approved_by": last.decided_by,
                        "policy_hash": rules.hash},
            )
        if tr.won and tr.record.state is CallState.EXECUTING:
            return Claimed(
                tr.record, tool, validated, self.decider.info(tr.record), call_id, duplicate_of
            )
        waiting = ruling.reason if ruling is not None and ruling.event is None else None
        return tr.record, waiting, tr.won

    # ------------------------------------------------------------ in doubt

    def _settle(self, rec: CallRecord) -> Generator[Request, Any, Transition | None]:
        """Try to settle an in-doubt call; the transition tried, None if it stays."""
        tool = self.tools.get(rec.tool)
        if tool is None:
            return None
        hook = tool.spec.reconcile
        if tool.spec.transactional and self._runnable_here(rec):
            # No outcome committed means none of its writes did: they share the commit.
            return self.ledger.transition(
                rec, Event.RETRY, actor=this_owner(), code=R.RETRIED,
                reason="transactional: its writes rolled back with the outcome; running again",
            )
        if hook is None:
            if Idempotency(rec.idempotency).retry_safe and self._runnable_here(rec):
                return self.ledger.transition(
                    rec,
                    Event.RETRY,
                    actor=this_owner(),
                    code=R.RETRIED,
                    reason=f"idempotency {rec.idempotency!r}: safe to run again",
                )
            return None
        answer = yield Reconcile(hook, self.decider.info(rec))
        verdict = None
        if not isinstance(answer, HookFailed):
            with contextlib.suppress(ValueError):  # not a Reconciliation: audited below
                verdict = _normalize_verdict(answer)
        if verdict is None:
            error_type = (
                type(answer.exc).__name__ if isinstance(answer, HookFailed)
                else "InvalidReconcileAnswer"
            )
            self.ledger.note(
                rec, "reconcile_failed", actor=this_owner(), detail={"error_type": error_type}
            )
            return None
        status = verdict.status
        if status is Reconciliation.NOT_APPLIED and not self._runnable_here(rec):
            return None
        result = error = None
        if status is Reconciliation.SUCCEEDED:
            result = self.finisher.kept_for(rec, verdict.result)
        elif status is Reconciliation.FAILED:
            message = self.finisher.cleaned(rec, verdict.error or "failed downstream")
            error = {"type": "Reconciled", "message": message}
        return self.finisher.settle(
            rec, status, actor="reconcile", code=R.RECONCILED, reason=_RECONCILED[status],
            result=result, error=error,
        )

    def _runnable_here(self, rec: CallRecord) -> bool:
        return not isinstance(self.decider.runnable(rec), str)

    # ------------------------------------------------------------ blockers

    def needs(self, rec: CallRecord) -> tuple[str, str | None]:
        """What a call that is not finished needs next, and why (see ``Blocker``)."""
        if rec.state is CallState.AWAITING_APPROVAL:
            last = self.ledger.approval(rec)
            if last is None:
                return "approval", rec.reason
            args, why = self.keys.of(rec)
            problem = why or last.unusable(
                args_hash=self.keys.hash_for(rec, args) if args is not None else "",
                stored_args_hash=rec.args_hash,
                policy_hash=self.rules.hash if self.rules else None,
            )
            problem = problem or self.decider.approver_refusal(rec, last.decided_by)
            if problem is None and self.rules is not None:
                problem = self._short_of_quorum(rec)
            if problem is None:
                return "run", f"approved by {last.decided_by}; the next resume runs it"
            return "approval", problem
        if rec.state is CallState.IN_DOUBT:
            return "resolution", rec.reason
        if rec.state is CallState.EXECUTING:
            if lease_end(rec) is None:
                return "nothing", f"running under {rec.lease_owner} (attempt {rec.attempt})"
            return "resolution", "its worker is gone; the next resume marks it in doubt"
        if rec.state is CallState.INCOMPLETE:
            return "none", rec.reason
        return "run", rec.reason or "the next resume decides or runs it"


    def _short_of_quorum(self, rec: CallRecord) -> str | None:
        """How far a quorum rule's call is from its count (None: not a quorum, or met)."""
        assert self.rules is not None
        shown = answered.progress(self.rules, rec, self.ledger.answers(rec))
        if len(shown["approved_by"]) >= shown["min"]:
            return None
        return f"{len(shown['approved_by'])} of {shown['min']} approvals"


_STEPS: Mapping[CallState, Callable[[CallDriver, _Walk], _Step | Outcome | None]] = {
    CallState.RECEIVED: CallDriver._on_received,
    CallState.AWAITING_APPROVAL: CallDriver._on_awaiting_approval,
    CallState.AUTHORIZED: CallDriver._on_authorized,
    CallState.EXECUTING: CallDriver._on_executing,
    CallState.IN_DOUBT: CallDriver._on_in_doubt,
}
"""Each state with an arrow to take, and the step that takes it (``advance``); a
state not here is terminal: its outcome is reported as stored."""


class _InsertDecision:
    """The decision taken in the insert's transaction (``Ledger.record(decide=)``),
    and what it left for after the commit.

    Deciding a call that was just inserted commits with the insert (one commit fewer
    per call), and so does its claim when it runs at once (``_claim_now``): two
    commits a call, the outcome's the second. If deciding fails, the row still
    commits as ``received`` (as when it was two transactions) and the error is raised
    after that commit: nothing recorded is lost. A database error is raised at once:
    the transaction cannot commit anything after it. The ledger may ask again (a
    pipelined intake that guessed the row's id wrong records it anew): only the last
    asking counts, and only for a call it then inserted.
    """

    __slots__ = ("decide_only", "driver", "early", "failed", "ruling", "runs")

    def __init__(self, driver: CallDriver, early: Ruling | None, decide_only: bool) -> None:
        self.driver = driver
        self.early = early
        self.decide_only = decide_only
        self.failed: list[BaseException] = []
        self.runs: list[tuple[Tool, Mapping[str, Any] | BaseModel]] = []
        self.ruling: Ruling | None = None
        """The ruling of the last asking (observed once the insert committed)."""

    def __call__(self, txn: LedgerTxn, rec: CallRecord) -> Ruling | None:
        self.failed.clear()
        self.runs.clear()
        self.ruling = None
        driver = self.driver
        try:
            ruling = driver.decider.ruling_in(txn, rec, self.early)
        except SQLAlchemyError:
            raise
        except Exception as exc:
            self.failed.append(exc)
            return None
        self.ruling = ruling
        if self.decide_only or ruling is None or ruling.event is not Event.ALLOW:
            return ruling
        runnable = driver._claim_now(rec)
        if runnable is None:
            return ruling
        self.runs.append(runnable)
        return replace(ruling, claim=(this_owner(), driver.lease_ms))
