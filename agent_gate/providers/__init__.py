"""Provider adapters: one module per wire protocol, all emitting the same events.

``adapter_for(name)`` returns a fresh adapter for one response stream; the
accumulator (``agent_gate.accumulate``) drives it. Names: ``openai-responses``,
``openai-chat`` (also Azure OpenAI and OpenAI-compatible servers),
``anthropic``, ``gemini``.
"""

from agent_gate.errors import (
    MalformedEventError,
    ProviderError,
    ReplayConflictError,
    ReplayLimitExceeded,
    UnknownProviderError,
)
from agent_gate.providers.base import ProviderAdapter, WireEvent, WireKind
from agent_gate.providers.events import (
    Heartbeat,
    ProviderToolCall,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    StreamAnomaly,
    StreamEvent,
    StreamTruncated,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallArgumentsDone,
    ToolCallArgumentsSnapshot,
    ToolCallCut,
    ToolCallStarted,
    TurnDelta,
    TurnPart,
    UnknownEvent,
)
from agent_gate.providers.registry import ADAPTERS, AUTO, adapter_for, provider_names
from agent_gate.providers.replay import ReplayGuard

__all__ = [
    "ADAPTERS",
    "AUTO",
    "Heartbeat",
    "MalformedEventError",
    "ProviderAdapter",
    "ProviderError",
    "ProviderToolCall",
    "ReplayConflictError",
    "ReplayGuard",
    "ReplayLimitExceeded",
    "ResponseCompleted",
    "ResponseFailed",
    "ResponseIncomplete",
    "StreamAnomaly",
    "StreamEvent",
    "StreamTruncated",
    "TextDelta",
    "ToolCallArgumentsDelta",
    "ToolCallArgumentsDone",
    "ToolCallArgumentsSnapshot",
    "ToolCallCut",
    "ToolCallStarted",
    "TurnDelta",
    "TurnPart",
    "UnknownEvent",
    "UnknownProviderError",
    "WireEvent",
    "WireKind",
    "adapter_for",
    "provider_names",
]
