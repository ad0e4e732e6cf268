"""Limits and the reconnect policy: plain values and pure arithmetic.

Kept apart from the I/O so that "how long to wait before attempt n" and "is
this event progress" are answered the same way by the sync and async paths and
are tested with an injected random source and no clock at all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from agent_gate.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_STREAM_BYTES,
    ServerSentEvent,
)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Each limit separately, each raising its own typed error.

    Byte limits go to the decoder and apply per response (a reconnect starts a
    new response). The two time limits are per connection and both start when
    the request is sent:

    * ``idle_timeout``: longest time with no byte at all (headers included);
    * ``progress_timeout``: longest time without an event that is not a
      heartbeat. Comments and events whose type is in ``heartbeat_events``
      prove the connection is alive, not that the answer is advancing, so a
      server dripping ``: keep-alive`` every second still trips it.

    ``None`` disables a time limit. The effective httpx read timeout of the
    request becomes the smallest of the client's own read timeout and these two,
    so a silent socket is noticed even while a read blocks; the loop checks the
    clock after every read for the case a read timeout cannot see (heartbeats
    keep each read short).
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_response_bytes: int = DEFAULT_MAX_STREAM_BYTES
    idle_timeout: float | None = 60.0
    progress_timeout: float | None = 300.0
    heartbeat_events: frozenset[str] = field(default_factory=lambda: frozenset({"ping"}))
    max_error_body_bytes: int = 16 * 1024
    """At most this much of a non-2xx body is read to build the error excerpt."""

    def __post_init__(self) -> None:
        for name in ("max_line_bytes", "max_event_bytes", "max_response_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive number of bytes")
        for name in ("idle_timeout", "progress_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds or None")
        if self.max_error_body_bytes < 0:
            raise ValueError("max_error_body_bytes must not be negative")

    def is_heartbeat(self, event: ServerSentEvent) -> bool:
        return event.event in self.heartbeat_events


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """When and how often to re-subscribe after a stream ended without its terminal event.

    Attempt ``n`` (1-based) of a run of reconnects without progress waits
    ``base * multiplier**(n-1)``, capped at ``max_delay``, then scaled by a
    random factor in ``[1 - jitter, 1]`` so that many clients cut at once do not
    return at once. ``base`` is the server's ``retry`` field when it sent one
    (WHATWG reconnection time) and ``initial_delay`` otherwise; a server's
    ``retry`` or ``Retry-After`` is honoured but never beyond ``max_delay``.

    ``max_attempts`` bounds consecutive reconnects that deliver no new event
    (an event resets the count); ``max_reconnects`` bounds all reconnects of
    one stream, so a server that cuts after every event still ends.
    """

    max_attempts: int = 5
    max_reconnects: int = 50
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.25
    reconnect_statuses: frozenset[int] = field(
        default_factory=lambda: frozenset({408, 429, 500, 502, 503, 504, 529})
    )
    """Statuses that, answering a *reconnect*, count as a failed attempt rather than an error."""
    resume_stalled: bool = False
    """Treat an idle or progress timeout like a dropped connection and resume.

    Off by default: a stall is reported as its typed error so the caller sees it.
    """

    def __post_init__(self) -> None:
        if self.max_attempts < 0 or self.max_reconnects < 0:
            raise ValueError("max_attempts and max_reconnects must not be negative")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("delays must not be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(
        self,
        attempt: int,
        *,
        retry_ms: int | None,
        retry_after: float | None = None,
        rng: random.Random,
    ) -> float:
        """Seconds to wait before reconnect ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        if retry_after is not None:
            # The server named a time for this very refusal: wait that long,
            # within the cap, without shortening it by jitter.
            return min(max(retry_after, 0.0), self.max_delay)
        base = self.initial_delay if retry_ms is None else retry_ms / 1000.0
        exponent = min(attempt - 1, 64)
        raw = min(base * self.multiplier**exponent, self.max_delay)
        return raw * (1.0 - self.jitter * rng.random())
