"""The reference validator: python-jsonschema (Draft 2020-12, formats checked) over
one tool's schema. It decides every verdict and writes every error, as pointers and
keywords that never show a value.

It sits under both ``_fastpath`` (whose ``FastValidator`` wraps one and defers to it)
and ``validate`` (the one site that picks between the two), so neither imports the
other back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from jsonschema import Draft202012Validator

from agent_gate.errors import ArgumentError
from agent_gate.tools.pointer import escape_token, json_pointer

__all__ = ["ArgumentValidator", "ReferenceValidator"]


class ArgumentValidator(Protocol):
    """What a tool asks of its validator: the errors of an argument object, if any."""

    def errors(self, instance: Mapping[str, Any]) -> list[ArgumentError]:
        """Sorted, deduplicated errors; empty when the instance is valid."""
        ...


class ReferenceValidator:
    """python-jsonschema over one schema, compiled once; the judge of every verdict."""

    __slots__ = ("python", "schema")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self.python = Draft202012Validator(
            schema, format_checker=Draft202012Validator.FORMAT_CHECKER
        )

    def errors(self, instance: Mapping[str, Any]) -> list[ArgumentError]:
        """Every failure as (pointer, keyword), sorted; never an argument value."""
        found: set[ArgumentError] = set()
        for err in self.python.iter_errors(instance):
            pointer = json_pointer(list(err.absolute_path))
            keyword = str(err.validator)
            if keyword == "required" and isinstance(err.instance, Mapping):
                # Point at the missing member itself: its name comes from the schema,
                # so naming it reveals nothing the model sent.
                for name in err.validator_value:
                    if name not in err.instance:
                        found.add(ArgumentError(pointer + "/" + escape_token(name), keyword))
                continue
            found.add(ArgumentError(pointer, keyword))
        return sorted(found)
