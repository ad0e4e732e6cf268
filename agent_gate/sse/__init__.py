"""Sans-IO Server-Sent Events decoding (WHATWG HTML, event stream interpretation).

No sockets, no clock, no threads: feed bytes, read ``ServerSentEvent``s. This
package imports nothing of agent-gate but its base error and the fast-path
switch (``agent_gate._speedups``).
"""

from agent_gate.errors import SSEError, SSELimitExceeded, SSEStateError
from agent_gate.sse.decoder import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_STREAM_BYTES,
    DecoderState,
    SSEDecoder,
)
from agent_gate.sse.event import ServerSentEvent, StreamEnd

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_STREAM_BYTES",
    "DecoderState",
    "SSEDecoder",
    "SSEError",
    "SSELimitExceeded",
    "SSEStateError",
    "ServerSentEvent",
    "StreamEnd",
]
