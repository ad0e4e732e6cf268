"""An approver reads what they approve: one redacted argument field, unsealed for them.

The ledger keeps a redacted field as a stand-in and the whole arguments sealed
(``privacy.seal``); a person asked to approve a mail must still be able to read its
body. ``reveal`` unseals one field for one operator, in the process that holds the
seal key (``agent-gate serve``, or ``call show --reveal`` where the key is), and only:

- for an operator whose rights cover the call's tool (approve or resolve);
- for a field the policy redacts with ``reveal: rights`` (the default), never one it
  marks ``reveal: never``: so the policy file must be at hand (without it nothing
  says which fields no person may see, and nothing is revealed);
- for a field the stored arguments hold as a stand-in (a field that is not sealed is
  already shown), once the sealed arguments open and still hash to the row's
  ``args_hash``.

Every reveal, allowed or refused, is appended to the audit chain under the operator's
name with the field's path (never its value): who read which field, when. The value
is returned to the caller and kept nowhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent_gate.errors import GateUsageError, OperatorRefused
from agent_gate.gate.admission import Arguments
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.views.operators import Operator, OperatorRight, Operators, actor_of
from agent_gate.policy import Policy
from agent_gate.policy.paths import display, iter_matches, parse_path, resolve

__all__ = ["Revealed", "reveal", "sealed_fields"]

_STAND_IN_KEYS = frozenset({"redacted", "preview", "size", "type"})


@dataclass(frozen=True, slots=True)
class Revealed:
    """One field's clear value, for the operator who asked (kept nowhere)."""

    ref: int
    call_id: str
    field: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "call_id": self.call_id, "field": self.field,
                "value": self.value}


def _stand_ins(value: Any, path: tuple[str | int, ...] = (), depth: int = 0
               ) -> Iterator[tuple[tuple[str | int, ...], Any, str | int]]:
    """Every stand-in in stored arguments: its path, its container and slot."""
    if depth > 32:
        return
    items: Any = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, child in items:
        if isinstance(child, dict) and set(child) == _STAND_IN_KEYS:
            yield (*path, key), value, key
        else:
            yield from _stand_ins(child, (*path, key), depth + 1)


def _never(policy: Policy, tool: str, stored: dict[str, Any]) -> set[tuple[int, str | int]]:
    """The (container, slot) of every field the policy marks ``reveal: never``."""
    doc = policy.document
    entries = list(doc.redact) + list(doc.tools[tool].redact if tool in doc.tools else ())
    out: set[tuple[int, str | int]] = set()
    for entry in entries:
        if entry.reveal == "never":
            for container, slot in iter_matches(stored, parse_path(entry.path, wildcard=True)):
                out.add((id(container), slot))
    return out


def sealed_fields(rec: CallRecord, policy: Policy | None) -> dict[str, bool]:
    """The call's redacted fields by path, and whether a person with rights may reveal
    each (False: ``reveal: never``, or no policy to say)."""
    if rec.sealed_arguments is None or not isinstance(rec.arguments, dict):
        return {}
    never = _never(policy, rec.tool, rec.arguments) if policy is not None else set()
    return {display(tuple(str(p) for p in path)):
            policy is not None and (id(box), slot) not in never
            for path, box, slot in _stand_ins(rec.arguments)}


def reveal(rec: CallRecord, field: str, *, op: Operator, operators: Operators,
           keys: Arguments, policy: Policy | None) -> Revealed:
    """``field`` of ``rec``'s arguments in clear, for ``op``; refused and audited
    otherwise (``OperatorRefused`` for a right or a policy, ``GateUsageError`` for a
    field that names nothing sealed or arguments that cannot be opened)."""
    name = field[:200]

    def audited(allowed: bool, why: str | None = None) -> None:
        detail: dict[str, Any] = {"field": name, "tool": rec.tool}
        if why is not None:
            detail["reason"] = why
        operators.record_action(actor=actor_of(op.name), event="reveal", allowed=allowed,
                                task_id=rec.task_id, call_id=rec.call_id, detail=detail)

    def refuse(why: str, error: type[Exception] = OperatorRefused) -> Exception:
        audited(False, why)
        return error(why)

    if not (op.may(OperatorRight.APPROVE, rec.tool) or op.may(OperatorRight.RESOLVE, rec.tool)):
        raise refuse(f"operator {op.name!r} has no rights on {rec.tool!r} calls and may not "
                     "reveal their fields")
    fields = sealed_fields(rec, policy)
    if name not in fields:
        raise refuse(f"call {rec.row_id} has no redacted field {name!r}"
                     + (f" (its redacted fields: {', '.join(sorted(fields))})" if fields
                        else ""), GateUsageError)
    if policy is None:
        raise refuse("no policy file is loaded here, and only the policy says which fields "
                     "no person may see (reveal: never): start with --policy")
    if not fields[name]:
        raise refuse(f"the policy marks {name!r} of {rec.tool!r} calls reveal: never")
    clear, why = keys.of(rec)
    if clear is None:
        raise refuse(why or "the sealed arguments cannot be opened", GateUsageError)
    value = resolve(clear, parse_path(name))
    audited(True)
    return Revealed(rec.row_id, rec.call_id, name, value)
