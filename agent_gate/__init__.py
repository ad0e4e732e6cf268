"""agent-gate: strict SSE framing, complete tool calls, policy checks and an
at-most-once ledger between a streaming LLM response and an agent's tools."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agent_gate.errors import AgentGateError

if TYPE_CHECKING:
    from agent_gate.gate import (
        Authorizer,
        Decision,
        Gate,
        GateUsageError,
        NotInDoubt,
        Outcome,
        OutcomeUnknown,
        ReasonCode,
        RunResult,
        Verdict,
        current_call,
        render_tool_result,
    )
    from agent_gate.ledger import CallState, Ledger
    from agent_gate.schema import (
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
    "CallInfo": "agent_gate.schema",
    "Effect": "agent_gate.schema",
    "Idempotency": "agent_gate.schema",
    "Reconciled": "agent_gate.schema",
    "Reconciliation": "agent_gate.schema",
    "ToolRegistry": "agent_gate.schema",
    "ToolSpec": "agent_gate.schema",
    "CallState": "agent_gate.ledger",
    "Ledger": "agent_gate.ledger",
    "Authorizer": "agent_gate.gate",
    "Decision": "agent_gate.gate",
    "Gate": "agent_gate.gate",
    "Outcome": "agent_gate.gate",
    "OutcomeUnknown": "agent_gate.gate",
    "RunResult": "agent_gate.gate",
    "Verdict": "agent_gate.gate",
    "current_call": "agent_gate.gate",
    "GateUsageError": "agent_gate.gate",
    "NotInDoubt": "agent_gate.gate",
    "ReasonCode": "agent_gate.gate",
    "render_tool_result": "agent_gate.gate",
}

__all__ = [
    "AgentGateError",
    "Authorizer",
    "CallInfo",
    "CallState",
    "Decision",
    "Effect",
    "Gate",
    "GateUsageError",
    "Idempotency",
    "Ledger",
    "NotInDoubt",
    "Outcome",
    "OutcomeUnknown",
    "ReasonCode",
    "Reconciled",
    "Reconciliation",
    "RunResult",
    "ToolRegistry",
    "ToolSpec",
    "Verdict",
    "current_call",
    "render_tool_result",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_gate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
