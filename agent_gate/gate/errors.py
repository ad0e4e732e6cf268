"""The errors the gate raises on purpose (each an ``AgentGateError``)."""

from __future__ import annotations

from agent_gate.errors import AgentGateError
from agent_gate.ledger.approvals import NotAwaitingApproval

__all__ = [
    "AmbiguousCall",
    "ApprovalRefused",
    "GateUsageError",
    "NotAwaitingApproval",
    "NotInDoubt",
    "OutcomeUnknown",
]


class OutcomeUnknown(AgentGateError):
    """Raise from a tool when it cannot tell whether its write happened.

    A timeout after the request was sent is the typical case: the gate records the
    call ``in_doubt`` instead of ``failed``, so nothing retries it blindly.
    """


class GateUsageError(AgentGateError):
    """The gate was called in a way it cannot honour (e.g. an async tool in a running loop)."""


class NotInDoubt(AgentGateError):
    """``resolve`` was asked to settle a call that is not ``in_doubt``."""


class AmbiguousCall(AgentGateError):
    """A call id matched calls in several tasks; name the task."""


class ApprovalRefused(AgentGateError):
    """An approval cannot be given: the policy named for it denies the call."""
