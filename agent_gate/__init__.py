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

from agent_gate._lazy import exports_of

# The public names, each imported here for type checkers and the docs, and named in
# ``__all__`` (which they, ruff and the API reference read statically). At run time a
# name is imported from its module when first used (``_lazy.exports_of`` reads the
# module of each off these imports: no third list), so that ``import agent_gate.sse``
# (or the CLI's help) does not pay for jsonschema, pydantic and SQLAlchemy.
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
        AgentGateError,
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

__getattr__, __dir__ = exports_of(__name__, __file__, globals())
