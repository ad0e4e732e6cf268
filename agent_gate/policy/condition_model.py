"""A condition as a policy file writes it: one test on one value, or a combination
of conditions; and the arguments its predicates take.

A condition is a mapping with either exactly one combinator (``all``, ``any``,
``not``) or exactly one predicate plus its subject (``arg``, ``principal``,
``task``; or ``field`` / nothing inside ``each`` / ``some``). The subject rules
depend on where a condition sits, so they are checked by the loader after this
model validated the shape. Values a condition compares against must be plain JSON
(no YAML dates, no NaN).

Why a module below ``policy.model``: a rule's ``when`` and an approval grant's
``when`` (``policy.approval_model``) are both lists of conditions, and the predicates
and evaluator (``policy.predicates``, ``policy.conditions``) read these models
without needing the rest of the file format.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_serializer,
    model_validator,
)

from agent_gate.policy.regex import (
    DEFAULT_MAX_INPUT,
    MAX_INPUT_LIMIT,
    compile_pattern,
)
from agent_gate.policy.scalars import (
    STRICT,
    AbsoluteRoot,
    ArgPathText,
    DomainPattern,
    IpEntry,
    JsonValue,
    NonNegInt,
    Number,
    Port,
    PrincipalPath,
    PriorPath,
    Scheme,
    TaskPath,
)

__all__ = [
    "COMBINATORS",
    "PREDICATES",
    "SUBJECTS",
    "Condition",
    "NumberBounds",
    "PathUnderSpec",
    "RegexSpec",
    "SizeBounds",
    "UrlSpec",
]


class _Model(BaseModel):
    model_config = STRICT


# --- predicate arguments ------------------------------------------------------------


class NumberBounds(_Model):
    """``number: {min: 0, max: 500}``: inclusive ``min``/``max``, exclusive ``gt``/``lt``."""

    min: Number | None = None
    max: Number | None = None
    gt: Number | None = None
    lt: Number | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> NumberBounds:
        if self.min is None and self.max is None and self.gt is None and self.lt is None:
            raise ValueError("give at least one of min, max, gt, lt")
        lows = [v for v in (self.min, self.gt) if v is not None]
        highs = [v for v in (self.max, self.lt) if v is not None]
        if lows and highs and max(lows) > min(highs):
            raise ValueError("lower bound is above the upper bound")
        return self


class SizeBounds(_Model):
    """``length: {max: 200}`` / ``bytes: {max: 65536}``: inclusive, non-negative."""

    min: NonNegInt | None = None
    max: NonNegInt | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> SizeBounds:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max")
        return self


class RegexSpec(_Model):
    """``matches: "[A-Z]{3}-[0-9]{4}"`` or the long form with caps and flags."""

    pattern: StrictStr
    max_input: Annotated[StrictInt, Field(ge=1, le=MAX_INPUT_LIMIT)] = DEFAULT_MAX_INPUT
    unicode: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"pattern": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _compiles(self) -> RegexSpec:
        compile_pattern(self.pattern, self.unicode)
        return self


class PathUnderSpec(_Model):
    """``path_under: /srv/files`` (or a list, or ``{roots: [...], allow_root: true}``)."""

    roots: Annotated[list[AbsoluteRoot], Field(min_length=1)]
    allow_root: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str | list):
            return {"roots": [data] if isinstance(data, str) else data}
        return data


class UrlSpec(_Model):
    """``url: {schemes: [https], hosts: [api.example.com, "*.example.com"], ports: [443]}``."""

    schemes: Annotated[list[Scheme], Field(min_length=1)] | None = None
    hosts: Annotated[list[DomainPattern], Field(min_length=1)] | None = None
    ports: Annotated[list[Port], Field(min_length=1)] | None = None
    ip_in: Annotated[list[IpEntry], Field(min_length=1)] | None = None
    ip_literal: StrictBool | None = None

    @model_validator(mode="after")
    def _some_check(self) -> UrlSpec:
        if all(
            v is None for v in (self.schemes, self.hosts, self.ports, self.ip_in, self.ip_literal)
        ):
            raise ValueError("give at least one of schemes, hosts, ports, ip_in, ip_literal")
        return self


# --- conditions --------------------------------------------------------------------

COMBINATORS: Final = ("all", "any", "not")
SUBJECTS: Final = ("arg", "principal", "task", "field", "prior")
PREDICATES: Final = (
    "equals",
    "in",
    "contains",
    "contains_any",
    "contains_all",
    "number",
    "length",
    "bytes",
    "matches",
    "absent",
    "each",
    "some",
    "path_under",
    "url",
    "ip_in",
    "email_domain",
    "cel",
)


class Condition(_Model):
    """One test on one value, or a combination of conditions. See the module docstring."""

    all_: Annotated[list[Condition], Field(min_length=1)] | None = Field(None, alias="all")
    any_: Annotated[list[Condition], Field(min_length=1)] | None = Field(None, alias="any")
    not_: Condition | None = Field(None, alias="not")

    arg: ArgPathText | None = None
    principal: PrincipalPath | None = None
    task: TaskPath | None = None
    field_: ArgPathText | None = Field(None, alias="field")
    prior: PriorPath | None = None
    """``<tool>.<argument path>``: that argument of the task's latest succeeded call of
    the tool (absent when there is none)."""

    equals: JsonValue = None
    in_: list[JsonValue] | None = Field(None, alias="in")
    contains: JsonValue = None
    contains_any: Annotated[list[JsonValue], Field(min_length=1)] | None = None
    contains_all: Annotated[list[JsonValue], Field(min_length=1)] | None = None
    number: NumberBounds | None = None
    length: SizeBounds | None = None
    bytes_: SizeBounds | None = Field(None, alias="bytes")
    matches: RegexSpec | None = None
    absent: StrictBool | None = None
    each: Condition | None = None
    some: Condition | None = None
    path_under: PathUnderSpec | None = None
    url: UrlSpec | None = None
    ip_in: Annotated[list[IpEntry], Field(min_length=1)] | None = None
    email_domain: Annotated[list[DomainPattern], Field(min_length=1)] | None = None
    cel: Annotated[StrictStr, StringConstraints(min_length=1, max_length=4000)] | None = None
    """A CEL expression over ``args``, ``principal``, ``task``, ``tool`` and ``usage``
    (``celexpr``); it names its values itself, so it takes no subject."""

    def _given(self, names: tuple[str, ...]) -> list[str]:
        given = {(Condition.model_fields[f].alias or f) for f in self.model_fields_set}
        return [n for n in names if n in given]

    @property
    def combinator(self) -> str | None:
        found = self._given(COMBINATORS)
        return found[0] if found else None

    @property
    def predicate(self) -> str | None:
        found = self._given(PREDICATES)
        return found[0] if found else None

    @property
    def subjects(self) -> list[str]:
        return self._given(SUBJECTS)

    def operand(self, name: str) -> Any:
        """The value of predicate or combinator ``name`` as written (alias-aware)."""
        attr = {"all": "all_", "any": "any_", "not": "not_", "in": "in_", "bytes": "bytes_"}
        return getattr(self, attr.get(name, name))

    @model_validator(mode="after")
    def _one_thing(self) -> Condition:
        combinators = self._given(COMBINATORS)
        predicates = self._given(PREDICATES)
        subjects = self._given(SUBJECTS)
        if combinators:
            others = combinators[1:] + predicates + subjects
            if others:
                raise ValueError(
                    f"'{combinators[0]}' combines conditions and cannot be mixed with "
                    f"{', '.join(repr(o) for o in others)} in the same mapping"
                )
            return self
        if len(predicates) != 1:
            found = ", ".join(predicates) if predicates else "none"
            raise ValueError(
                f"a condition needs exactly one predicate (one of: {', '.join(PREDICATES)}); "
                f"found: {found}"
            )
        if len(subjects) > 1:
            raise ValueError(f"a condition tests one subject; found: {', '.join(subjects)}")
        return self

    @model_serializer(mode="wrap")
    def _only_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        # ``equals: null`` and "no equals" differ; keep exactly the keys that were written.
        data = handler(self)
        keep = set()
        for name in self.model_fields_set:
            keep.add(name)
            alias = Condition.model_fields[name].alias
            if alias:
                keep.add(alias)
        return {k: v for k, v in data.items() if k in keep}


Condition.model_rebuild()
