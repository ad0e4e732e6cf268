"""What the gate and the rooms above it (serve, the integrations) raise, and what a
tool raises to tell the gate it cannot know its outcome.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_gate.errors.base import AgentGateError, safe_name

__all__ = [
    "AmbiguousCall", "ApprovalRefused", "CallInDoubt", "GateUsageError", "NotInDoubt",
    "OperatorRefused", "OutcomeUnknown", "UnknownRouteRole", "UpstreamUnavailable",
]


# ------------------------------------------------------------------ gate


class OutcomeUnknown(AgentGateError):
    """Raise from a tool when it cannot tell whether its write happened (a timeout after
    the request was sent): the call is ``in_doubt``, not ``failed``, never retried blindly."""


class UpstreamUnavailable(AgentGateError):
    """The MCP proxy's upstream is down now: nothing was sent or recorded; retry later."""


class GateUsageError(AgentGateError):
    """The gate was called in a way it cannot honour (e.g. an async tool in a running loop)."""


class UnknownRouteRole(GateUsageError):
    """A notification route's ``roles:`` (``agent-gate serve --config``) names a role no
    rule of the policy escalates to: the route would never hear
    of an escalation (a typo, most likely), so the server does not start.

    ``route`` is the route as the file lists it (``slack[1] 'legal'``: its list, index
    and name), ``roles`` the roles the policy does not know, ``known`` those it does.
    The message names nothing else of the route: never its URL, nor a secret."""

    def __init__(self, route: str, roles: Sequence[str], known: Sequence[str]) -> None:
        self.route = route
        self.roles = tuple(roles)
        self.known = tuple(known)
        names = ", ".join(_quoted(r) for r in self.roles)
        policy = ", ".join(_quoted(r) for r in self.known)
        super().__init__(
            f"{route}: roles: names {names}, which no rule of the policy escalates to, "
            "so the route would never hear of an escalation to "
            + ("them" if len(self.roles) > 1 else "it") + "; "
            + (f"the policy's roles: {policy}" if self.known
               else "the policy escalates to no role"))


def _quoted(role: str) -> str:
    """A role as the message shows it: quoted, control characters escaped, bounded."""
    return repr(role if len(role) <= 64 else role[:63] + "…")


class OperatorRefused(AgentGateError):
    """An operator asked for what their rights do not cover (refused and audited by
    ``agent-gate serve``), or ``operator add`` was given a name taken or not valid."""


class NotInDoubt(AgentGateError):
    """``resolve`` was asked to settle a call that is not ``in_doubt``."""


class AmbiguousCall(AgentGateError):
    """A call id matched calls in several tasks; name the task."""


class ApprovalRefused(AgentGateError):
    """An approval cannot be given: the policy named for it denies the call."""


# ---------------------------------------------------------- integrations


class CallInDoubt(AgentGateError):
    """A step or task found its call in doubt: it may have written, so it is not sent
    again. Settle it (``agent-gate resolve``, a reconcile hook) and run the step anew.

    Raised as a non-retryable failure: DBOS records it as the step's error (a
    recovered workflow sees it again, never a second run); Celery fails the task or
    retries it later, as the task's options say.
    """

    def __init__(self, task_id: str, call_id: str, code: str | None = None) -> None:
        super().__init__(
            f"call {safe_name(call_id)} of task {safe_name(task_id)} is in doubt"
            f"{f' ({code})' if code else ''}: it may have run, so it is not sent again"
        )
        self.task_id = task_id
        self.call_id = call_id
        self.code = code

    def __reduce__(self) -> tuple[type[CallInDoubt], tuple[str, str, str | None]]:
        return (type(self), (self.task_id, self.call_id, self.code))
