"""Tools declared as plain typed functions: the schema read off the signature.

``@tools.tool`` on ``def refund(order: str, cents: Annotated[int, Field(gt=0)])``
must give the model and the gate one schema without a second declaration. The
signature becomes a pydantic model (one field per parameter, its type hint, its
default, ``Annotated[..., Field(...)]`` constraints and descriptions kept, extra
arguments forbidden), so a signature tool is validated, judged and handed exactly
like a tool declared with a model (``models``): the policy judges, and the ledger
hashes, the coerced values the function will receive. The function itself is
called with those values spread as keyword arguments (``spread``).

Only what a JSON object can carry is accepted: ``*args``, ``**kwargs``,
positional-only and unannotated parameters are refused at declaration, naming the
parameter, so a schema is never guessed.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from agent_gate.errors import ToolDefinitionError

__all__ = ["signature_model", "spread"]

_FORBID = ConfigDict(extra="forbid")


def _label(fn: Callable[..., Any]) -> str:
    return repr(getattr(fn, "__name__", fn))


def signature_model(fn: Callable[..., Any], name: str | None = None) -> type[BaseModel]:
    """A pydantic model whose fields are ``fn``'s parameters, for its JSON Schema."""
    label = repr(name) if name else _label(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolved forward references
        raise ToolDefinitionError(
            f"tool {label}: cannot resolve annotations ({type(exc).__name__})"
        ) from None
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"tool {label}: parameter {param.name!r} cannot be a JSON object member "
                "(no *args, **kwargs or positional-only); give schema="
            )
        if param.name not in hints:
            raise ToolDefinitionError(
                f"tool {label}: parameter {param.name!r} needs a type hint, or give schema="
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    model_name = f"{getattr(fn, '__name__', 'tool')}_arguments"
    try:
        return create_model(model_name, __config__=_FORBID, **fields)
    except Exception as exc:  # pydantic refuses the type or the field name
        raise ToolDefinitionError(
            f"tool {label}: its signature is not a schema ({type(exc).__name__}); give schema="
        ) from None


def spread(fn: Callable[..., Any], model: type[BaseModel]) -> Callable[..., Any]:
    """``fn`` as a model tool: it receives the validated model, ``fn`` its fields.

    Async stays async, so the gate runs it on the event loop as it would ``fn``.
    """
    names = tuple(model.model_fields)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(arguments: BaseModel) -> Any:
            return await fn(**{n: getattr(arguments, n) for n in names})

        return call_async

    @functools.wraps(fn)
    def call(arguments: BaseModel) -> Any:
        return fn(**{n: getattr(arguments, n) for n in names})

    return call
