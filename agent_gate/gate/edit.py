"""Edit then approve: an approver's changes to a waiting call, checked, then committed
with their approval as the call's new version.

Why each check, in order:

* the call waits, under the policy this gate runs (the fields a person may change are
  that policy's, named by the rules that asked for the approval);
* the editor may approve the tool's calls (the same judge as a plain approval);
* every field changed is ``editable`` (``policy.edits``; a refusal names the field,
  never a value);
* the edited arguments pass the tool's JSON Schema (a pydantic tool's coercion too),
  because the tool will receive them and no agent will have checked them;
* the policy judges the edited call as it would a new one, with the task's usage now:
  ``deny`` refuses the edit (nothing changes, the refusal audited); ``approve`` or
  ``allow`` stands, and the editor's approval is the approval (they have just read and
  changed the call; a second person is the two-person rule's business, not an edit's).

The new version is stored as admission stores a call: redacted fields as stand-ins, the
whole sealed and bound to the new hash, the hash keyed for a tool with redacted fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent_gate.errors import (
    ApprovalRefused,
    ArgumentsInvalid,
    ArgumentsNotObject,
)
from agent_gate.gate import desk
from agent_gate.gate.admission import seal_binding
from agent_gate.ledger.answers import answerable, lifetime_ms
from agent_gate.ledger.edits import NewVersion
from agent_gate.ledger.states import CallState
from agent_gate.plainjson import canonical_json, sha256_hex
from agent_gate.policy import Verdict
from agent_gate.policy.edits import EditRefused, apply_edit, editable_fields

if TYPE_CHECKING:
    from agent_gate.gate.decide import Decider
    from agent_gate.ledger.approvals import ApprovalRecord
    from agent_gate.ledger.records import CallRecord
    from agent_gate.ledger.store import Ledger

__all__ = ["edit_and_approve", "editable_for"]


def editable_for(decider: Decider, rec: CallRecord) -> tuple[str, ...]:
    """The argument paths a person may edit in ``rec`` under this gate's policy (none
    without a policy file, or when it waits under another policy)."""
    rules = decider.rules
    if rules is None or rec.state is not CallState.AWAITING_APPROVAL:
        return ()
    if rec.policy_hash != rules.hash:
        return ()
    return editable_fields(rules.policy.document, rec.tool, rec.rule_ids)


def edit_and_approve(
    ledger: Ledger,
    decider: Decider,
    call_id: str,
    edit: Mapping[str, Any],
    *,
    by: str,
    task_id: str | None,
    reason: str | None,
    ttl: float | None,
    args_hash: str | None,
) -> tuple[ApprovalRecord, bool]:
    """``Gate.approve(..., edit=...)``: the edit checked (module docstring), then the
    call's new version and the editor's approval of it committed together. An edit
    that changes nothing is a plain approval."""
    who = (by or "").strip()
    if not who:
        raise EditRefused("an edit names who gives it (by=)")
    ttl_ms = lifetime_ms(ttl)
    rec = desk.find_one(ledger, call_id, task_id)
    new = _new_version(ledger, decider, rec, edit, who)
    if new is None:
        return desk.approve(ledger, call_id, by=who, task_id=rec.task_id, reason=reason,
                            ttl=ttl, check=decider, args_hash=args_hash)
    approval, _ = ledger.edit_and_approve(rec, new, by=who, reason=reason, ttl_ms=ttl_ms,
                                          shown_hash=args_hash)
    return approval, True


def _new_version(
    ledger: Ledger, decider: Decider, rec: CallRecord, edit: Mapping[str, Any], who: str
) -> NewVersion | None:
    """The checked new version, or None when the edit changes no value."""
    rules = decider.rules
    if rules is None:
        raise EditRefused("an edit needs the policy file that marks fields editable")
    answerable(rec, rec)  # before the edit is checked and judged
    if rec.policy_hash != rules.hash:
        raise EditRefused(f"call {rec.call_id!r} waits under policy {rec.policy_hash}; edit "
                          f"it under that policy (this gate runs {rules.hash})")
    refusal = decider.approver_refusal(rec, who)
    if refusal is not None:
        ledger.note(rec, "approval_refused", actor=f"operator:{who}",
                    detail={"reason": refusal, "policy_hash": rules.hash})
        raise ApprovalRefused(refusal)
    arguments, why = decider.keys.of(rec)
    if arguments is None:
        raise EditRefused(why or f"call {rec.call_id!r} has no argument object to edit")
    edited = apply_edit(arguments, edit, editable_fields(rules.policy.document, rec.tool,
                                                          rec.rule_ids))
    if not edited.fields:
        return None
    tool = decider.tools.get(rec.tool)
    if tool is None:
        raise EditRefused(f"tool {rec.tool!r} is not registered here: its JSON Schema is "
                          "needed to check an edit (give the tools, e.g. --tools)")
    try:
        judged = tool.judged(edited.arguments)
    except (ArgumentsInvalid, ArgumentsNotObject) as exc:
        raise EditRefused(f"the edited arguments fail the schema of {rec.tool!r}: {exc}",
                          field=edited.fields[0]) from None
    decision = decider.evaluate_arguments(rec, judged)
    if decision.effect is Verdict.DENY:
        ledger.note(rec, "edit_refused", actor=f"operator:{who}",
                    detail={"fields": list(edited.fields), "rule_ids": list(decision.rule_ids),
                            "policy_hash": rules.hash})
        raise EditRefused(f"the policy denies call {rec.call_id!r} as edited "
                          f"({', '.join(decision.rule_ids)}); nothing changed",
                          field=edited.fields[0])
    return _stored(decider, rec, judged, edited.fields)


def _stored(
    decider: Decider, rec: CallRecord, arguments: dict[str, Any], fields: tuple[str, ...]
) -> NewVersion:
    """The new version as admission would store it (``admission.admit``)."""
    rules = decider.rules
    assert rules is not None
    text = canonical_json(arguments)
    if not rules.redacts(rec.tool):
        return NewVersion(arguments, None, sha256_hex(text), fields)
    key = decider.keys.sealing_key()
    args_hash = key.keyed_hash(text)
    stored = rules.redact(rec.tool, arguments, key=key.digest_key) or arguments
    sealed = key.seal(text, bound_to=seal_binding(rec.task_id, rec.call_id, args_hash))
    return NewVersion(stored, sealed, args_hash, fields)
