"""The gate: a complete tool call in, at most one execution, an outcome out.

``Gate.execute`` drives one call through the ledger's state machine
(``agent_gate.ledger.states``): record it, validate it, authorize it, commit
``executing`` with a lease, run the tool, commit the outcome. ``Gate.run`` does
that for every call of a streamed response as the calls complete.

One job per module, arrows pointing down:

* ``facade``   the ``Gate`` and its public methods only
* ``stream``   a response's events in, drivers out (sans-IO core of ``run``/``arun``)
* ``driver``   one call walked through its states, one compare-and-set at a time
* ``finish``   what a tool run, a reconcile hook or an operator produced, committed
* ``runner``   tools run on threads or the event loop; leases kept alive meanwhile
* ``decide``   schema and policy into one ``Ruling``; custom ``Authorizer``
* ``admission`` the call as handed in, made into the one value judged and kept
* ``outcome``  ``Outcome``, ``RunResult``, ``Blocker``; ``render`` their provider forms
* ``next_input``  the assistant turn and the results to send back, per provider
* ``mcp_approval``  hosted MCP approval requests: tools that answer, never run
* ``waiting``  ``pending``/``wait``/``await_decision``: code that waits for a person
* ``desk``     a person's answer to a waiting call (approve, deny), ledger only
* ``reasons``  the reason codes stored with each call; ``errors`` the gate's errors

The names below resolve on first use, so that importing one module of the package
(``desk``, which ``agent-gate approve`` uses) does not import the whole gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_gate._lazy import exports

if TYPE_CHECKING:
    from agent_gate.errors import (
        AmbiguousCall,
        ApprovalRefused,
        GateUsageError,
        NotAwaitingApproval,
        NotInDoubt,
        OutcomeUnknown,
    )
    from agent_gate.gate.decide import Authorizer, Decision, Verdict
    from agent_gate.gate.facade import (
        DEFAULT_APPROVAL_TTL,
        DEFAULT_LEASE_SECONDS,
        DEFAULT_MAX_RESULT_BYTES,
        CallOptions,
        Gate,
        RunOptions,
    )
    from agent_gate.gate.outcome import Blocker, Outcome, RunResult
    from agent_gate.gate.render import render_tool_result
    from agent_gate.gate.runner import current_call
    from agent_gate.gate.waiting import Answer, AnswerStatus
    from agent_gate.ledger.reasons import ReasonCode

_LAZY: dict[str, str] = {
    "AmbiguousCall": "agent_gate.errors",
    "Answer": "agent_gate.gate.waiting",
    "AnswerStatus": "agent_gate.gate.waiting",
    "ApprovalRefused": "agent_gate.errors",
    "Authorizer": "agent_gate.gate.decide",
    "Blocker": "agent_gate.gate.outcome",
    "CallOptions": "agent_gate.gate.facade",
    "DEFAULT_APPROVAL_TTL": "agent_gate.gate.facade",
    "DEFAULT_LEASE_SECONDS": "agent_gate.gate.facade",
    "DEFAULT_MAX_RESULT_BYTES": "agent_gate.gate.facade",
    "Decision": "agent_gate.gate.decide",
    "Gate": "agent_gate.gate.facade",
    "GateUsageError": "agent_gate.errors",
    "NotAwaitingApproval": "agent_gate.errors",
    "NotInDoubt": "agent_gate.errors",
    "Outcome": "agent_gate.gate.outcome",
    "OutcomeUnknown": "agent_gate.errors",
    "ReasonCode": "agent_gate.ledger.reasons",
    "RunOptions": "agent_gate.gate.facade",
    "RunResult": "agent_gate.gate.outcome",
    "Verdict": "agent_gate.gate.decide",
    "current_call": "agent_gate.gate.runner",
    "render_tool_result": "agent_gate.gate.render",
}

__all__ = [
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_RESULT_BYTES",
    "AmbiguousCall",
    "Answer",
    "AnswerStatus",
    "ApprovalRefused",
    "Authorizer",
    "Blocker",
    "CallOptions",
    "Decision",
    "Gate",
    "GateUsageError",
    "NotAwaitingApproval",
    "NotInDoubt",
    "Outcome",
    "OutcomeUnknown",
    "ReasonCode",
    "RunOptions",
    "RunResult",
    "Verdict",
    "current_call",
    "render_tool_result",
]


__getattr__, __dir__ = exports(__name__, _LAZY, globals())
