"""The inbox's edit-then-approve form: the editable fields shown, the posted ones read back.

Why a form of its own beside Approve: a person who changes a call's arguments must see
which fields they may change (the policy's ``editable``, nothing else is offered) and
what is there now. A field holding text is edited as text (nobody should type JSON
quotes into a mail body); any other value as its JSON. A sealed field shows no value
(the page never holds one it did not reveal): left empty it is kept, typed into it is
its new text. The server decides again whether each field may change (``gate.edit``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gate.policy.edits import MAX_NAME_CHARS, MAX_VALUE_CHARS, EditRefused
from agent_gate.policy.paths import MISSING, parse_path, resolve

__all__ = ["MAX_NAME_CHARS", "MAX_VALUE_CHARS", "EditField", "edit_fields", "edit_of"]
# The limits are the edit's own (``policy.edits``), whichever way it arrives: here they
# are the textarea's ``maxlength`` and checked on the posted text before any JSON in it
# is parsed (a hand-made post is not bound by the browser's).

SET = "set:"
"""Form name prefix of a field's new value."""
KIND = "kind:"
"""Form name prefix of how that value is read: ``text``, ``json`` or ``sealed``."""
_STAND_IN = "redacted"
"""The key of a sealed field's stand-in (``policy.redaction``)."""


@dataclass(frozen=True, slots=True)
class EditField:
    """One editable field as the form offers it."""

    path: str
    text: str
    kind: str


def edit_fields(arguments: Any, editable: Sequence[str]) -> list[EditField]:
    """The form's fields for ``editable`` paths of the stored ``arguments``."""
    out: list[EditField] = []
    for path in editable:
        value = resolve(arguments, parse_path(path)) if isinstance(arguments, dict) else MISSING
        if isinstance(value, dict) and _STAND_IN in value:
            out.append(EditField(path, "", "sealed"))
        elif isinstance(value, str):
            out.append(EditField(path, value, "text"))
        else:
            shown = "" if value is MISSING else json.dumps(value, ensure_ascii=False)
            out.append(EditField(path, shown, "json"))
    return out


def edit_of(fields: Mapping[str, str]) -> dict[str, Any] | None:
    """The edit a posted form carries (None: it is the plain approve form); a JSON
    field that does not parse, a value longer than the form lets one type or a name
    longer than any field's is ``EditRefused`` (naming the field, never the value)."""
    edit: dict[str, Any] = {}
    for name, raw in fields.items():
        if not name.startswith(SET):
            continue
        path = name[len(SET):]
        if len(path) > MAX_NAME_CHARS:
            raise EditRefused(f"a field name of {len(path)} characters names no field of "
                              "this call")
        kind = fields.get(KIND + path, "text")
        text = raw.replace("\r\n", "\n")  # what browsers send for a textarea's newlines
        if len(text) > MAX_VALUE_CHARS:
            raise EditRefused(f"the new value of field {path!r} has {len(text)} characters; "
                              f"at most {MAX_VALUE_CHARS} characters", field=path)
        if kind == "sealed":
            if text:
                edit[path] = text
        elif kind == "json":
            try:
                edit[path] = json.loads(text)
            except ValueError:
                raise EditRefused(f"the new value of field {path!r} is not JSON",
                                  field=path) from None
        else:
            edit[path] = text
    return edit if edit else None
