"""What can go wrong on one connection, described as a value.

A ``Fault`` is a plan for one response: refuse it (a status with a provider's
JSON error body, or a wrong media type), or serve it badly (cut at an event or
inside one, in random chunks, dripping, with heartbeats, stalling). Every cut
reduces to a byte offset of the response body, so "after event 3", "in the
middle of event 3" and "at byte 120" are one mechanism.

Faults reach the server two ways: a script of ``FaultRule``s given when it
starts (each fires a bounded number of times: "cut only the first
connection"), or query parameters of the request (``?cut_after_events=3&times=1``)
for clients outside the process, such as ``agent-gate run``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any


class CutMode(Enum):
    ABORT = "abort"
    """Close the socket without the chunked terminator: the client sees a broken body."""
    CLEAN = "clean"
    """End the body properly: the client sees a normal end before the terminal event."""


class HeartbeatKind(Enum):
    COMMENT = "comment"
    """``: keep-alive`` lines, as proxies and many servers send."""
    PING = "ping"
    """``event: ping`` events, as Anthropic sends."""
    BOTH = "both"


class ErrorStyle(Enum):
    """Whose JSON error shape a refused request gets."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"


_OPENAI_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", "service_unavailable"),
    529: ("server_error", "overloaded"),
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_DEFAULT_MESSAGES = {
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    529: "Overloaded",
}


def error_body(status: int, style: ErrorStyle, message: str | None, request_id: str) -> bytes:
    """A JSON error body shaped as the named provider sends it."""
    text = message or _DEFAULT_MESSAGES.get(status, f"HTTP {status}")
    body: dict[str, Any]
    if style is ErrorStyle.ANTHROPIC:
        body = {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": text},
            "request_id": request_id,
        }
    elif style is ErrorStyle.GEMINI:
        body = {
            "error": {
                "code": status,
                "message": text,
                "status": _GEMINI_STATUS.get(status, "UNKNOWN"),
            }
        }
    else:
        etype, code = _OPENAI_TYPES.get(status, ("server_error", None))
        body = {"error": {"message": text, "type": etype, "param": None, "code": code}}
    return json.dumps(body).encode("utf-8")


@dataclass(frozen=True, slots=True)
class Fault:
    """The plan for one response. The default value serves the stream faithfully."""

    status: int | None = None
    """Refuse with this status and a JSON error body in ``error_style``."""
    error_style: ErrorStyle = ErrorStyle.OPENAI
    error_message: str | None = None
    retry_after: float | None = None
    """Sent as ``Retry-After`` (seconds) with a refusal."""
    content_type: str | None = None
    """Serve the stream's bytes under this Content-Type instead of text/event-stream."""
    cut_after_events: int | None = None
    """Cut once this many events of this response were sent whole."""
    cut_inside_event: int | None = None
    """Cut in the middle of event number ``k`` (0-based) of this response."""
    cut_at_byte: int | None = None
    """Cut after exactly this many body bytes of this response."""
    cut: CutMode = CutMode.ABORT
    chunk_min: int | None = None
    chunk_max: int | None = None
    """Random chunk sizes in ``[chunk_min, chunk_max]``, from ``seed``; events may span chunks."""
    seed: int = 0
    drip: float = 0.0
    """Seconds to pause after every chunk written."""
    heartbeat_interval: float | None = None
    """Send a heartbeat at an event boundary whenever this much time passed since the last."""
    heartbeat: HeartbeatKind = HeartbeatKind.COMMENT
    stall_after_events: int | None = None
    """After this many events, send no event for ``stall_seconds`` (heartbeats still flow)."""
    stall_seconds: float = 0.0
    ignore_last_event_id: bool = False
    """Replay from the first event whatever ``Last-Event-ID`` says (a server that gets
    resumption wrong: the reader must see duplicates, not new calls)."""

    def __post_init__(self) -> None:
        if (self.chunk_min is None) != (self.chunk_max is None):
            raise ValueError("chunk_min and chunk_max go together")
        if self.chunk_min is not None and not 1 <= self.chunk_min <= (self.chunk_max or 0):
            raise ValueError("need 1 <= chunk_min <= chunk_max")
        for name in ("drip", "stall_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.heartbeat_interval is not None and not self.heartbeat_interval > 0:
            raise ValueError("heartbeat_interval must be positive")

    def cut_offset(self, ends: list[int], start: int = 0) -> int | None:
        """The body offset where this response is cut.

        ``ends`` holds the offset where each event of the response ends and
        ``start`` where the first begins (after a ``retry:`` prefix). Offsets
        count body bytes, heartbeats excluded.
        """
        candidates: list[int] = []
        total = ends[-1] if ends else start
        if self.cut_at_byte is not None:
            candidates.append(min(self.cut_at_byte, total))
        if self.cut_after_events is not None:
            k = min(self.cut_after_events, len(ends))
            candidates.append(start if k <= 0 else ends[k - 1])
        if self.cut_inside_event is not None and self.cut_inside_event < len(ends):
            k = self.cut_inside_event
            begin = ends[k - 1] if k > 0 else start
            candidates.append(begin + max((ends[k] - begin) // 2, 1))
        return min(candidates) if candidates else None

    def to_query(self) -> dict[str, str]:
        """The query parameters that describe this fault (defaults left out)."""
        out: dict[str, str] = {}
        default = Fault()
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if isinstance(value, Enum):
                out[f.name] = str(value.value)
            elif isinstance(value, bool):
                out[f.name] = "1" if value else "0"
            else:
                out[f.name] = str(value)
        return out

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> Fault | None:
        """Parse fault parameters; ``None`` when the query names none.

        Unknown names are an error (``ValueError``): a misspelt fault that is
        silently ignored makes a test pass for the wrong reason.
        """
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, raw in params.items():
            if name in QUERY_PASSTHROUGH:
                continue
            if name not in known:
                raise ValueError(f"unknown fault parameter {name!r}")
            kwargs[name] = _parse(name, raw)
        return cls(**kwargs) if kwargs else None


QUERY_PASSTHROUGH = frozenset({"times", "stream", "starting_after"})
"""Query names that are not fault fields (``times`` is the rule's bound)."""

_ENUMS: dict[str, type[Enum]] = {
    "error_style": ErrorStyle,
    "cut": CutMode,
    "heartbeat": HeartbeatKind,
}
_INTS = {
    "status",
    "cut_after_events",
    "cut_inside_event",
    "cut_at_byte",
    "chunk_min",
    "chunk_max",
    "seed",
    "stall_after_events",
}
_FLOATS = {"retry_after", "drip", "heartbeat_interval", "stall_seconds"}


def _parse(name: str, raw: str) -> Any:
    if name in _ENUMS:
        return _ENUMS[name](raw)
    if name in _INTS:
        return int(raw)
    if name in _FLOATS:
        return float(raw)
    if name == "ignore_last_event_id":
        return raw.lower() in ("1", "true", "yes")
    return raw


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Apply ``fault`` to matching requests, at most ``times`` times (``None``: always).

    Rules are tried in order; the first that matches and has firings left is
    used, so ``[FaultRule(cut, times=1)]`` cuts the first connection and serves
    the reconnect faithfully.
    """

    fault: Fault
    times: int | None = 1
    path: str | None = None
    """Only requests whose path starts with this."""
    method: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method.upper() != method.upper():
            return False
        return self.path is None or path.startswith(self.path)
