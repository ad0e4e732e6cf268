"""The state table is the one DESIGN.md draws, and nothing else."""

from __future__ import annotations

import pytest

from agent_gate.ledger import TERMINAL, TRANSITIONS, CallState, Event, IllegalTransition
from agent_gate.ledger.states import next_state

S, E = CallState, Event

DESIGN = {
    (S.RECEIVED, E.REJECT): S.REJECTED,
    (S.RECEIVED, E.REQUIRE_APPROVAL): S.AWAITING_APPROVAL,
    (S.AWAITING_APPROVAL, E.APPROVE): S.AUTHORIZED,
    (S.AWAITING_APPROVAL, E.DENY): S.REJECTED,
    # An approver's edit: the call's new version waits, approved (tests/gate/test_edit.py).
    (S.AWAITING_APPROVAL, E.EDIT): S.AWAITING_APPROVAL,
    (S.RECEIVED, E.ALLOW): S.AUTHORIZED,
    (S.RECEIVED, E.MARK_INCOMPLETE): S.INCOMPLETE,
    (S.AUTHORIZED, E.CLAIM): S.EXECUTING,
    # A claim that re-checks a call it did not just decide
    # (tests/gate/test_driver_claim_recheck.py).
    (S.AUTHORIZED, E.REJECT): S.REJECTED,
    (S.AUTHORIZED, E.REQUIRE_APPROVAL): S.AWAITING_APPROVAL,
    (S.EXECUTING, E.SUCCEED): S.SUCCEEDED,
    (S.EXECUTING, E.FAIL): S.FAILED,
    (S.EXECUTING, E.LOSE): S.IN_DOUBT,
    (S.IN_DOUBT, E.RETRY): S.AUTHORIZED,
    (S.IN_DOUBT, E.SETTLE_SUCCEEDED): S.SUCCEEDED,
    (S.IN_DOUBT, E.SETTLE_FAILED): S.FAILED,
}


def test_table_is_exactly_the_design() -> None:
    assert dict(TRANSITIONS) == DESIGN


def test_terminal_states_have_no_way_out_and_in_doubt_is_not_terminal() -> None:
    assert {S.SUCCEEDED, S.FAILED, S.REJECTED, S.INCOMPLETE} == TERMINAL
    for state in TERMINAL:
        for event in Event:
            with pytest.raises(IllegalTransition):
                next_state(state, event)
    assert not S.IN_DOUBT.terminal


def test_nothing_returns_from_executing_to_authorized() -> None:
    # A call that may have run can only become runnable again through in_doubt.
    assert all(
        target is not S.AUTHORIZED for (src, _), target in TRANSITIONS.items()
        if src is S.EXECUTING
    )


def test_illegal_transition_names_state_and_event() -> None:
    with pytest.raises(IllegalTransition, match="no transition from 'received' on 'claim'"):
        next_state(S.RECEIVED, E.CLAIM)


def test_ran_says_whether_the_tool_ran() -> None:
    assert S.SUCCEEDED.ran is True and S.FAILED.ran is True
    assert S.IN_DOUBT.ran is None and S.EXECUTING.ran is None
    assert S.REJECTED.ran is False and S.INCOMPLETE.ran is False and S.AUTHORIZED.ran is False
