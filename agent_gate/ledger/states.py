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

What each arrow does to the row's other columns is in ``ARROWS`` (``Effects``), and
the store applies exactly that: every arrow sets ``state``, bumps ``version`` and
writes the reason; every arrow but CLAIM clears the lease; CLAIM starts a new
attempt (``attempt + 1``, the lease taken, ``started_at`` now, the previous
attempt's ``finished_at``/result/error cleared); an arrow into a terminal state
sets ``finished_at``; ALLOW and APPROVE commit the call's quota charges; APPROVE
consumes the approval it names; the outcome arrows store a result or an error.

Which arrow follows from what was *observed* is decided here too, never at a call
site:

* a tool run's end (``RunEnd``) and the tool's effect -> ``RUN_ENDS``: a read that
  times out FAILs (reading twice is harmless), a write that times out, is
  interrupted or cannot tell is LOST (``in_doubt``): whether it took effect is
  unknown. ``LATE_RUN_ENDS``: the same end reported after the call was judged in
  doubt settles it, or (no answer) leaves it in doubt.
* a lease's end (``LeaseEnd``: the owner process is dead, or its lease expired)
  -> ``LEASE_ENDS``: always LOSE, with the reason that says which.
* a reconcile answer (``agent_gate.tools.Reconciliation``) -> ``RECONCILED``:
  the write happened (SETTLE_SUCCEEDED), failed (SETTLE_FAILED) or did not happen
  (RETRY, a new attempt).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from agent_gate.errors import IllegalTransition
from agent_gate.ledger.reasons import ReasonCode

__all__ = [
    "ARROWS",
    "GRANTED",
    "LATE_RUN_ENDS",
    "LEASE_ENDS",
    "RECONCILED",
    "RUN_ENDS",
    "TERMINAL",
    "TRANSITIONS",
    "VERDICTS",
    "Arrow",
    "CallState",
    "Effects",
    "Event",
    "IllegalTransition",
    "LeaseEnd",
    "Observed",
    "RunEnd",
    "arrow",
    "next_state",
    "run_end",
    "verdict_arrow",
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

TERMINAL: frozenset[CallState] = frozenset(
    {S.SUCCEEDED, S.FAILED, S.REJECTED, S.INCOMPLETE}
)
"""States no event leaves. ``in_doubt`` is *not* terminal: it waits to be settled."""


@dataclass(frozen=True, slots=True)
class Effects:
    """What an arrow does to a row's columns besides ``state``, ``version`` and the
    reason (which every arrow writes)."""

    takes_lease: bool = False
    """Sets ``lease_owner``/``lease_expires_ms`` (else both are cleared)."""
    new_attempt: bool = False
    """``attempt + 1``, ``started_at`` now; the last attempt's ``finished_at``,
    ``result*`` and ``error`` cleared."""
    finishes: bool = False
    """Sets ``finished_at`` (the arrow ends in a terminal state)."""
    charges: bool = False
    """Commits the call's quota charges with the arrow (a claim: only those a refund
    gave back, ``flows.apply_ruling``)."""
    refunds: bool = False
    """Gives the call's quota charges back: it ends rejected, or goes back to
    ``authorized`` because its write did not happen (``KEEPS_CHARGES``: not when
    it is only retried, and may have applied)."""
    consumes_approval: bool = False
    """Uses up the approval the ruling names (``approvals.consume``)."""
    outcome: bool = False
    """Stores what the tool (or whoever settled it) reported: ``result*`` or ``error``."""


class Arrow(NamedTuple):
    """One legal transition: where it leads and what it does to the row."""

    target: CallState
    effects: Effects


_MOVE = Effects()
_END = Effects(finishes=True)
_RUN = Effects(takes_lease=True, new_attempt=True)
_OUTCOME = Effects(finishes=True, outcome=True)

ARROWS: Mapping[tuple[CallState, Event], Arrow] = MappingProxyType(
    {
        (S.RECEIVED, E.REJECT): Arrow(S.REJECTED, _END),
        (S.RECEIVED, E.ALLOW): Arrow(S.AUTHORIZED, Effects(charges=True)),
        (S.RECEIVED, E.REQUIRE_APPROVAL): Arrow(S.AWAITING_APPROVAL, _MOVE),
        (S.RECEIVED, E.MARK_INCOMPLETE): Arrow(S.INCOMPLETE, _END),
        (S.AWAITING_APPROVAL, E.APPROVE): Arrow(
            S.AUTHORIZED, Effects(charges=True, consumes_approval=True)
        ),
        (S.AWAITING_APPROVAL, E.DENY): Arrow(S.REJECTED, _END),
        (S.AUTHORIZED, E.CLAIM): Arrow(
            S.EXECUTING, Effects(takes_lease=True, new_attempt=True, charges=True)
        ),
        (S.AUTHORIZED, E.REJECT): Arrow(S.REJECTED, Effects(finishes=True, refunds=True)),
        (S.AUTHORIZED, E.REQUIRE_APPROVAL): Arrow(S.AWAITING_APPROVAL, _MOVE),
        (S.EXECUTING, E.SUCCEED): Arrow(S.SUCCEEDED, _OUTCOME),
        (S.EXECUTING, E.FAIL): Arrow(S.FAILED, _OUTCOME),
        (S.EXECUTING, E.LOSE): Arrow(S.IN_DOUBT, Effects(outcome=True)),
        (S.IN_DOUBT, E.RETRY): Arrow(S.AUTHORIZED, Effects(refunds=True)),
        (S.IN_DOUBT, E.SETTLE_SUCCEEDED): Arrow(S.SUCCEEDED, _OUTCOME),
        (S.IN_DOUBT, E.SETTLE_FAILED): Arrow(S.FAILED, _OUTCOME),
    }
)
"""Every legal arrow with its column effects; ``TRANSITIONS`` is its state view."""

KEEPS_CHARGES: frozenset[str] = frozenset({ReasonCode.RETRIED})
"""Reason codes of a refunding arrow that keeps the charges: an in-doubt call of an
idempotent tool retried without knowing whether its write happened may have spent
the budget; only one found ``not_applied`` gives it back."""

TRANSITIONS: Mapping[tuple[CallState, Event], CallState] = MappingProxyType(
    {key: arrow.target for key, arrow in ARROWS.items()}
)
"""The legal arrows: (state, event) -> the state it leads to."""

del S, E


# ------------------------------------------------------------ what was observed


class Observed(NamedTuple):
    """The arrow an observation calls for, and the reason code it is recorded with."""

    event: Event
    code: ReasonCode | None


class RunEnd(StrEnum):
    """How one run of a tool ended, as the worker that ran it saw it."""

    OK = "ok"
    """It returned a value."""
    ERROR = "error"
    """It raised: it ran, and failed."""
    UNKNOWN = "unknown"
    """It says it cannot tell whether it took effect."""
    TIMEOUT = "timeout"
    """It did not return within its timeout."""
    INTERRUPTED = "interrupted"
    """The worker was interrupted (cancelled, a signal) while it ran."""


RUN_ENDS: Mapping[tuple[RunEnd, bool], Observed] = MappingProxyType(
    {
        # (how the run ended, the tool only reads) -> arrow from ``executing``
        (RunEnd.OK, True): Observed(Event.SUCCEED, None),
        (RunEnd.OK, False): Observed(Event.SUCCEED, None),
        (RunEnd.ERROR, True): Observed(Event.FAIL, ReasonCode.TOOL_ERROR),
        (RunEnd.ERROR, False): Observed(Event.FAIL, ReasonCode.TOOL_ERROR),
        # A read that timed out did nothing worth doubting; a write may have landed.
        (RunEnd.TIMEOUT, True): Observed(Event.FAIL, ReasonCode.TIMEOUT),
        (RunEnd.TIMEOUT, False): Observed(Event.LOSE, ReasonCode.TIMEOUT),
        (RunEnd.INTERRUPTED, True): Observed(Event.LOSE, ReasonCode.INTERRUPTED),
        (RunEnd.INTERRUPTED, False): Observed(Event.LOSE, ReasonCode.INTERRUPTED),
        (RunEnd.UNKNOWN, True): Observed(Event.LOSE, ReasonCode.OUTCOME_UNKNOWN),
        (RunEnd.UNKNOWN, False): Observed(Event.LOSE, ReasonCode.OUTCOME_UNKNOWN),
    }
)
"""A run's end -> the arrow out of ``executing``. ``OK``'s code is the kept result's
own (None, or why only the result's type and size were kept)."""

LATE_RUN_ENDS: Mapping[RunEnd, Observed] = MappingProxyType(
    {
        RunEnd.OK: Observed(Event.SETTLE_SUCCEEDED, ReasonCode.LATE_OUTCOME),
        RunEnd.ERROR: Observed(Event.SETTLE_FAILED, ReasonCode.LATE_OUTCOME),
    }
)
"""A run's end reported after its call was judged in doubt (same attempt) -> the
arrow out of ``in_doubt``; an end not here leaves the call in doubt."""


class LeaseEnd(StrEnum):
    """Why a running call's lease is over although its owner never reported."""

    OWNER_DEAD = "owner_dead"
    """The owner process is gone (same host, its pid no longer runs)."""
    LEASE_EXPIRED = "lease_expired"
    """The owner stopped renewing: the expiry passed by the database clock."""


LEASE_ENDS: Mapping[LeaseEnd, Observed] = MappingProxyType(
    {
        LeaseEnd.OWNER_DEAD: Observed(Event.LOSE, ReasonCode.OWNER_DEAD),
        LeaseEnd.LEASE_EXPIRED: Observed(Event.LOSE, ReasonCode.LEASE_EXPIRED),
    }
)
"""A lease's end -> the arrow out of ``executing``: never a re-run, always in doubt."""

RECONCILED: Mapping[str, Observed] = MappingProxyType(
    {
        "succeeded": Observed(Event.SETTLE_SUCCEEDED, ReasonCode.RECONCILED),
        "failed": Observed(Event.SETTLE_FAILED, ReasonCode.RECONCILED),
        "not_applied": Observed(Event.RETRY, ReasonCode.RECONCILED),
    }
)
"""A reconcile hook's answer (``agent_gate.tools.Reconciliation``, a ``StrEnum``, so
its members are these keys) -> the arrow out of ``in_doubt``. Keyed by value so
that the ledger does not import the tool layer. An operator's answer
(``Gate.resolve``) takes the same arrow with ``ReasonCode.RESOLVED``."""

VERDICTS: Mapping[tuple[CallState, str], Observed] = MappingProxyType(
    {
        # a new call decided: the arrow out of ``received``
        (CallState.RECEIVED, "allow"): Observed(Event.ALLOW, ReasonCode.ALLOWED),
        (CallState.RECEIVED, "approve"): Observed(
            Event.REQUIRE_APPROVAL, ReasonCode.AWAITING_APPROVAL
        ),
        (CallState.RECEIVED, "deny"): Observed(Event.REJECT, ReasonCode.POLICY_DENIED),
        # re-checked when claimed: the arrow out of ``authorized``
        (CallState.AUTHORIZED, "allow"): Observed(Event.CLAIM, None),
        (CallState.AUTHORIZED, "approve"): Observed(
            Event.REQUIRE_APPROVAL, ReasonCode.AWAITING_APPROVAL
        ),
        (CallState.AUTHORIZED, "deny"): Observed(Event.REJECT, ReasonCode.POLICY_DENIED),
        # decided again when its approval is used: the arrow out of ``awaiting_approval``
        (CallState.AWAITING_APPROVAL, "allow"): Observed(Event.APPROVE, ReasonCode.APPROVED),
        (CallState.AWAITING_APPROVAL, "approve"): Observed(Event.APPROVE, ReasonCode.APPROVED),
        (CallState.AWAITING_APPROVAL, "deny"): Observed(Event.DENY, ReasonCode.POLICY_DENIED),
    }
)
"""A decision's verdict (``agent_gate.policy.Verdict``, a ``StrEnum``, so its members
are these keys) -> the arrow it calls for from the state the call is decided in: the
one mapping of what a policy file or a custom ``Authorizer`` says to a transition.
Keyed by value so that the ledger does not import the policy layer."""




GRANTED: Mapping[CallState, Observed] = MappingProxyType(
    {
        # a new call the policy sends to a person, covered by a live grant it spent
        CallState.RECEIVED: Observed(Event.ALLOW, ReasonCode.GRANTED),
        # a claim re-checked: the policy still asks, the grant that authorized it stands
        CallState.AUTHORIZED: Observed(Event.CLAIM, None),
    }
)
"""A call the policy sends to a person (verdict ``approve``) that a grant covers
(``ledger.grants``) -> the arrow it takes instead of waiting, from the state it is
decided in: the approver's earlier answer stands for it."""


def next_state(state: CallState, event: Event) -> CallState:
    """The state ``event`` moves a call in ``state`` to, or ``IllegalTransition``."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def arrow(state: CallState, event: Event) -> Arrow:
    """The arrow ``event`` takes from ``state`` (target and column effects), or
    ``IllegalTransition``."""
    try:
        return ARROWS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def verdict_arrow(state: CallState, verdict: str) -> Observed:
    """The arrow a decision's ``verdict`` calls for from ``state`` (``received``,
    ``authorized`` at a claim, ``awaiting_approval`` when its approval is used)."""
    try:
        return VERDICTS[(state, str(verdict))]
    except KeyError:
        raise ValueError(f"no verdict {verdict!r} is decided in state {state.value!r}") from None


def run_end(end: RunEnd, *, read: bool) -> Observed:
    """The arrow out of ``executing`` for a run that ended so (``read``: the tool's
    effect, after the policy's overrides, is a read)."""
    return RUN_ENDS[(end, read)]


def _check_table() -> None:
    # Terminal states must have no outgoing arrows; every state must be reachable.
    # Checked at import so that an edit to the table cannot ship inconsistent.
    sources = {s for s, _ in TRANSITIONS}
    if sources & TERMINAL:
        raise AssertionError("a terminal state has an outgoing transition")
    if {CallState.RECEIVED} | set(TRANSITIONS.values()) != set(CallState):
        raise AssertionError("a state cannot be reached")
    # The column effects agree with the states: only ``executing`` holds a lease, an
    # arrow finishes exactly when it ends in a terminal state.
    for (_, event), (target, effects) in ARROWS.items():
        if effects.takes_lease != (target is CallState.EXECUTING):
            raise AssertionError(f"{event.value}: a lease is held in executing only")
        if effects.finishes != (target in TERMINAL):
            raise AssertionError(f"{event.value}: finished_at is set on terminal arrows only")
    # Every observation names an arrow the table has from the state it is made in.
    for observed, source in (
        *((o, CallState.EXECUTING) for o in RUN_ENDS.values()),
        *((o, CallState.EXECUTING) for o in LEASE_ENDS.values()),
        *((o, CallState.IN_DOUBT) for o in LATE_RUN_ENDS.values()),
        *((o, CallState.IN_DOUBT) for o in RECONCILED.values()),
        *((o, state) for state, o in GRANTED.items()),
    ):
        if (source, observed.event) not in ARROWS:
            raise AssertionError(f"no arrow from {source.value} on {observed.event.value}")


_check_table()
