"""Typed errors of the provider layer.

Messages name the event index, the provider and the field that was wrong, and
never quote the event's data: a stream carries the model's output and the
user's arguments, and these errors end up in logs.
"""

from __future__ import annotations

from agent_gate.errors import AgentGateError, safe_name  # safe_name: re-exported


class ProviderError(AgentGateError):
    """Base of the errors raised while translating a provider's events."""


class UnknownProviderError(ProviderError):
    """No adapter is registered under the requested name."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown provider {safe_name(name)!r}; known: {', '.join(known)}")


class MalformedEventError(ProviderError):
    """An event could not be parsed or does not have the shape its type requires."""

    def __init__(self, provider: str, event_index: int, problem: str) -> None:
        self.provider = provider
        self.event_index = event_index
        self.problem = problem
        super().__init__(f"{provider}: malformed event at index {event_index}: {problem}")


class ReplayConflictError(ProviderError):
    """A replayed event (same sequence number or event id) carries different content.

    A stream that resumes with different bytes under the same position is not a
    replay but a different response; continuing would mix two answers.
    """

    def __init__(self, event_index: int, key: str) -> None:
        self.event_index = event_index
        self.key = key
        super().__init__(
            f"event at index {event_index} repeats position {key} with different content"
        )


class ReplayLimitExceeded(ProviderError):
    """The replay guard would remember more positions than its bound allows.

    Forgetting one instead would let a replayed event (an argument fragment) be
    applied twice, so the stream is abandoned, as for the accumulator's own limits.
    """

    def __init__(self, limit: str, limit_value: int, event_index: int) -> None:
        self.limit = limit
        self.limit_value = limit_value
        self.event_index = event_index
        super().__init__(f"limit {limit}={limit_value} exceeded at event index {event_index}")
