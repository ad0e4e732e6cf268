"""agent-gate: strict SSE framing, complete tool calls, policy checks and an
at-most-once ledger between a streaming LLM response and an agent's tools.

The names below are the curated public API (pinned by ``tests/test_public_api.py``):
what an application needs to gate its tools, read a stream, write a policy and
catch what the gate refuses. Everything else is reachable from its subpackage
(``agent_gate.sse``, ``agent_gate.providers``, ``agent_gate.policy``,
``agent_gate.ledger``, ``agent_gate.transport``), whose ``__all__`` is its own API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_gate._lazy import exports
from agent_gate.errors import AgentGateError

if TYPE_CHECKING:
    from agent_gate.accumulate import (
        DispatchMode,
    )
    from agent_gate.authorize import (
        PolicyAuthorizer,
    )
    from agent_gate.autodetect import (
        accumulator,
    )
    from agent_gate.calls import (
        Terminal,
        ToolCall,
    )
    from agent_gate.errors import (
        AccumulatorError,
        AmbiguousCall,
        AnswerMismatch,
        ApprovalRefused,
        ArgumentsInvalid,
        GateUsageError,
        LedgerConfigError,
        NotAwaitingApproval,
        NotInDoubt,
        OutcomeUnknown,
        PolicyError,
        ProviderError,
        SealKeyMissing,
        SSEError,
        StreamError,
        TaskContextConflict,
    )
    from agent_gate.gate import (
        Authorizer,
        Blocker,
        CallOptions,
        Decision,
        Gate,
        Outcome,
        ReasonCode,
        RunOptions,
        RunResult,
        Verdict,
        current_call,
        render_tool_result,
    )
    from agent_gate.gate.live import (
        arun_live,
        run_live,
    )
    from agent_gate.ledger import (
        CallState,
        Ledger,
    )
    from agent_gate.policy import (
        Policy,
        Principal,
        TaskScope,
    )
    from agent_gate.sse import (
        ServerSentEvent,
        SSEDecoder,
    )
    from agent_gate.tools import (
        CallInfo,
        Effect,
        Idempotency,
        Reconciled,
        Reconciliation,
        ToolRegistry,
        ToolSpec,
    )

# Public names resolved on first use, so that ``import agent_gate.sse`` (or the CLI's
# help) does not pay for jsonschema, pydantic and SQLAlchemy.
_LAZY: dict[str, str] = {
    # the gate
    "Gate": "agent_gate.gate",
    "CallOptions": "agent_gate.gate",
    "RunOptions": "agent_gate.gate",
    "Outcome": "agent_gate.gate",
    "RunResult": "agent_gate.gate",
    "Blocker": "agent_gate.gate",
    "render_tool_result": "agent_gate.gate",
    "current_call": "agent_gate.gate",
    "Authorizer": "agent_gate.gate",
    "Decision": "agent_gate.gate",
    "Verdict": "agent_gate.gate",
    "ReasonCode": "agent_gate.gate",
    "GateUsageError": "agent_gate.errors",
    "OutcomeUnknown": "agent_gate.errors",
    "NotInDoubt": "agent_gate.errors",
    "AmbiguousCall": "agent_gate.errors",
    "ApprovalRefused": "agent_gate.errors",
    "NotAwaitingApproval": "agent_gate.errors",
    "AnswerMismatch": "agent_gate.errors",
    # tools
    "ToolRegistry": "agent_gate.tools",
    "ToolSpec": "agent_gate.tools",
    "CallInfo": "agent_gate.tools",
    "Effect": "agent_gate.tools",
    "Idempotency": "agent_gate.tools",
    "Reconciled": "agent_gate.tools",
    "Reconciliation": "agent_gate.tools",
    "ArgumentsInvalid": "agent_gate.errors",
    # policy
    "Policy": "agent_gate.policy",
    "Principal": "agent_gate.policy",
    "TaskScope": "agent_gate.policy",
    "PolicyError": "agent_gate.errors",
    "PolicyAuthorizer": "agent_gate.authorize",
    # the ledger
    "Ledger": "agent_gate.ledger",
    "CallState": "agent_gate.ledger",
    "TaskContextConflict": "agent_gate.errors",
    "LedgerConfigError": "agent_gate.errors",
    "SealKeyMissing": "agent_gate.errors",
    # streams
    "ToolCall": "agent_gate.calls",
    "Terminal": "agent_gate.calls",
    "accumulator": "agent_gate.autodetect",
    "DispatchMode": "agent_gate.accumulate",
    "AccumulatorError": "agent_gate.errors",
    "ServerSentEvent": "agent_gate.sse",
    "SSEDecoder": "agent_gate.sse",
    "SSEError": "agent_gate.errors",
    "ProviderError": "agent_gate.errors",
    "StreamError": "agent_gate.errors",
    "run_live": "agent_gate.gate.live",
    "arun_live": "agent_gate.gate.live",
}

__all__ = [
    "AccumulatorError",
    "AgentGateError",
    "AmbiguousCall",
    "AnswerMismatch",
    "ApprovalRefused",
    "ArgumentsInvalid",
    "Authorizer",
    "Blocker",
    "CallInfo",
    "CallOptions",
    "CallState",
    "Decision",
    "DispatchMode",
    "Effect",
    "Gate",
    "GateUsageError",
    "Idempotency",
    "Ledger",
    "LedgerConfigError",
    "NotAwaitingApproval",
    "NotInDoubt",
    "Outcome",
    "OutcomeUnknown",
    "Policy",
    "PolicyAuthorizer",
    "PolicyError",
    "Principal",
    "ProviderError",
    "ReasonCode",
    "Reconciled",
    "Reconciliation",
    "RunOptions",
    "RunResult",
    "SSEDecoder",
    "SSEError",
    "SealKeyMissing",
    "ServerSentEvent",
    "StreamError",
    "TaskContextConflict",
    "TaskScope",
    "Terminal",
    "ToolCall",
    "ToolRegistry",
    "ToolSpec",
    "Verdict",
    "accumulator",
    "arun_live",
    "current_call",
    "render_tool_result",
    "run_live",
]


__getattr__, __dir__ = exports(__name__, _LAZY, globals())
