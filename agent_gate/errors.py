"""The one base error every agent-gate failure derives from, and how errors name things.

Callers catch ``AgentGateError`` to handle anything the gate refuses, without
catching unrelated bugs. Messages carry counts, offsets, indexes and ids, never
payload text: errors end up in logs, and logs are not where arguments go.

The helpers here are the one place that decides how a message may name something
that came from outside: ``safe_name`` for a name read off the wire (an event type,
a field), ``error_code`` for an exception raised by code we do not control (its
type, never its text, which may quote the input), ``json_type_name`` for a value
that must be described without being shown (the arguments of a call, a redacted
field). Every layer that writes such a message uses them, so what may leak is
decided once.
"""

from __future__ import annotations

import re

__all__ = ["AgentGateError", "error_code", "json_type_name", "safe_name"]


class AgentGateError(Exception):
    """Base class of every error agent-gate raises on purpose."""


_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,64}")


def safe_name(value: object) -> str:
    """An event type or field name fit for an error message, or a placeholder.

    Event type names come from the wire; a hostile or broken server could put
    payload text there, so anything that does not look like an identifier is
    replaced rather than echoed.
    """
    if isinstance(value, str) and _SAFE_NAME.fullmatch(value):
        return value
    return "<unprintable>"


def error_code(exc: BaseException) -> str:
    """An exception as a machine code for a message: its type's name, never its text."""
    return safe_name(type(exc).__name__)


def json_type_name(value: object) -> str:
    """The JSON type a Python value stands for, for messages that must not show it.

    A value that is no JSON type at all is named by its Python type, which says
    nothing of its content either.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
