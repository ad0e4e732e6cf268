"""Tools declared with a pydantic model: its schema, its errors, its JSON form.

A model tool receives a model instance, not the argument dict, so the gate must
judge (policy, ledger hash) the value the model coerces the arguments to. These
helpers keep pydantic's side of that in one place: finding the model a bare
``@tools.tool`` function takes (if it takes one), mapping pydantic's errors to the same
pointer-and-keyword form as the schema validator's, and dumping a validated model
to the JSON form (by alias) that ``Tool.judged`` and ``Tool.handed`` compare.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from agent_gate.errors import (
    COERCION_UNSTABLE,
    ArgumentError,
    ArgumentsInvalid,
)
from agent_gate.tools.pointer import json_pointer

__all__ = ["coercion_unstable", "dump_model", "load_model", "model_of", "sole_model"]


def model_of(schema: object) -> type[BaseModel] | None:
    """``schema`` itself when it is a pydantic model class, else None."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema
    return None


def load_model(tool: str, model: type[BaseModel], arguments: Mapping[str, Any]) -> BaseModel:
    """The model instance the tool receives; ``ArgumentsInvalid`` without values."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        errors = {ArgumentError(json_pointer(list(e["loc"])), str(e["type"])) for e in exc.errors()}
        raise ArgumentsInvalid(tool, sorted(errors)) from None


def dump_model(tool: str, validated: BaseModel) -> dict[str, Any]:
    """The model's JSON form by alias (what the schema names); unserializable is unstable."""
    try:
        return validated.model_dump(mode="json", by_alias=True)
    except PydanticSerializationError:
        raise coercion_unstable(tool) from None


def coercion_unstable(tool: str) -> ArgumentsInvalid:
    """The refusal of a model whose coerced value is not the one it was judged as."""
    return ArgumentsInvalid(tool, [ArgumentError("", COERCION_UNSTABLE)])


def sole_model(fn: Callable[..., Any]) -> type[BaseModel] | None:
    """The pydantic model a function takes as its only argument, if it takes one.

    Such a function receives the model instance; any other function is declared by
    its signature (``signature``). Annotations that do not resolve are left to
    ``signature`` to report.
    """
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 1:
        return None
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # unresolved forward references: reported by signature_model
        return None
    return model_of(hints.get(params[0].name))
