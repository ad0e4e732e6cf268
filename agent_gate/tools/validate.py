"""Validating a call's arguments against its tool's JSON Schema: the reference.

``ReferenceValidator`` is python-jsonschema (Draft 2020-12, formats checked): it
decides every verdict and writes every error, as pointers and keywords that never
show a value. ``_fastpath.FastValidator`` has the same interface and may only say
yes sooner. ``compile_validator`` is the one site that picks between them, reading
``agent_gate._speedups.PURE_PYTHON``: with the switch set, every tool gets the
reference alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import jsonschema
from jsonschema import Draft202012Validator

from agent_gate._speedups import PURE_PYTHON
from agent_gate.errors import ArgumentError, ToolDefinitionError
from agent_gate.tools._fastpath import FastValidator
from agent_gate.tools.pointer import escape_token, json_pointer

__all__ = [
    "ArgumentValidator",
    "ReferenceValidator",
    "check_schema",
    "compile_validator",
]


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


def compile_validator(schema: Mapping[str, Any]) -> ReferenceValidator | FastValidator:
    """The validator a tool keeps: the fast path where it may answer, else the reference."""
    reference = ReferenceValidator(schema)
    if PURE_PYTHON:
        return reference
    return FastValidator.build(reference) or reference


def check_schema(name: str, schema: Mapping[str, Any]) -> None:
    """Refuse, at declaration, a schema that is not valid Draft 2020-12 for an object."""
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = json_pointer(list(exc.absolute_path)) or "/"
        raise ToolDefinitionError(
            f"tool {name!r}: schema is not valid Draft 2020-12 at {where} ({exc.validator})"
        ) from None
    if schema.get("type", "object") != "object":
        raise ToolDefinitionError(f"tool {name!r}: schema must describe a JSON object")
