"""A fault-injecting local SSE server for tests and the demo.

``StreamServer`` serves recorded transcripts over real HTTP on loopback,
honours ``Last-Event-ID`` (and OpenAI's ``starting_after``) and, on request,
breaks its responses the ways real networks and providers do. It runs
in-process (``with StreamServer(...) as server: server.url``) or standalone
(``python -m agent_gate.stream_server FILE``).
"""

from __future__ import annotations

from agent_gate.stream_server.faults import (
    CutMode,
    ErrorStyle,
    Fault,
    FaultRule,
    HeartbeatKind,
    error_body,
)
from agent_gate.stream_server.server import RequestRecord, StreamServer
from agent_gate.stream_server.transcript import IdMode, Transcript, TranscriptEvent

__all__ = [
    "CutMode",
    "ErrorStyle",
    "Fault",
    "FaultRule",
    "HeartbeatKind",
    "IdMode",
    "RequestRecord",
    "StreamServer",
    "Transcript",
    "TranscriptEvent",
    "error_body",
]
