"""The observation tables and column effects in ``states``, driven over every entry."""

from __future__ import annotations

import pytest

from agent_gate.ledger import CallState, Event, IllegalTransition, Ledger, NewCall
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import (
    ARROWS,
    LATE_RUN_ENDS,
    LEASE_ENDS,
    RECONCILED,
    RUN_ENDS,
    TERMINAL,
    TRANSITIONS,
    LeaseEnd,
    RunEnd,
    arrow,
    run_end,
)
from agent_gate.privacy.results import StoredResult
from agent_gate.schema import Reconciliation

S, E = CallState, Event


@pytest.mark.parametrize("state", list(CallState))
@pytest.mark.parametrize("event", list(Event))
def test_every_pair_is_legal_exactly_per_the_arrows(state: CallState, event: Event) -> None:
    if (state, event) in TRANSITIONS:
        assert arrow(state, event).target is TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalTransition):
            arrow(state, event)


@pytest.mark.parametrize("end", list(RunEnd))
@pytest.mark.parametrize("read", [True, False])
def test_every_run_end_is_mapped_to_an_arrow_out_of_executing(end: RunEnd, read: bool) -> None:
    observed = run_end(end, read=read)
    assert (S.EXECUTING, observed.event) in ARROWS
    assert set(RUN_ENDS) == {(e, r) for e in RunEnd for r in (True, False)}


def test_run_ends_follow_the_gates_rules() -> None:
    # A read that times out FAILs; a write that times out may have landed: in doubt.
    assert run_end(RunEnd.TIMEOUT, read=True) == (E.FAIL, ReasonCode.TIMEOUT)
    assert run_end(RunEnd.TIMEOUT, read=False) == (E.LOSE, ReasonCode.TIMEOUT)
    for read in (True, False):
        assert run_end(RunEnd.OK, read=read).event is E.SUCCEED
        assert run_end(RunEnd.ERROR, read=read) == (E.FAIL, ReasonCode.TOOL_ERROR)
        assert run_end(RunEnd.INTERRUPTED, read=read) == (E.LOSE, ReasonCode.INTERRUPTED)
        assert run_end(RunEnd.UNKNOWN, read=read) == (E.LOSE, ReasonCode.OUTCOME_UNKNOWN)
    # Reported after the call was judged in doubt: only a real answer settles it.
    assert {end: o.event for end, o in LATE_RUN_ENDS.items()} == {
        RunEnd.OK: E.SETTLE_SUCCEEDED, RunEnd.ERROR: E.SETTLE_FAILED,
    }
    assert all((S.IN_DOUBT, o.event) in ARROWS for o in LATE_RUN_ENDS.values())


def test_a_lease_end_always_loses_the_call_with_its_reason() -> None:
    assert set(LEASE_ENDS) == set(LeaseEnd)
    for end, observed in LEASE_ENDS.items():
        assert observed.event is E.LOSE
        assert observed.code == ReasonCode(end.value)


def test_every_reconcile_answer_is_mapped() -> None:
    assert set(RECONCILED) == {r.value for r in Reconciliation}
    assert {r: RECONCILED[r].event for r in Reconciliation} == {
        Reconciliation.SUCCEEDED: E.SETTLE_SUCCEEDED,
        Reconciliation.FAILED: E.SETTLE_FAILED,
        Reconciliation.NOT_APPLIED: E.RETRY,
    }
    assert all((S.IN_DOUBT, o.event) in ARROWS for o in RECONCILED.values())


_PATH_TO = {
    S.RECEIVED: [],
    S.AWAITING_APPROVAL: [E.REQUIRE_APPROVAL],
    S.AUTHORIZED: [E.ALLOW],
    S.EXECUTING: [E.ALLOW, E.CLAIM],
    S.IN_DOUBT: [E.ALLOW, E.CLAIM, E.LOSE],
}


def _take(ledger: Ledger, rec: CallRecord, event: Event) -> CallRecord:
    if event is E.CLAIM:
        tr = ledger.claim(rec, owner="w", lease_ms=60_000)
    elif ARROWS[(rec.state, event)].effects.outcome:
        tr = ledger.finish(rec, event, actor="w", result=StoredResult.encode({"ok": 1}, 100))
    else:
        tr = ledger.transition(rec, event, actor="w")
    assert tr.won
    return tr.record


@pytest.mark.parametrize(("source", "event"), sorted(ARROWS, key=str))
def test_the_store_applies_each_arrows_column_effects(
    db_url: str, source: CallState, event: Event
) -> None:
    target, effects = ARROWS[(source, event)]
    with Ledger(db_url) as ledger:
        rec, _ = ledger.record(NewCall(
            task_id="t", call_id="c", idem_key="call:c", tool="send", effect="write",
            idempotency="none", args_hash="h", arguments={"a": 1},
        ))
        for step in _PATH_TO[source]:
            rec = _take(ledger, rec, step)
        before = rec
        after = _take(ledger, rec, event)
    assert after.state is target and after.version == before.version + 1
    assert (after.lease_owner is not None) is effects.takes_lease
    assert (after.lease_expires_ms is not None) is effects.takes_lease
    assert after.attempt == before.attempt + (1 if effects.new_attempt else 0)
    if effects.new_attempt:
        assert after.started_at is not None and after.finished_at is None
        assert after.result is None and after.error is None
    if effects.finishes:
        assert after.finished_at is not None and target in TERMINAL
    elif not effects.new_attempt:
        assert after.finished_at == before.finished_at
    if effects.outcome:
        assert after.result == {"ok": 1}
