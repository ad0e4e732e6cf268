"""Validating a call's arguments against its tool's JSON Schema: which validator a
tool gets, and whether its schema may be declared at all.

``reference.ReferenceValidator`` is python-jsonschema (Draft 2020-12, formats checked): it
decides every verdict and writes every error, as pointers and keywords that never
show a value. ``_fastpath.FastValidator`` has the same interface and may only say
yes sooner. ``compile_validator`` is the one site that picks between them, reading
``agent_gate._speedups.PURE_PYTHON``: with the switch set, every tool gets the
reference alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator

from agent_gate._speedups import PURE_PYTHON
from agent_gate.errors import ToolDefinitionError
from agent_gate.tools._fastpath import FastValidator
from agent_gate.tools.pointer import json_pointer
from agent_gate.tools.reference import ArgumentValidator, ReferenceValidator

__all__ = [
    "ArgumentValidator",
    "ReferenceValidator",
    "check_schema",
    "compile_validator",
]


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
