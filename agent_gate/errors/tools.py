"""What tool registration and argument validation raise: where arguments failed, as
RFC 6901 pointers and schema keywords, never a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from agent_gate.errors.base import AgentGateError

__all__ = [
    "COERCION_UNSTABLE", "ArgumentError", "ArgumentsInvalid", "ArgumentsNotObject",
    "ToolDefinitionError", "UnknownTool",
]


# ----------------------------------------------------------------- tools
# Where arguments failed as RFC 6901 pointers plus the schema keyword, never a value:
# both validators and pydantic map their locations to ``tools.pointer.json_pointer``.


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
