"""What a refused tool declaration or a refused call is told.

Validation errors are reported as RFC 6901 JSON pointers plus the failed schema
keyword and never echo an argument value, because these errors end up in logs, in
the ledger and in the transcript sent back to the model. Both validators (the
python-jsonschema reference and the jsonschema-rs fast path) and pydantic map
their locations to ``json_pointer``, so one call fails the same way whichever
judged it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from agent_gate.errors import AgentGateError

__all__ = [
    "COERCION_UNSTABLE",
    "ArgumentError",
    "ArgumentsInvalid",
    "ArgumentsNotObject",
    "ToolDefinitionError",
    "UnknownTool",
    "escape_token",
    "json_pointer",
]


class ToolDefinitionError(AgentGateError):
    """A tool was registered with an invalid schema or options; raised at import time."""


class UnknownTool(AgentGateError):
    """A call named a tool the registry does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no tool named {name!r} is registered")
        self.name = name


class ArgumentsNotObject(AgentGateError):
    """The arguments were valid JSON but not an object; tools take named arguments only."""

    def __init__(self, tool: str, json_type: str) -> None:
        super().__init__(f"arguments of {tool!r} are a JSON {json_type}, not an object")
        self.tool = tool
        self.json_type = json_type


@dataclass(frozen=True, slots=True, order=True)
class ArgumentError:
    """Where an argument failed and which schema keyword it failed; never its value."""

    pointer: str
    keyword: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'} ({self.keyword})"


COERCION_UNSTABLE: Final = "coercion_unstable"
"""The keyword of an ``ArgumentError`` for a model whose coerced value does not
survive a second validation unchanged (see ``Tool.handed``)."""


class ArgumentsInvalid(AgentGateError):
    """The arguments do not satisfy the tool's schema."""

    MAX_LISTED = 10

    def __init__(self, tool: str, errors: Sequence[ArgumentError]) -> None:
        self.tool = tool
        self.errors = tuple(errors)
        listed = "; ".join(str(e) for e in self.errors[: self.MAX_LISTED])
        more = len(self.errors) - self.MAX_LISTED
        suffix = f"; and {more} more" if more > 0 else ""
        super().__init__(f"arguments of {tool!r} fail its schema at {listed}{suffix}")


def escape_token(token: str | int) -> str:
    """One reference token of a JSON pointer, with ``~`` and ``/`` escaped."""
    return str(token).replace("~", "~0").replace("/", "~1")


def json_pointer(path: Sequence[str | int]) -> str:
    """RFC 6901 pointer: the one location format both jsonschema and pydantic map to."""
    return "".join("/" + escape_token(p) for p in path)
