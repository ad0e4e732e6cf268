"""What the durable-engine adapters (``dbos``, ``celery``) share: a call's outcome as the
plain record an engine stores, the error a step or task raises for a call in doubt, and
the short wait for a call another worker is still running.

An engine runs a step or a task *at least once*: after a crash it runs the code again.
The gate turns that into *at most once, or in doubt*: the second run finds the call in
the ledger, and gets its recorded outcome (it finished), runs it (it never started),
or learns that nobody can tell whether it wrote (its worker died while it ran). That
last case must reach the engine as a failure the engine does not retry on its own:
``CallInDoubt`` (defined with every other error in ``agent_gate.errors``, named
here too for the adapters and their users). It pickles with its ids (DBOS stores a
step's error by pickling it; Celery rebuilds an error from its type and arguments),
and its message names ids only.

This module imports neither engine, so both adapters and their users can share it
without installing the other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from agent_gate.errors import CallInDoubt, GateUsageError
from agent_gate.gate import Gate, Outcome
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.states import CallState

__all__ = [
    "CallInDoubt",
    "CallLike",
    "aexecute_when_free",
    "call_mapping",
    "execute_when_free",
    "outcome_from",
    "outcome_record",
]

CallLike = Mapping[str, Any]
"""A call as an engine's code hands it over: ``name``, ``arguments``, and ``call_id``
when the model gave one (else the engine's position of the call names it)."""

RUNNING_POLL_MAX = 2.0
"""Seconds between looks at a call another live worker runs, doubling up to this."""


def call_mapping(call: CallLike, call_id: str) -> dict[str, Any]:
    """The mapping ``Gate.execute`` takes, named ``call_id`` unless the call names itself."""
    if not isinstance(call, Mapping):
        raise GateUsageError("a call is a mapping with name, arguments and maybe call_id")
    own = call.get("call_id")
    if own is not None and (not isinstance(own, str) or not own):
        raise GateUsageError("a call's call_id, when given, is a non-empty string")
    return {**call, "call_id": own or call_id}


def outcome_record(outcome: Outcome) -> dict[str, Any]:
    """The outcome as plain JSON data an engine stores (DBOS's step output, Celery's
    result backend): everything but the in-memory exception."""
    return {
        "task_id": outcome.task_id,
        "call_id": outcome.call_id,
        "tool": outcome.tool,
        "state": outcome.state.value,
        "replayed": outcome.replayed,
        "code": outcome.code,
        "reason": outcome.reason,
        "result": outcome.result,
        "error": dict(outcome.error) if outcome.error is not None else None,
        "attempt": outcome.attempt,
        "duplicate_of": outcome.duplicate_of,
        "result_omitted": outcome.result_omitted,
        "arguments": dict(outcome.arguments) if outcome.arguments is not None else None,
    }


def outcome_from(record: Mapping[str, Any]) -> Outcome:
    """The ``Outcome`` an engine's stored record describes."""
    fields = dict(record)
    fields["state"] = CallState(fields["state"])
    return Outcome(**fields)


def execute_when_free(gate: Gate, task_id: str, call: CallLike, *, patience: float) -> Outcome:
    """``Gate.execute``, waiting up to ``patience`` seconds while another live worker
    runs the call (an engine that delivered the step twice): its lease ends with an
    outcome, or in doubt once that worker is gone. Returns the last outcome seen.

    ``CallInDoubt`` when the call is in doubt after the gate's own settling (a
    reconcile hook, a retry-safe tool) had its say.
    """
    deadline = time.monotonic() + max(patience, 0.0)
    pause = 0.05
    while True:
        outcome = gate.execute(task_id, call)
        wait = _next_look(outcome, deadline, pause)
        if wait is None:
            return outcome
        time.sleep(wait)
        pause = min(pause * 2, RUNNING_POLL_MAX)


async def aexecute_when_free(
    gate: Gate, task_id: str, call: CallLike, *, patience: float
) -> Outcome:
    """``execute_when_free`` for async code: ``Gate.aexecute``, async pauses."""
    deadline = time.monotonic() + max(patience, 0.0)
    pause = 0.05
    while True:
        outcome = await gate.aexecute(task_id, call)
        wait = _next_look(outcome, deadline, pause)
        if wait is None:
            return outcome
        await asyncio.sleep(wait)
        pause = min(pause * 2, RUNNING_POLL_MAX)


def _next_look(outcome: Outcome, deadline: float, pause: float) -> float | None:
    """Seconds until the next look at a call another worker runs; None: report it."""
    if outcome.state is CallState.IN_DOUBT:
        raise CallInDoubt(outcome.task_id, outcome.call_id, outcome.code)
    running = outcome.state is CallState.EXECUTING and outcome.code == R.IN_PROGRESS
    left = deadline - time.monotonic()
    return min(pause, left) if running and left > 0 else None
