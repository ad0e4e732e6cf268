"""What a tool is, independent of the function that runs it.

A ``ToolSpec`` knows a tool's JSON Schema, how dangerous it is (``Effect``),
whether it may safely run twice (``Idempotency``), and how a call whose outcome
is unknown is reconciled (``CallInfo`` in, ``Reconciliation``/``Reconciled``
out). These enums are the only ones of their kind in the package: the policy
layer, which sits above the tools, makes them more careful and never defines its
own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict, TypeVar, Unpack

from pydantic import BaseModel

from agent_gate.errors import ToolDefinitionError
from agent_gate.tools.models import model_of
from agent_gate.tools.validate import check_schema

__all__ = [
    "DISPATCH_MODES",
    "CallInfo",
    "Effect",
    "Idempotency",
    "Reconciled",
    "Reconciliation",
    "ToolOptions",
    "ToolSpec",
]

DISPATCH_MODES = frozenset({"on_call_complete", "on_response_complete"})
"""Spelled as the accumulator's ``DispatchMode`` values; kept as strings here so the
registry does not import the streaming layers."""


class Effect(StrEnum):
    """What running the tool does to the world; decides when a call may be dispatched.

    Ordered from least to most careful handling: ``read`` < ``write`` <
    ``destructive``. A policy may only move a tool up this order.
    """

    READ = "read"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


class Idempotency(StrEnum):
    """Whether a call whose outcome is unknown may be run again.

    Ordered from least to most careful: ``natural`` < ``key`` < ``none``, the safe
    end: a policy that says ``none`` makes the gate leave an interrupted call in
    doubt instead of retrying it.
    """

    NATURAL = "natural"
    """Running it twice has the effect of running it once (a PUT, a read)."""
    KEY = "key"
    """The tool forwards the gate's stable idempotency key downstream, which dedupes."""
    NONE = "none"
    """Never run twice: an unknown outcome stays ``in_doubt`` until reconciled."""

    @property
    def retry_safe(self) -> bool:
        """A second run cannot double the side effect (the tool or its downstream dedupes)."""
        return self is not Idempotency.NONE


