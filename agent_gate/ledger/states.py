"""The state machine of one tool call: every state, every transition, in one table.

Theory of operation
===================

A tool call's row in the ledger moves through the states below, and only along
the arrows of ``TRANSITIONS``. Nothing else in agent-gate changes a call's state:
the gate asks ``agent_gate.ledger.store`` to apply an ``Event``, the store looks
the arrow up here, and if there is none the request is a bug (``IllegalTransition``),
not a race.

    received --REJECT-----------> rejected             schema / unknown tool / policy deny
    received --REQUIRE_APPROVAL-> awaiting_approval --APPROVE--> authorized
                                                    --DENY-----> rejected
    received --ALLOW------------> authorized
    received --MARK_INCOMPLETE--> incomplete           arguments or response never completed
    authorized --CLAIM----------> executing            committed before the tool runs
    authorized --REJECT---------> rejected             re-checked at the claim: arguments
                                                       changed, or the claiming policy denies
    authorized --REQUIRE_APPROVAL> awaiting_approval   the claiming policy wants a person
    executing --SUCCEED---------> succeeded
    executing --FAIL------------> failed
    executing --LOSE------------> in_doubt             owner died, lease expired, outcome unknown
    in_doubt --RETRY------------> authorized           retry-safe tool, or the write did not happen
    in_doubt --SETTLE_SUCCEEDED-> succeeded            reconcile hook, operator, late outcome
    in_doubt --SETTLE_FAILED----> failed

Rules that make the table safe under many processes:

1. Every arrow is applied as one committed compare-and-set:
   ``UPDATE tool_calls SET state=new, version=version+1 ... WHERE id=? AND state=old
   AND version=?``. Whoever's update matches one row won; everyone else lost the race
   and gets the row as it is now, and must act on *that* state, never on the one it
   read before. There is no read-modify-write anywhere else.
2. ``executing`` is committed (and, on SQLite, fsynced) *before* the tool runs. A
   process that dies while the tool runs therefore always leaves ``executing``
   behind, never a silently forgotten call.
3. ``executing`` carries a lease (owner id + expiry). The owner renews the expiry
   while the tool runs; a renewal is not a transition and does not bump ``version``,
   so the owner's final SUCCEED/FAIL still matches the version it claimed with.
4. Nothing ever goes from ``executing`` back to ``authorized``. A call whose owner is
   gone becomes ``in_doubt`` first, and only RETRY (allowed when the tool is
   retry-safe, or when a reconcile hook or an operator says the write did not
   happen) makes it runnable again, as a new attempt.
5. A claim that did not follow its own decision (a resume, a replay, a retry) re-checks
   what it claims: the stored arguments must still hash to ``args_hash`` and the
   claiming gate's policy must still allow the call, else REJECT or REQUIRE_APPROVAL.
6. Terminal states have no way out: seeing the same call again returns what is
   stored. A late outcome (the owner finished after its lease was judged dead) is a
   SETTLE of ``in_doubt`` for the same attempt, never an overwrite of a newer one.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from agent_gate.errors import AgentGateError

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "CallState",
    "Event",
    "IllegalTransition",
    "next_state",
]


class CallState(StrEnum):
    """Where one tool call stands; stored as these strings in ``tool_calls.state``."""

    RECEIVED = "received"
    AWAITING_APPROVAL = "awaiting_approval"
    AUTHORIZED = "authorized"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    IN_DOUBT = "in_doubt"
    INCOMPLETE = "incomplete"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def ran(self) -> bool | None:
        """Did the tool run? ``None`` means nobody knows (in doubt, or running now)."""
        if self in (CallState.SUCCEEDED, CallState.FAILED):
            return True
        if self in (CallState.IN_DOUBT, CallState.EXECUTING):
            return None
        return False


class Event(StrEnum):
    """What happened to a call; the audit trail records these names."""

    REJECT = "reject"
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    APPROVE = "approve"
    DENY = "deny"
    MARK_INCOMPLETE = "mark_incomplete"
    CLAIM = "claim"
    SUCCEED = "succeed"
    FAIL = "fail"
    LOSE = "lose"
    RETRY = "retry"
    SETTLE_SUCCEEDED = "settle_succeeded"
    SETTLE_FAILED = "settle_failed"


S = CallState
E = Event

TRANSITIONS: Mapping[tuple[CallState, Event], CallState] = MappingProxyType(
    {
        (S.RECEIVED, E.REJECT): S.REJECTED,
        (S.RECEIVED, E.ALLOW): S.AUTHORIZED,
        (S.RECEIVED, E.REQUIRE_APPROVAL): S.AWAITING_APPROVAL,
        (S.RECEIVED, E.MARK_INCOMPLETE): S.INCOMPLETE,
        (S.AWAITING_APPROVAL, E.APPROVE): S.AUTHORIZED,
        (S.AWAITING_APPROVAL, E.DENY): S.REJECTED,
        (S.AUTHORIZED, E.CLAIM): S.EXECUTING,
        (S.AUTHORIZED, E.REJECT): S.REJECTED,
        (S.AUTHORIZED, E.REQUIRE_APPROVAL): S.AWAITING_APPROVAL,
        (S.EXECUTING, E.SUCCEED): S.SUCCEEDED,
        (S.EXECUTING, E.FAIL): S.FAILED,
        (S.EXECUTING, E.LOSE): S.IN_DOUBT,
        (S.IN_DOUBT, E.RETRY): S.AUTHORIZED,
        (S.IN_DOUBT, E.SETTLE_SUCCEEDED): S.SUCCEEDED,
        (S.IN_DOUBT, E.SETTLE_FAILED): S.FAILED,
    }
)

TERMINAL: frozenset[CallState] = frozenset(
    {S.SUCCEEDED, S.FAILED, S.REJECTED, S.INCOMPLETE}
)
"""States no event leaves. ``in_doubt`` is *not* terminal: it waits to be settled."""

del S, E


class IllegalTransition(AgentGateError):
    """Code asked for an arrow the table does not have: a bug, never a race."""

    def __init__(self, state: CallState, event: Event) -> None:
        super().__init__(f"no transition from {state.value!r} on {event.value!r}")
        self.state = state
        self.event = event


def next_state(state: CallState, event: Event) -> CallState:
    """The state ``event`` moves a call in ``state`` to, or ``IllegalTransition``."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def _check_table() -> None:
    # Terminal states must have no outgoing arrows; every state must be reachable.
    # Checked at import so that an edit to the table cannot ship inconsistent.
    sources = {s for s, _ in TRANSITIONS}
    if sources & TERMINAL:
        raise AssertionError("a terminal state has an outgoing transition")
    if {CallState.RECEIVED} | set(TRANSITIONS.values()) != set(CallState):
        raise AssertionError("a state cannot be reached")


_check_table()
