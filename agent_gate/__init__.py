"""agent-gate: strict SSE framing, complete tool calls, policy checks and an
at-most-once ledger between a streaming LLM response and an agent's tools."""

from __future__ import annotations

from agent_gate.errors import AgentGateError

__all__ = ["AgentGateError"]