class Reconciliation(StrEnum):
    """What a reconcile hook (or an operator) found out about a call left in doubt."""

    SUCCEEDED = "succeeded"
    """The write happened: the call settles as succeeded, with the reported result."""
    FAILED = "failed"
    """The call failed downstream: it settles as failed, with the reported error."""
    NOT_APPLIED = "not_applied"
    """The write did not happen: the call may be authorized to run again."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A reconcile answer that also carries what the downstream system reported."""

    status: Reconciliation
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What a reconcile hook (and a tool, through ``current_call()``) knows of a call.

    ``idempotency_key`` is stable across attempts, so a ``key`` tool can hand it to a
    downstream API and a reconcile hook can look the write up by it.
    """

    task_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any] | None
    idempotency_key: str
    attempt: int


class ToolOptions(TypedDict, total=False):
    """The options every way of declaring a tool takes, spelled once.

    ``ToolSpec.build``, ``ToolRegistry.register``, ``ToolRegistry.tool`` and the
    spec mappings of ``ToolRegistry.wrap`` all accept exactly these keywords.
    """

    effect: Effect | str
    idempotency: Idempotency | str
    dedupe: Sequence[str] | None
    reconcile: Callable[[CallInfo], Any] | None
    timeout: float | None
    dispatch: object | None
    description: str | None
    transactional: bool


E = TypeVar("E", bound=StrEnum)


def _coerce_enum(enum: type[E], value: object, what: str) -> E:
    raw = getattr(value, "value", value)
    try:
        if not isinstance(raw, str):
            raise ValueError(raw)
        return enum(raw)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ToolDefinitionError(f"{what} must be one of {allowed}, got {raw!r}") from None


def _dedupe(
    name: str, dedupe: Sequence[str] | None, schema: Mapping[str, Any]
) -> tuple[str, ...] | None:
    if dedupe is None:
        return None
    if isinstance(dedupe, str) or not dedupe:
        raise ToolDefinitionError(f"tool {name!r}: dedupe must be a non-empty list")
    names = tuple(dedupe)
    props = schema.get("properties")
    if isinstance(props, Mapping):
        unknown = [d for d in names if d not in props]
        if unknown:
            raise ToolDefinitionError(
                f"tool {name!r}: dedupe names arguments the schema does not "
                f"declare: {', '.join(unknown)}"
            )
    return names


def _dispatch(name: str, dispatch: object | None) -> str | None:
    if dispatch is None:
        return None
    mode = str(getattr(dispatch, "value", dispatch))
    if mode not in DISPATCH_MODES:
        raise ToolDefinitionError(
            f"tool {name!r}: dispatch must be one of {', '.join(sorted(DISPATCH_MODES))}"
        )
    return mode


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Everything the gate needs to decide about a call, independent of its function.

    ``schema`` is always a JSON Schema dict; when the tool was declared with a
    pydantic model, ``model`` is that model and ``schema`` is its JSON Schema.
    """

    name: str
    schema: Mapping[str, Any]
    model: type[BaseModel] | None = None
    effect: Effect = Effect.READ
    idempotency: Idempotency = Idempotency.NONE
    dedupe: tuple[str, ...] | None = None
    reconcile: Callable[[CallInfo], Any] | None = None
    timeout: float | None = None
    dispatch: str | None = None
    description: str | None = None
    transactional: bool = False
    """Its writes live in the ledger's own database: it runs inside the transaction
    that commits its outcome (``agent_gate.gate.transactional``), never in doubt."""

    @classmethod
    def build(
        cls,
        name: str,
        *,
        schema: Mapping[str, Any] | type[BaseModel],
        **options: Unpack[ToolOptions],
    ) -> ToolSpec:
        """Normalize user-facing options and reject bad ones before any call arrives."""
        unknown = sorted(set(options) - ToolOptions.__optional_keys__)
        if unknown:
            raise TypeError(f"ToolSpec.build() got unexpected keyword arguments: {unknown}")
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError("a tool needs a non-empty string name")
        model = model_of(schema)
        if model is not None:
            schema_dict: Mapping[str, Any] = model.model_json_schema()
        elif isinstance(schema, Mapping):
            schema_dict = schema
        else:
            raise ToolDefinitionError(
                f"tool {name!r}: schema must be a JSON Schema dict or a pydantic model"
            )
        check_schema(name, schema_dict)
        dedupe = _dedupe(name, options.get("dedupe"), schema_dict)
        timeout = options.get("timeout")
        if timeout is not None and not timeout > 0:
            raise ToolDefinitionError(f"tool {name!r}: timeout must be positive seconds")
        dispatch = _dispatch(name, options.get("dispatch"))
        reconcile = options.get("reconcile")
        if reconcile is not None and not callable(reconcile):
            raise ToolDefinitionError(f"tool {name!r}: reconcile must be callable")
        transactional = options.get("transactional", False)
        if not isinstance(transactional, bool):
            raise ToolDefinitionError(f"tool {name!r}: transactional must be True or False")
        if transactional and timeout is not None:
            raise ToolDefinitionError(
                f"tool {name!r}: a transactional tool has no timeout (its transaction "
                "cannot be left running)")
        return cls(
            name=name,
            schema=schema_dict,
            model=model,
            effect=_coerce_enum(
                Effect, options.get("effect", Effect.READ), f"tool {name!r}: effect"
            ),
            idempotency=_coerce_enum(
                Idempotency,
                options.get("idempotency", Idempotency.NONE),
                f"tool {name!r}: idempotency",
            ),
            dedupe=dedupe,
            reconcile=reconcile,
            timeout=float(timeout) if timeout is not None else None,
            dispatch=dispatch,
            description=options.get("description"),
            transactional=transactional,
        )
