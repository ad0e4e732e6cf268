"""Finishing: the one place what a tool run (or a reconcile hook, or an operator)
produced is committed, and what of it may be kept.

A run's end (``RunEnd``) picks the arrow: a return SUCCEEDs, a raise FAILs, a read
that timed out FAILs (it wrote nothing), while a write that timed out, was
interrupted or reported ``OutcomeUnknown`` is LOST to ``in_doubt``: whether it
took effect is unknown, so nothing runs it again blindly. A sync tool still
running after its timeout settles its call late, if the call is still in doubt
from that very attempt (``late``). Results and errors are kept through the
policy's redaction (``OutcomeScrub``) and within ``max_result_bytes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_gate.authorize import PolicyAuthorizer
from agent_gate.gate.admission import Arguments
from agent_gate.gate.decide import Decider
from agent_gate.gate.outcome import Outcome, outcome_of
from agent_gate.gate.runner import Claimed, Ran
from agent_gate.gate.transactional import joined_transaction, running_in
from agent_gate.ledger.lease import this_owner
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CallRecord, Produced, Transition, TxnConnection
from agent_gate.ledger.states import (
    LATE_RUN_ENDS,
    RECONCILED,
    CallState,
    Event,
    RunEnd,
    run_end,
)
from agent_gate.ledger.store import Ledger
from agent_gate.privacy.results import KeptResult, OutcomeScrub, StoredResult, keep_result
from agent_gate.privacy.scrub import clean_message, describe_error
from agent_gate.tools import Effect, Reconciliation

__all__ = ["Finisher"]

_FAILURE_TEXT = {
    (RunEnd.TIMEOUT, True): "the read timed out after {timeout}s",
    (RunEnd.TIMEOUT, False): (
        "the tool did not return within {timeout}s; whether it took effect is unknown"
    ),
    (RunEnd.INTERRUPTED, True): (
        "the worker was interrupted while the tool ran; whether it took effect is unknown"
    ),
    (RunEnd.UNKNOWN, True): "the tool reported that it cannot tell whether it took effect",
}
"""What the audit trail says of a run that did not return (the arrow and code are
``ledger.states.RUN_ENDS``'s); keyed (end, read), a write's text falling back to a read's."""


@dataclass(frozen=True, slots=True)
class Finisher:
    """Commits outcomes for one gate's ledger and policy."""

    ledger: Ledger
    decider: Decider
    keys: Arguments
    max_result_bytes: int

    @property
    def rules(self) -> PolicyAuthorizer | None:
        return self.decider.rules

    def finish(self, claimed: Claimed, ran: Ran) -> Outcome:
        """Commit what running the tool produced."""
        rec, owner = claimed.rec, this_owner()
        value: Any = None
        if ran.end is RunEnd.OK:
            kept = self._keep(claimed.rec.tool, claimed.info.arguments, ran.value)
            value = kept.value
            tr = self.ledger.finish(
                rec, Event.SUCCEED, actor=owner, lease_owner=owner, result=kept.stored,
                code=kept.code, reason=kept.reason,
            )
        else:
            event, code, reason, error = self._failure(claimed, ran)
            tr = self.ledger.finish(
                rec, event, actor=owner, lease_owner=owner, error=error, code=code, reason=reason
            )
        final = tr.record
        if not tr.won:
            final = self.late(claimed, ran) or final
        elif ran.pending is not None:
            pending = ran.pending
            pending.add_done_callback(lambda f: self.late(claimed, f.result()))
        return outcome_of(
            final,
            replayed=False,
            call_id=claimed.call_id,
            duplicate_of=claimed.duplicate_of,
            result=value if final.state is CallState.SUCCEEDED and ran.end is RunEnd.OK else None,
            exception=ran.exc,
        )

    def finish_in_transaction(self, claimed: Claimed) -> Outcome:
        """Run a transactional tool inside the transaction that commits its outcome
        (``agent_gate.gate.transactional``): its writes and ``succeeded`` together."""
        owner = this_owner()
        kept: list[KeptResult] = []

        def work(conn: TxnConnection) -> Produced:
            with running_in(conn, claimed.info):
                value = claimed.tool.invoke(claimed.validated)
            kept.append(self._keep(claimed.rec.tool, claimed.info.arguments, value))
            return Produced(Event.SUCCEED, kept[0].stored, kept[0].code, kept[0].reason)

        try:
            tr = self.ledger.finish_with(
                claimed.rec, work, lease_owner=owner, conn=joined_transaction()
            )
        except Exception as exc:  # rolled back, writes and all: it failed, nothing written
            return self.finish(claimed, Ran(RunEnd.ERROR, exc=exc))
        return outcome_of(
            tr.record, replayed=not tr.won, call_id=claimed.call_id,
            duplicate_of=claimed.duplicate_of,
            result=kept[0].value if tr.won and tr.record.state is CallState.SUCCEEDED else None,
        )

    def _failure(
        self, claimed: Claimed, ran: Ran
    ) -> tuple[Event, ReasonCode | None, str, dict[str, str] | None]:
        read = self.decider.classes(claimed.tool)[0] is Effect.READ
        observed = run_end(ran.end, read=read)
        # A timed-out run's exception is the gate's own, not the tool's: not stored.
        error = None if ran.end is RunEnd.TIMEOUT else self._error(
            claimed.rec.tool, claimed.info.arguments, ran.exc
        )
        if ran.end is RunEnd.ERROR:
            text = f"the tool raised {error['type'] if error else 'an error'}"
        else:
            template = _FAILURE_TEXT.get((ran.end, read)) or _FAILURE_TEXT[(ran.end, True)]
            text = template.format(timeout=claimed.tool.spec.timeout)
        return observed.event, observed.code, text, error

    def late(self, claimed: Claimed, ran: Ran) -> CallRecord | None:
        """The tool returned after its call was judged in doubt: settle it if still so."""
        current = self.ledger.get_row(claimed.rec.row_id)
        if current is None:
            return None
        same_attempt = current.attempt == claimed.rec.attempt
        if current.state is not CallState.IN_DOUBT or not same_attempt:
            self.ledger.note(
                current,
                "late_outcome_discarded",
                actor=this_owner(),
                detail={"attempt": claimed.rec.attempt, "kind": ran.end.value},
            )
            if claimed.trace is not None:
                claimed.trace.late(current.state.value, settled=False)
            return None
        observed = LATE_RUN_ENDS.get(ran.end)
        if observed is None:
            return None  # no answer: it stays in doubt
        result = error = None
        if ran.end is RunEnd.OK:
            kept = self._keep(claimed.rec.tool, claimed.info.arguments, ran.value)
            result = kept.stored
            reason = "the tool returned after its call was judged in doubt" + (
                "; its result has no JSON form, only its type and size are kept"
                if kept.code else ""
            )
        else:
            error = self._error(claimed.rec.tool, claimed.info.arguments, ran.exc)
            reason = "the tool raised after its call was judged in doubt"
        tr = self.ledger.finish(
            current, observed.event, actor=this_owner(), code=observed.code, reason=reason,
            result=result, error=error,
        )
        if tr.won and claimed.trace is not None:
            claimed.trace.late(tr.record.state.value, settled=True)
        return tr.record if tr.won else None

    def settle(
        self,
        rec: CallRecord,
        status: Reconciliation,
        *,
        actor: str,
        code: ReasonCode,
        reason: str,
        result: StoredResult | None = None,
        error: Mapping[str, str] | None = None,
        args_hash: str | None = None,
    ) -> Transition:
        """Settle an in-doubt call as a reconcile hook or an operator found it: the
        write happened (``result`` kept), failed (``error`` kept), or did not happen
        (runnable again). ``args_hash``: a person's answer, given for those arguments
        (``Ledger.resolve``)."""
        event = RECONCILED[status.value].event
        if args_hash is not None:
            return self.ledger.resolve(
                rec, event, actor=actor, code=code, reason=reason, result=result,
                error=dict(error) if error is not None else None, args_hash=args_hash,
            )
        if event is Event.RETRY:
            return self.ledger.transition(rec, event, actor=actor, code=code, reason=reason)
        return self.ledger.finish(
            rec, event, actor=actor, code=code, reason=reason, result=result,
            error=dict(error) if error is not None else None,
        )

    def kept_for(self, rec: CallRecord, result: Any) -> StoredResult:
        """A result reported for ``rec`` by someone other than its tool run (a reconcile
        hook), kept as a tool's own result is."""
        return self._keep(rec.tool, self.decider.info(rec).arguments, result).stored

    # ------------------------------------------------------------ what is kept

    def _keep(self, tool: str, arguments: Mapping[str, Any] | None, value: Any) -> KeptResult:
        return keep_result(value, self.max_result_bytes, self._scrub(tool, arguments))

    def _error(
        self, tool: str, arguments: Mapping[str, Any] | None, exc: BaseException | None
    ) -> dict[str, str] | None:
        if exc is None:
            return None
        scrub = self._scrub(tool, arguments)
        return describe_error(exc, arguments, scrub.secrets if scrub is not None else None)

    def cleaned(self, rec: CallRecord, message: object) -> str:
        """A message reported for ``rec`` (a reconcile hook's error), as it may be stored."""
        args = self.decider.info(rec).arguments
        scrub = self._scrub(rec.tool, args)
        return clean_message(message, args, scrub.secrets if scrub else None, 300)

    def _scrub(self, tool: str, arguments: Mapping[str, Any] | None) -> OutcomeScrub | None:
        """What the policy redacts of a call, to be kept out of its result and error."""
        if self.rules is None:
            return None
        policy = self.rules.policy
        key = self.keys.key
        return OutcomeScrub.build(
            arguments,
            policy.redaction_rules(tool),
            policy.result_redaction_rules(tool),
            key=key.digest_key if key is not None else None,
        )
