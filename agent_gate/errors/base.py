"""The base of every agent-gate error, and the one place that decides how a message
may name something that came from outside (see the package's docstring).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["AgentGateError", "error_code", "json_type_name", "restore_error", "safe_name"]


class AgentGateError(Exception):
    """Base class of every error agent-gate raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # BaseException pickles as ``cls(*self.args)``: the message alone, which an
        # error with its own ``__init__`` (offsets, ids, states) cannot be built from.
        # DBOS and Celery keep a step's error pickled, so every error is rebuilt from
        # its args and attributes without calling ``__init__``.
        return (restore_error, (type(self), self.args, dict(vars(self))))


def restore_error(cls: type[AgentGateError], args: tuple[Any, ...],
                  state: dict[str, Any]) -> AgentGateError:
    """Unpickle an error: what ``AgentGateError.__reduce__`` names."""
    error = cls.__new__(cls, *args)
    error.args = args
    vars(error).update(state)
    return error


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
    kinds = ((bool, "boolean"), (int | float, "number"), (str, "string"),
             (list | tuple, "array"), (dict, "object"))
    return next((name for kind, name in kinds if isinstance(value, kind)),
                type(value).__name__)
