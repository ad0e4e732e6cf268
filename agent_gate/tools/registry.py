"""Tools bound to their functions, and the registry an agent's calls are looked up in.

A registry knows what each tool is and nothing about where calls are recorded: the
same registry can be bound to any ledger by ``Gate``. A ``Tool`` compiles its
validator once (``validate.compile_validator``) and turns arguments into what the
tool receives: ``validate`` checks them, ``judged`` gives the JSON form the policy
judges and the ledger hashes, ``handed`` rebuilds from that form the very value
the function gets.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack, overload

from pydantic import BaseModel

from agent_gate.errors import (
    ArgumentsInvalid,
    ArgumentsNotObject,
    ToolDefinitionError,
    UnknownTool,
    json_type_name,
)
from agent_gate.tools.definitions import definitions
from agent_gate.tools.models import coercion_unstable, dump_model, load_model, sole_model
from agent_gate.tools.signature import signature_model, spread
from agent_gate.tools.spec import ToolOptions, ToolSpec
from agent_gate.tools.validate import ArgumentValidator, compile_validator

__all__ = ["Tool", "ToolRegistry"]

F = TypeVar("F", bound=Callable[..., Any])


def _is_async(fn: Callable[..., Any]) -> bool:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    # An instance whose __call__ is async (callable objects used as tools).
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)


@dataclass(slots=True)
class Tool:
    """A spec bound to the function that runs it, with its validator compiled once."""

    spec: ToolSpec
    fn: Callable[..., Any]
    is_async: bool = field(init=False)
    validator: ArgumentValidator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.is_async = _is_async(self.fn)
        if self.is_async and self.spec.transactional:
            raise ToolDefinitionError(
                f"tool {self.spec.name!r}: a transactional tool is a sync function "
                "(it runs on the ledger's own connection)")
        self.validator = compile_validator(self.spec.schema)

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, arguments: object) -> dict[str, Any] | BaseModel:
        """Return what the tool receives: the argument dict, or the model instance."""
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise ArgumentsNotObject(self.name, json_type_name(arguments))
        args = dict(arguments)
        errors = self.validator.errors(args)
        if errors:
            raise ArgumentsInvalid(self.name, errors)
        if self.spec.model is None:
            return args
        return load_model(self.name, self.spec.model, args)

    def judged(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool will receive them, in JSON form.

        For a pydantic-model tool this is the coerced model dumped by alias (what
        the schema names), so the policy judges, the ledger hashes and ``handed``
        later rebuilds the very value the tool gets; a dict-schema tool receives its
        arguments unchanged. Raises ``ArgumentsInvalid`` as ``validate`` does.
        """
        validated = self.validate(arguments)
        if not isinstance(validated, BaseModel):
            return validated
        dumped = dump_model(self.name, validated)
        self.handed(dumped)  # the judged form must rebuild the same value: checked now
        return dumped

    def handed(self, judged: object) -> dict[str, Any] | BaseModel:
        """What the tool receives for arguments that ``judged`` produced.

        Validating the judged form again must give back the judged form: a model
        whose validators keep changing the value (not idempotent) would otherwise
        hand the tool something nobody judged, so that is refused
        (``ArgumentsInvalid`` with keyword ``coercion_unstable``).
        """
        validated = self.validate(judged)
        if isinstance(validated, BaseModel) and dump_model(self.name, validated) != judged:
            raise coercion_unstable(self.name)
        return validated

    def invoke(self, validated: Mapping[str, Any] | BaseModel) -> Any:
        """Call the function; for an async tool this returns the awaitable."""
        if isinstance(validated, BaseModel):
            return self.fn(validated)
        return self.fn(**validated)

    def dedupe_values(self, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The arguments that make up the tool's own idempotency key, if it declared one."""
        if self.spec.dedupe is None:
            return None
        return {name: arguments.get(name) for name in self.spec.dedupe}


class ToolRegistry:
    """The tools an agent may call, by name, independent of any ledger."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    # ----------------------------------------------------------------- register

    def register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        schema: Mapping[str, Any] | type[BaseModel] | None = None,
        **options: Unpack[ToolOptions],
    ) -> Tool:
        """Add one tool; the non-decorator form of ``tool`` (same schema rules)."""
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name:
            raise ToolDefinitionError("a tool function without a __name__ needs name=")
        if options.get("description") is None:
            options["description"] = inspect.getdoc(fn)
        if schema is None:
            schema = sole_model(fn)
            if schema is None:
                schema = signature_model(fn, tool_name)
                fn = spread(fn, schema)
        return self.add(ToolSpec.build(tool_name, schema=schema, **options), fn)

    def add(self, spec: ToolSpec, fn: Callable[..., Any]) -> Tool:
        """Bind an already-built spec to its function."""
        if spec.name in self._tools:
            raise ToolDefinitionError(f"tool {spec.name!r} is already registered")
        if not callable(fn):
            raise ToolDefinitionError(f"tool {spec.name!r}: function is not callable")
        tool = Tool(spec, fn)
        self._tools[spec.name] = tool
        return tool

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        schema: Mapping[str, Any] | type[BaseModel] | None = None,
        **options: Unpack[ToolOptions],
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        schema: Mapping[str, Any] | type[BaseModel] | None = None,
        **options: Unpack[ToolOptions],
    ) -> Any:
        """Decorator registering a function (sync or async) and returning it unchanged.

        Without ``schema=`` the function declares the tool itself: a single parameter
        annotated with a pydantic model is that model (the function receives the
        instance); otherwise every parameter's type hint, default and
        ``Annotated[..., Field(...)]`` constraints make the schema (``signature``),
        and the function receives the validated values as keyword arguments. The
        description is the docstring unless ``description=`` says otherwise; an
        explicit ``schema=`` always wins.
        """

        def decorate(func: F) -> F:
            self.register(func, name=name, schema=schema, **options)
            return func

        if fn is not None:
            return decorate(fn)
        return decorate

    def wrap(
        self,
        dispatch: Callable[[str, dict[str, Any]], Any],
        specs: Mapping[str, ToolSpec | Mapping[str, Any]],
    ) -> ToolRegistry:
        """Register an existing ``dispatch(name, arguments)`` under per-tool specs.

        For agents that already route calls themselves: the gate validates and records,
        then hands the validated argument dict to ``dispatch`` unchanged.
        """
        is_async = _is_async(dispatch)
        for tool_name, raw in specs.items():
            if isinstance(raw, ToolSpec):
                if raw.name != tool_name:
                    raise ToolDefinitionError(f"spec for {tool_name!r} is named {raw.name!r}")
                spec = raw
            else:
                spec = ToolSpec.build(tool_name, **dict(raw))
            if spec.model is not None:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: wrap() passes argument dicts; give a JSON Schema"
                )
            self.add(spec, _bind_dispatch(dispatch, tool_name, is_async))
        return self

    # -------------------------------------------------------------------- lookup

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownTool(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def validate(self, name: str, arguments: object) -> dict[str, Any] | BaseModel:
        """Validate a call's arguments against the named tool's schema."""
        return self[name].validate(arguments)

    def definitions(self, provider: str) -> list[dict[str, Any]]:
        """The tool list ``provider``'s API takes, from the schemas the gate checks.

        ``provider``: ``openai-responses``, ``openai-chat``, ``anthropic``, ``gemini``
        or ``mcp`` (``agent_gate.tools.definitions`` says what each gets).
        """
        return definitions((t.spec for t in self), provider)


def _bind_dispatch(
    dispatch: Callable[[str, dict[str, Any]], Any], name: str, is_async: bool
) -> Callable[..., Any]:
    if is_async:

        async def call_async(**arguments: Any) -> Any:
            return await dispatch(name, arguments)

        call_async.__name__ = name
        return call_async

    def call(**arguments: Any) -> Any:
        return dispatch(name, arguments)

    call.__name__ = name
    return call
