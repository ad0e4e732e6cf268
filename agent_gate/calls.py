"""Values that cross the boundary between the accumulator and the gate.

The accumulator produces ``ToolCall``s and one ``Terminal``; the gate, the ledger
and the CLI consume them. Keeping these in a module of their own lets the gate
depend on the *shape* of a finished call without importing any provider code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class CallStatus(StrEnum):
    """How far a call got on the wire; only ``COMPLETE`` calls may ever run."""

    COMPLETE = "complete"
    """The provider's argument-completion signal arrived and the arguments parsed."""
    INCOMPLETE = "incomplete"
    """The arguments never completed (truncated, max tokens, failed response...)."""
    PROVIDER_EXECUTED = "provider_executed"
    """The provider ran it itself (web search, MCP...): never handed to an executor."""
    REJECTED = "rejected"
    """The stream was anomalous for this call (see ``reason``): never executed."""


JSON_CALL_KINDS = frozenset({"function", "mcp_approval"})
"""Call kinds whose argument text is a JSON object (others carry free text):
function calls and hosted MCP approval requests (``providers.events.MCP_APPROVAL``,
spelled out here so that this module imports no provider code)."""


class TerminalKind(StrEnum):
    """The response's end state: a finished call is not a finished response."""

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class Terminal:
    """How the response ended; ``reason`` is spelled as the provider spells it."""

    kind: TerminalKind
    reason: str | None = None

    def __str__(self) -> str:
        if self.kind is TerminalKind.INCOMPLETE and self.reason:
            return f"incomplete:{self.reason}"
        return self.kind.value

    @property
    def succeeded(self) -> bool:
        return self.kind is TerminalKind.COMPLETED


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as the stream delivered it.

    ``arguments`` is the parsed JSON object only when ``status`` is COMPLETE and the
    call is a JSON function call; ``raw_arguments`` is the frozen argument text (or
    the free-text input of a custom tool call) and is kept so that the ledger can
    hash exactly what the model sent.
    """

    call_id: str
    name: str
    status: CallStatus
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None
    reason: str | None = None
    kind: str = "function"
    index: int = 0
    provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def complete(self) -> bool:
        return self.status is CallStatus.COMPLETE
