"""Why a call is where it is: the machine-readable codes ``tool_calls.reason_code`` stores.

The ledger owns them because it stores them; the gate, the transition tables in
``states`` and operators' tools all read the same names.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ReasonCode"]


class ReasonCode(StrEnum):
    """Machine-readable reasons, stored in ``tool_calls.reason_code``."""

    ALLOWED = "allowed"
    UNKNOWN_TOOL = "unknown_tool"
    ARGUMENTS_NOT_OBJECT = "arguments_not_object"
    ARGUMENTS_NOT_JSON = "arguments_not_json"
    SCHEMA_INVALID = "schema_invalid"
    POLICY_DENIED = "policy_denied"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    GRANTED = "granted"
    """Authorized by a grant an approver gave earlier (``ledger.grants``), not asked again."""
    APPROVAL_REFUSED = "approval_refused"
    """An approval the policy's approvers do not accept: noted, the call still waits."""
    DENIED_BY_OPERATOR = "denied_by_operator"
    ARGUMENTS_SEALED = "arguments_sealed"
    ARGUMENTS_INCOMPLETE = "arguments_incomplete"
    STREAM_REJECTED = "stream_rejected"
    RESPONSE_NOT_COMPLETED = "response_not_completed"
    CONFLICT = "conflict"
    IN_PROGRESS = "in_progress"
    OWNER_DEAD = "owner_dead"
    LEASE_EXPIRED = "lease_expired"
    OUTCOME_UNKNOWN = "outcome_unknown"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    TOOL_ERROR = "tool_error"
    RECONCILED = "reconciled"
    RECONCILE_ERROR = "reconcile_error"
    RETRIED = "retried"
    RESOLVED = "resolved"
    LATE_OUTCOME = "late_outcome"
    TOOL_UNAVAILABLE = "tool_unavailable"
    IDENTIFIER_UNSTORABLE = "identifier_unstorable"
    ARGUMENTS_CHANGED = "arguments_changed"
    ARGUMENTS_TOO_DEEP = "arguments_too_deep"
