"""The normalized stream events every adapter emits and the accumulator reads.

Each wire protocol correlates and completes tool calls its own way; adapters
translate all of them into this one vocabulary, so that the rules about *when a
call may run* live in one place (``agent_gate.accumulate``) and are not
re-implemented, slightly differently, per provider.

An adapter emits ``ToolCallArgumentsDone`` only when the provider's own
completion signal for that call arrived; everything weaker (a restated argument
string, a block stop that a later event has not yet confirmed) is either a
``ToolCallArgumentsSnapshot`` or nothing at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MCP_APPROVAL = "mcp_approval"
"""The kind of a hosted MCP tool call waiting for the client's approval (OpenAI
Responses ``mcp_approval_request``): its arguments are JSON, its answer is the
client's ``mcp_approval_response``, and nothing runs locally."""


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A call the client must execute was announced."""

    call_id: str
    name: str
    index: int
    kind: str = "function"
    """``function`` (JSON arguments), ``custom`` (free text input), or the item type
    of a call kind agent-gate cannot run (then a ``StreamAnomaly`` follows)."""


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A fragment of a call's argument text, to be concatenated in order."""

    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsSnapshot:
    """The provider restated the whole argument text, but this is not proof of completion.

    OpenAI Responses sends ``function_call_arguments.done`` before the item is
    done; the accumulator uses it only to cross-check the deltas.
    """

    call_id: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDone:
    """The provider's completion signal for one call.

    ``arguments`` is the authoritative full text when the provider restates it
    (it must then agree with the deltas), or ``None`` when the deltas are all
    there is.
    """

    call_id: str
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallCut:
    """The call ended without its completion signal (the provider said why)."""

    call_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ProviderToolCall:
    """A tool the provider runs itself (web search, MCP, code execution...).

    Reported so the gate can audit it; never handed to the client's executor.
    """

    call_id: str
    name: str
    kind: str
    index: int


@dataclass(frozen=True, slots=True)
class StreamAnomaly:
    """The stream broke one of its protocol's correlation rules.

    ``call_ids`` names the calls that can no longer be trusted; they are
    rejected. ``reason`` is a fixed identifier, never payload text.
    """

    reason: str
    call_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Assistant text as it arrives: handed to a listener (a UI), counted, and kept
    in the turn's part ``part`` (field ``field``) when the provider does not restate
    it whole later (``None``: it does, e.g. a Responses message item)."""

    text: str
    part: int | None = None
    field: str = "text"


@dataclass(frozen=True, slots=True)
class TurnPart:
    """A piece of the assistant's turn in the provider's own form, as it must be sent
    back in the next request (a Responses output item, an Anthropic content block, a
    Gemini part). ``position`` orders the pieces; the same position again replaces
    the piece. ``call_id`` marks a client call's piece: its arguments are the call's."""

    position: int
    part: Mapping[str, Any]
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnDelta:
    """Text that grows a field of the turn's piece at ``position`` and is not shown
    (thinking, its signature, a hosted tool's streamed input)."""

    position: int
    field: str
    text: str


@dataclass(frozen=True, slots=True)
class TurnAppend:
    """An object appended to a list field of the turn's piece at ``position``
    (Anthropic's ``citations_delta``: each citation joins its text block's
    ``citations``, which go back with the block)."""

    position: int
    field: str
    value: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A keep-alive (Anthropic ``ping``, an empty data event): not progress."""


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event type this adapter does not know; counted and ignored."""

    type: str


@dataclass(frozen=True, slots=True)
class ResponseCompleted:
    """The response ended successfully."""


@dataclass(frozen=True, slots=True)
class ResponseIncomplete:
    """The response ended early; ``reason`` is spelled as the provider spells it."""

    reason: str


@dataclass(frozen=True, slots=True)
class ResponseFailed:
    """The response failed; ``error`` is the provider's error code or type, if any."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class StreamTruncated:
    """The transport ended without any terminal event."""


TerminalEvent = ResponseCompleted | ResponseIncomplete | ResponseFailed | StreamTruncated

StreamEvent = (
    ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallArgumentsSnapshot
    | ToolCallArgumentsDone
    | ToolCallCut
    | ProviderToolCall
    | StreamAnomaly
    | TextDelta
    | TurnPart
    | TurnDelta
    | TurnAppend
    | Heartbeat
    | UnknownEvent
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
    | StreamTruncated
)

TERMINAL_EVENTS = (ResponseCompleted, ResponseIncomplete, ResponseFailed, StreamTruncated)
