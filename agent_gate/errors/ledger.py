"""What the durable record raises, and the rooms that keep it (evidence, sealing):
illegal arrows, conflicting tasks and answers, ledgers that cannot be used, keys.
"""

from __future__ import annotations

from enum import Enum

from agent_gate.errors.base import AgentGateError

__all__ = [
    "AnswerMismatch", "AuditCheckpointRefused", "EvidenceError", "IllegalTransition",
    "LedgerConfigError", "LedgerMissing", "LedgerReplaced", "LedgerSchemaError",
    "NotAwaitingApproval", "SealError", "SealKeyMissing", "SealKeyUnsafe", "TaskContextConflict",
    "UnmatchedAnswer",
]


# ---------------------------------------------------------------- ledger


class IllegalTransition(AgentGateError):
    """Code asked for an arrow the table does not have: a bug, never a race."""

    def __init__(self, state: Enum, event: Enum) -> None:  # CallState, Event
        super().__init__(f"no transition from {state.value!r} on {event.value!r}")
        self.state = state
        self.event = event


class TaskContextConflict(AgentGateError):
    """A task was given another principal or scope than the one it was started with.

    A task's principal and scope are fixed when first given: quotas, approvals and
    resumes of the task are all judged for them, so they cannot change half-way.
    """


class NotAwaitingApproval(AgentGateError):
    """An approval or denial was given for a call that does not wait for one."""


class UnmatchedAnswer(NotAwaitingApproval):
    """An answer given through an agent framework names no call, or one not waiting in
    that task (unknown, another task's, answered otherwise): refused whole."""


class AnswerMismatch(AgentGateError):
    """An answer (approve, deny, resolve) named the hash of arguments that are not the
    call's now: the person saw another call. Refused and audited (``answer_refused``)."""


class LedgerConfigError(AgentGateError):
    """The database URL cannot hold a ledger (unsupported backend, in-memory SQLite)."""


class LedgerMissing(LedgerConfigError):
    """No SQLite ledger file at the path, and creating one was not asked for (a missing
    ledger is not an empty one: every call it recorded would run again)."""


class LedgerReplaced(AgentGateError):
    """The SQLite file this ledger opened was deleted or replaced by another file:
    nothing more is committed through this ledger (its writes would go to a file
    nobody reads, or to a ledger that never saw its calls)."""


class LedgerSchemaError(AgentGateError):
    """The database's schema is not the one this code was written for."""


class AuditCheckpointRefused(AgentGateError):
    """A checkpoint would hide task heads lost since the last one: ``audit verify``."""


class EvidenceError(AgentGateError):
    """A key, signed note, proof or bundle that is malformed or unreadable (not a failed check)."""


class SealError(AgentGateError):
    """A sealed value cannot be opened (another key, or the ciphertext was altered)."""


class SealKeyMissing(AgentGateError):
    """Redacted fields must be sealed and no seal key is configured."""


class SealKeyUnsafe(SealKeyMissing):
    """A key file others could read or replace: refused, as ``ssh`` refuses such a key.

    Readable by others, the key opens every sealed argument in the database; writable
    by others or owned by someone else, it can be swapped for a key an attacker holds.
    A subclass of ``SealKeyMissing``: whoever handles a missing key handles this one.
    """
