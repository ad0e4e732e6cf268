"""Audit entries as OCSF events, for a SIEM: ``agent-gate audit --ocsf`` (with ``--follow``,
a live feed of JSON lines a collector ships).

Each entry becomes one event of the Open Cybersecurity Schema Framework's **API Activity**
class (``class_uid`` 6003, category 6 "Application Activity"): a tool call is an API call
the agent made through the gate. ``activity_id`` is Create (1) for a call received, Update
(3) for a change of its state, Other (99) for an entry that records without moving it
(seen again, an approval given, a refusal). A decision that allows, asks a person or
denies (``received`` -> ``authorized``/``awaiting_approval``/``rejected``) is also named
in ``unmapped.decision``; AWS Security Lake and Splunk's OCSF add-on read the class, the
activity, ``status_id``, ``actor.user`` and ``resources``.

What an event carries: ids, states, the tool, rule ids and the entry's hash and chain
position, never an argument value (the trail holds none). ``metadata.uid`` is the entry's
position in the trail, so a collector drops repeats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_gate.ledger.audit import AuditRecord

__all__ = ["OCSF_VERSION", "ocsf_event"]

OCSF_VERSION = "1.1.0"
_CLASS = 6003
_CATEGORY = 6
_CREATE, _UPDATE, _OTHER = 1, 3, 99
_SUCCESS, _FAILURE, _OTHER_STATUS = 1, 2, 99
_FAILED_STATES = frozenset({"failed", "rejected", "incomplete", "in_doubt"})
_INFORMATIONAL, _LOW, _MEDIUM = 1, 2, 3


def _activity(record: AuditRecord) -> tuple[int, str]:
    if record.event == "received" and record.from_state is None:
        return _CREATE, "Create"
    if record.to_state is not None and record.from_state != record.to_state:
        return _UPDATE, "Update"
    return _OTHER, "Other"


def _status(record: AuditRecord) -> tuple[int, str]:
    if record.to_state in _FAILED_STATES:
        return _FAILURE, "Failure"
    if record.to_state in ("succeeded", "authorized", "executing", "received",
                           "awaiting_approval"):
        return _SUCCESS, "Success"
    return _OTHER_STATUS, "Other"


def ocsf_event(record: AuditRecord, *, product_version: str) -> dict[str, Any]:
    """One audit entry as an OCSF API Activity event (plain JSON data)."""
    activity_id, activity = _activity(record)
    status_id, status = _status(record)
    severity = (_MEDIUM if record.to_state == "in_doubt"
                else _LOW if status_id == _FAILURE else _INFORMATIONAL)
    detail = record.detail or {}
    change = (f"{record.from_state} -> {record.to_state}" if record.from_state
              else str(record.to_state or ""))
    event: dict[str, Any] = {
        "class_uid": _CLASS, "class_name": "API Activity",
        "category_uid": _CATEGORY, "category_name": "Application Activity",
        "activity_id": activity_id, "activity_name": activity,
        "type_uid": _CLASS * 100 + activity_id,
        "time": int(record.at.timestamp() * 1000),
        "severity_id": severity,
        "status_id": status_id, "status": status,
        "message": f"{record.event} {change}".strip(),
        "metadata": {
            "version": OCSF_VERSION, "uid": str(record.seq),
            "correlation_uid": record.task_id,
            "product": {"name": "agent-gate", "vendor_name": "agent-gate",
                        "version": product_version},
            "log_name": "audit",
        },
        # OCSF user type: 1 User (an operator answered), 0 Unknown (a gate, a tool).
        "actor": {"user": {"name": record.actor or "agent-gate",
                           "type_id": 1 if (record.actor or "").startswith("operator:") else 0}},
        "api": {"operation": record.event, "service": {"name": record.tool or "agent-gate"}},
        "src_endpoint": {"name": "agent-gate"},
        "resources": [{"type": "tool_call", "uid": record.call_id,
                       "name": record.tool}] if record.call_id is not None else [],
        "unmapped": {
            "task": record.task_id, "task_seq": record.task_seq, "hash": record.hash,
            "from_state": record.from_state, "to_state": record.to_state,
            "decision": detail.get("verdict"), "rule_ids": detail.get("rule_ids"),
            "reason_code": detail.get("reason_code"),
        },
    }
    return event
