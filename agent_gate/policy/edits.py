"""Edit then approve: the ``approval: {editable: [...]}`` block of an approve rule,
and an approver's changes applied to a call's arguments.

Why a person may change arguments at all: an approver who sees a mail to the right
customer with one wrong sentence should not have to deny it and wait for the agent
to try again. Why only the fields the policy names: the policy author decides what a
person may change without the agent (a mail's body) and what would make it another
call altogether (its recipient). Everything here is pure: the gate re-validates the
edited arguments against the tool's JSON Schema and has the policy judge them again
(``gate.edit``); the ledger keeps both versions (``ledger.edits``).

Which fields are editable for a call: those every approve rule that sent it to a
person marks editable (the intersection: a rule that names no ``editable`` list, or a
limit that asked for approval, lets nothing be edited). Paths are the policy's argument
paths (``body``, ``message.subject``, a ``/json/pointer``); no ``*``. The list's
type is ``policy.approval_model``'s (below ``policy.model``); reading it off a whole
document is done here, above it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from agent_gate.errors import ApprovalRefused, ArgumentsTooDeep
from agent_gate.plainjson import check_depth, plain_json
from agent_gate.policy.approval_model import MAX_EDITED_FIELDS
from agent_gate.policy.model import PolicyDocument
from agent_gate.policy.paths import MISSING, list_index, parse_path, resolve

__all__ = [
    "MAX_EDITED_FIELDS",
    "MAX_NAME_CHARS",
    "MAX_VALUE_CHARS",
    "EditRefused",
    "Edited",
    "apply_edit",
    "editable_fields",
    "value_chars",
]

MAX_VALUE_CHARS = 65536
"""The most characters an edited field's new value may have (``value_chars``), however
the edit arrives: the inbox's edit box (its ``maxlength``, and the server's check of the
posted text), the JSON API's ``edit``, ``agent-gate approve --set``. Why a bound at all:
an edit becomes the call's arguments, stored, hashed, shown and audited; a megabyte
typed into one field is a mistake or an attack, never a sentence a person changed."""
MAX_NAME_CHARS = 256
"""Past this a field name names no editable field: refused without repeating it."""


class EditRefused(ApprovalRefused):
    """An approver's edit of a waiting call cannot stand: a field the policy does not
    mark ``editable``, a value the tool's schema refuses, or edited arguments the
    policy denies. Nothing changed. ``field`` names the field (never its value).

    Why an ``ApprovalRefused``: the approval that came with the edit is refused, and
    whoever handles a refused approval handles this one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def editable_fields(
    document: PolicyDocument, tool: str, rule_ids: Iterable[str]
) -> tuple[str, ...]:
    """The fields an approver may edit in a call of ``tool`` that the rules ``rule_ids``
    sent to a person: those every one of those approve rules marks editable."""
    ids = set(rule_ids)
    entry = document.tools.get(tool)
    rules = [*(entry.rules if entry is not None else ()),
             *(r for r in document.rules if r.tools is None or tool in r.tools)]
    asking = [r for r in rules if r.id in ids and r.effect == "approve"]
    if not asking or {r.id for r in asking} != ids:
        # Nothing asked, or something besides an approve rule did (a limit, Cedar):
        # none of those names a field a person may change.
        return ()
    first = asking[0].approval.editable if asking[0].approval else []
    rest = [set(r.approval.editable if r.approval else ()) for r in asking[1:]]
    return tuple(f for f in first if all(f in other for other in rest))


@dataclass(frozen=True, slots=True)
class Edited:
    """Arguments after an approver's edit, and which fields it really changed."""

    arguments: dict[str, Any]
    fields: tuple[str, ...]
    """Editable paths whose value differs from the call's (in the edit's order)."""


def value_chars(value: Any) -> int:
    """A new value's size as a person types it: a string's characters, any other
    value's JSON text (compact, characters not escaped), what the edit box holds."""
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def apply_edit(
    arguments: Mapping[str, Any], edit: Mapping[str, Any], editable: Sequence[str]
) -> Edited:
    """``arguments`` with ``edit`` (path -> new JSON value) applied; ``EditRefused``
    naming the first field that is not editable, not JSON, longer than
    ``MAX_VALUE_CHARS``, or has no place to go. Messages name fields, never values (a
    name longer than any field's is not repeated either)."""
    if not isinstance(edit, Mapping) or not edit:
        raise EditRefused("an edit names at least one field and its new value")
    if len(edit) > MAX_EDITED_FIELDS:
        raise EditRefused(f"an edit changes at most {MAX_EDITED_FIELDS} fields")
    allowed = set(editable)
    result = deepcopy(dict(arguments))
    changed: list[str] = []
    for field, value in edit.items():
        if isinstance(field, str) and len(field) > MAX_NAME_CHARS:
            raise EditRefused(f"a field name of {len(field)} characters names no field of "
                              "this call")
        if not isinstance(field, str) or field not in allowed:
            shown = field if isinstance(field, str) else type(field).__name__
            listed = ", ".join(editable) if editable else "none"
            raise EditRefused(
                f"field {shown!r} is not editable for this call (editable: {listed})",
                field=shown if isinstance(field, str) else None,
            )
        if not plain_json(value):
            raise EditRefused(f"the new value of field {field!r} is not JSON data", field=field)
        try:
            check_depth(value)
        except ArgumentsTooDeep:
            raise EditRefused(f"the new value of field {field!r} nests too deeply",
                              field=field) from None
        size = value_chars(value)
        if size > MAX_VALUE_CHARS:
            raise EditRefused(f"the new value of field {field!r} has {size} characters; "
                              f"at most {MAX_VALUE_CHARS} characters", field=field)
        path = parse_path(field)
        if resolve(result, path) == value and resolve(result, path) is not MISSING:
            continue
        _set(result, path, deepcopy(value), field)
        changed.append(field)
    return Edited(result, tuple(changed))


def _set(target: dict[str, Any], path: tuple[str, ...], value: Any, field: str) -> None:
    """Put ``value`` at ``path``: every step but the last must exist (an edit changes a
    field of the call, it does not invent structure)."""
    current: Any = target
    for segment in path[:-1]:
        current = _step(current, segment, field)
    last = path[-1]
    if isinstance(current, dict):
        current[last] = value
    elif isinstance(current, list) and (index := list_index(last, len(current))) is not None:
        current[index] = value
    else:
        raise EditRefused(f"field {field!r} has no place in the call's arguments", field=field)


def _step(current: Any, segment: str, field: str) -> Any:
    if isinstance(current, dict) and segment in current:
        return current[segment]
    if isinstance(current, list):
        index = list_index(segment, len(current))
        if index is not None:
            return current[index]
    raise EditRefused(f"field {field!r} has no place in the call's arguments", field=field)
