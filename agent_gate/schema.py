"""Tool registry and argument validation.

A registry knows what each tool is (its JSON Schema, how dangerous it is, whether it
may safely run twice) and nothing about where calls are recorded: the same registry
can be bound to any ledger by ``Gate``. Validation errors are reported as JSON
pointers plus the failed schema keyword and never echo an argument value, because
those errors end up in logs, in the ledger and in the transcript sent back to the
model.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar, overload

import jsonschema
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from agent_gate._speedups import PURE_PYTHON
from agent_gate.errors import AgentGateError
from agent_gate.plainjson import plain_json

try:
    import jsonschema_rs
except ImportError:  # pragma: no cover - the pure-Python path decides alone
    jsonschema_rs = None

__all__ = [
    "ArgumentError",
    "ArgumentsInvalid",
    "ArgumentsNotObject",
    "CallInfo",
    "Effect",
    "Idempotency",
    "Reconciled",
    "Reconciliation",
    "Tool",
    "ToolDefinitionError",
    "ToolRegistry",
    "ToolSpec",
    "UnknownTool",
]

F = TypeVar("F", bound=Callable[..., Any])

DISPATCH_MODES = frozenset({"on_call_complete", "on_response_complete"})
"""Spelled as the accumulator's ``DispatchMode`` values; kept as strings here so the
registry does not import the streaming layers."""


class Effect(StrEnum):
    """What running the tool does to the world; decides when a call may be dispatched."""

    READ = "read"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


class Idempotency(StrEnum):
    """Whether a call whose outcome is unknown may be run again."""

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
    """What a reconcile hook found out about a call whose outcome was unknown."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_APPLIED = "not_applied"


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


# --------------------------------------------------------------------------- errors


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


# ----------------------------------------------------------------------- pointers


def _escape(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def json_pointer(path: Sequence[str | int]) -> str:
    """RFC 6901 pointer: the one location format both jsonschema and pydantic map to."""
    return "".join("/" + _escape(p) for p in path)


def json_type_name(value: object) -> str:
    """The JSON type a Python value stands for, for messages that must not show it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _schema_errors(validator: Draft202012Validator, instance: Any) -> list[ArgumentError]:
    found: set[ArgumentError] = set()
    for err in validator.iter_errors(instance):
        pointer = json_pointer(list(err.absolute_path))
        keyword = str(err.validator)
        if keyword == "required" and isinstance(err.instance, Mapping):
            # Point at the missing member itself: its name comes from the schema, so
            # naming it reveals nothing the model sent.
            for name in err.validator_value:
                if name not in err.instance:
                    found.add(ArgumentError(pointer + "/" + _escape(name), keyword))
            continue
        found.add(ArgumentError(pointer, keyword))
    return sorted(found)


def _pydantic_errors(exc: ValidationError) -> list[ArgumentError]:
    return sorted(
        {ArgumentError(json_pointer(list(e["loc"])), str(e["type"])) for e in exc.errors()}
    )


# --------------------------------------------------------- compiled accept path


_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_SCHEMA_KEYWORDS = frozenset(
    {
        "properties",
        "additionalProperties",
        "items",
        "not",
        "$defs",
        "prefixItems",
        "anyOf",
        "oneOf",
        "allOf",
    }
)
_VALUE_KEYWORDS = frozenset(
    {
        "type",
        "required",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "pattern",
        "format",
        "$ref",
        "$schema",
    }
)
VETTED_KEYWORDS = _ANNOTATIONS | _SCHEMA_KEYWORDS | _VALUE_KEYWORDS
"""Keywords for which a jsonschema-rs "valid" was checked to imply python-jsonschema's
"valid" on plain JSON instances (tests/schema/test_fast_validation.py). Left out on
purpose, among others: ``multipleOf`` (rs accepts 0.07 as a multiple of 0.01, Python
does not), ``patternProperties``, ``$id``, ``$dynamicRef``, ``unevaluated*``."""

_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_LOCAL_REF = re.compile(r"#/\$defs/[A-Za-z0-9_.\-]+")
_QUANTIFIER = re.compile(r"\{[0-9]+(,[0-9]*)?\}\??")
_ESCAPABLE = frozenset("\\.-/[](){}*+?|^$")
_LITERAL = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-@:/,;=!<>'\"%#`"
)
_LITERAL_IN_CLASS = (_LITERAL - {"-"}) | frozenset(".*+?(){}$")
NATIVE_FORMATS = frozenset({"email", "uuid", "ipv4"})
"""Formats jsonschema-rs checks itself: for these an rs "valid" implies Python's
(Python's email check is only "contains @", its uuid check accepts every canonical
hyphenated UUID, rs's ipv4 refuses what ``ipaddress`` refuses: leading zeros,
octets above 255). Every other format is checked by Python's function, called from
rs: rs accepts a leap second in a date-time, for one, which Python does not."""

_PCT = "%[0-9A-Fa-f]{2}"
_PCHAR = f"(?:[A-Za-z0-9_.~!$&'()*+,;=:@-]|{_PCT})"
_QUERY = f"(?:[A-Za-z0-9_.~!$&'()*+,;=:@/?-]|{_PCT})*"
_URI_SUBSET = (
    "^[A-Za-z][A-Za-z0-9+.-]*:"
    f"(?://(?:(?:[A-Za-z0-9_.~!$&'()*+,;=:-]|{_PCT})*@)?"  # userinfo
    f"(?:[A-Za-z0-9_.~!$&'()*+,;=-]|{_PCT})*"  # reg-name (an IPv4 address is one too)
    f"(?::[0-9]*)?(?:/{_PCHAR}*)*"  # port, path-abempty
    f"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"  # path-absolute
    f"|{_PCHAR}+(?:/{_PCHAR}*)*"  # path-rootless
    ")?"  # or empty
    f"(?:\\?{_QUERY})?(?:#{_QUERY})?$"
)
_DATE_TIME_SUBSET = (
    "^[1-9][0-9]{3}-"
    "(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"  # any month has 28 days
    "|(?:0[13-9]|1[0-2])-(?:29|30)"  # all but February have 30
    "|(?:0[13578]|1[02])-31)"
    "[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
    "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)
SUBSET_PATTERNS = {"uri": _URI_SUBSET, "date-time": _DATE_TIME_SUBSET}
"""For formats rs leaves to Python's checker: a pattern whose every match that
checker accepts, so that rs tries the pattern natively first and calls Python (about
1.5 us a string) only for what the pattern does not cover. ``uri`` is
``rfc3986_validator``'s own grammar without IP literals (``http://[::1]/``);
``date-time`` is ``rfc3339_validator``'s without February 29th or years before
1000, so that the calendar check is never needed. Python's own function stays
the judge of everything else (tests/schema/test_fast_validation.py)."""

_SUBSET_CHECKERS = {
    "uri": ("is_uri", "rfc3986_validator", "validate_rfc3986"),
    "date-time": ("is_datetime", "rfc3339_validator", "validate_rfc3339"),
}


def _subset_pattern(name: str, entry: object) -> str | None:
    """``SUBSET_PATTERNS[name]`` if ``entry`` is the checker it was written against.

    jsonschema picks its ``uri`` and ``date-time`` functions by what is installed
    (``rfc3987`` first, for one), and anyone may register their own: the pattern is
    used only when the registered function is jsonschema's own and calls the very
    library whose grammar the pattern is a part of.
    """
    pattern = SUBSET_PATTERNS.get(name)
    if pattern is None or not isinstance(entry, tuple) or not entry:
        return None
    func = entry[0]
    function, module, implementation = _SUBSET_CHECKERS[name]
    if (
        getattr(func, "__module__", None) != "jsonschema._format"
        or getattr(func, "__name__", None) != function
    ):
        return None
    library = getattr(sys.modules.get(module), implementation, None)
    scope = getattr(func, "__globals__", {})
    if library is None or scope.get(implementation) is not library:
        return None
    if name == "uri" and "rfc3987" in scope:
        return None
    return pattern


def _with_subset_patterns(schema: object, patterns: Mapping[str, str]) -> object:
    """``schema`` with each ``format`` in ``patterns`` moved to ``anyOf: [pattern, format]``.

    Equivalent for validity: the pattern's matches are a subset of the format's, and
    ``allOf`` adds the check next to the node's other keywords. rs stops at the
    first branch of ``anyOf`` that holds, so the Python checker runs only on misses.
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            out[key] = {name: _with_subset_patterns(sub, patterns) for name, sub in value.items()}
        elif key in ("prefixItems", "anyOf", "oneOf", "allOf"):
            out[key] = [_with_subset_patterns(sub, patterns) for sub in value]
        elif key in _SCHEMA_KEYWORDS:
            out[key] = _with_subset_patterns(value, patterns)
        else:
            out[key] = value
    name = out.get("format")
    if isinstance(name, str) and name in patterns:
        del out["format"]
        check = {"anyOf": [{"pattern": patterns[name]}, {"format": name}]}
        out["allOf"] = [*out.get("allOf", ()), check]
    return out


def vetted_pattern(pattern: str) -> bool:
    """Whether Python's ``re`` and jsonschema-rs's regex engine read ``pattern`` alike.

    Only a small, common syntax: ASCII literals, escaped metacharacters, classes of
    ASCII literals and ranges, groups, ``(?:``, alternation, ``^``, ``$``, ``.`` and
    quantifiers. Outside it the engines differ (``\\d``/``\\w`` Unicode tables, class
    set operations ``&&``/``--`` in Rust, inline flags, a literal ``{``). Where they
    still differ inside it, Python is the more lenient (its ``$`` also matches
    before a final newline), which only ever sends a call to the Python validator.
    """
    i, n = 0, len(pattern)
    atom = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1] not in _ESCAPABLE:
                return False
            i += 2
            atom = True
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            start = j
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\":
                    if j + 1 >= n or pattern[j + 1] not in _ESCAPABLE:
                        return False
                    j += 2
                elif pattern[j] == "-":
                    # A range between two literals, or a leading/trailing hyphen.
                    if pattern[j - 1] == "-" or (j + 1 < n and pattern[j + 1] == "-"):
                        return False
                    j += 1
                elif pattern[j] in _LITERAL_IN_CLASS:
                    j += 1
                else:
                    return False
            if j >= n or j == start:
                return False
            i = j + 1
            atom = True
        elif c == "(":
            if pattern.startswith("(?", i):
                if not pattern.startswith("(?:", i):
                    return False
                i += 3
            else:
                i += 1
            atom = False
        elif c in "*+?":
            if not atom:
                return False
            i += 2 if pattern.startswith("?", i + 1) else 1
            atom = False
        elif c == "{":
            match = _QUANTIFIER.match(pattern, i)
            if match is None or not atom:
                return False
            i = match.end()
            atom = False
        elif c in "^$|":
            i += 1
            atom = False
        elif c == ")" or c == "." or c in _LITERAL:
            i += 1
            atom = True
        else:
            return False
    return True


def _vetted_schema(schema: object, formats: set[str]) -> bool:
    """Whether every keyword of ``schema`` (at any depth) is in ``VETTED_KEYWORDS``, with
    ``$defs`` only at the root and ``$ref`` only to those, never in a cycle (Python
    recurses forever on ``{"$ref": "#/$defs/d"}`` defined as itself); collects the
    formats it names."""
    if not isinstance(schema, dict):
        return False
    defs = schema.get("$defs", {})
    if not isinstance(defs, dict):
        return False
    root_refs: set[str] = set()
    if not _vetted_node({k: v for k, v in schema.items() if k != "$defs"}, formats, root_refs):
        return False
    graph: dict[str, set[str]] = {}
    for name, sub in defs.items():
        graph[name] = set()
        if not _vetted_node(sub, formats, graph[name]):
            return False
    if not all(ref in graph for refs in (root_refs, *graph.values()) for ref in refs):
        return False
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def acyclic(name: str) -> bool:
        if state.get(name) == 2:
            return True
        if state.get(name) == 1:
            return False
        state[name] = 1
        ok = all(acyclic(ref) for ref in graph[name])
        state[name] = 2
        return ok

    return all(acyclic(name) for name in graph)


def _vetted_node(schema: object, formats: set[str], refs: set[str]) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key not in VETTED_KEYWORDS or key == "$defs":
            return False
        if key == "properties":
            if not isinstance(value, dict):
                return False
            if not all(_vetted_node(sub, formats, refs) for sub in value.values()):
                return False
        elif key in ("prefixItems", "anyOf", "oneOf", "allOf"):
            if not isinstance(value, list):
                return False
            if not all(_vetted_node(sub, formats, refs) for sub in value):
                return False
        elif key in _SCHEMA_KEYWORDS:
            if not _vetted_node(value, formats, refs):
                return False
        elif key == "pattern":
            if not isinstance(value, str) or not vetted_pattern(value):
                return False
        elif key == "format":
            if not isinstance(value, str):
                return False
            formats.add(value)
        elif key == "$ref":
            if not isinstance(value, str) or not _LOCAL_REF.fullmatch(value):
                return False
            refs.add(value[len("#/$defs/") :])
        elif key == "$schema":
            if value != _DRAFT_2020_12:
                return False
        elif key not in _ANNOTATIONS and not plain_json(value):
            return False
    return True


class _FastAccept:
    """jsonschema-rs as an accept-only shortcut in front of python-jsonschema.

    Built only for schemas inside ``VETTED_KEYWORDS`` and ``vetted_pattern``. Formats
    outside ``NATIVE_FORMATS`` are checked by python-jsonschema's own checker
    function, called from rs, so their verdicts are Python's by construction (after
    a ``SUBSET_PATTERNS`` match, which only ever says yes where Python does); rs's
    stricter "email" only ever sends a call to Python. ``accepts`` answers True only
    when rs says valid for a plain JSON instance and the format checkers are still
    the ones it was built with; False means "ask Python", whose verdict and errors
    are final.
    """

    __slots__ = ("_checkers", "_formats", "_is_valid")

    def __init__(self, is_valid: Callable[[Any], bool], formats: dict[str, object]) -> None:
        self._is_valid = is_valid
        self._checkers = Draft202012Validator.FORMAT_CHECKER.checkers
        self._formats = tuple(formats.items())

    @classmethod
    def build(cls, schema: Mapping[str, Any]) -> _FastAccept | None:
        if jsonschema_rs is None or PURE_PYTHON:
            return None
        formats: set[str] = set()
        if not _vetted_schema(schema, formats):
            return None
        checker = Draft202012Validator.FORMAT_CHECKER

        def python_format(name: str) -> Callable[[str], bool]:
            return lambda value: checker.conforms(value, name)

        subsets = {
            name: pattern
            for name in formats
            if name not in NATIVE_FORMATS
            and (pattern := _subset_pattern(name, checker.checkers.get(name))) is not None
        }
        try:
            validator = jsonschema_rs.Draft202012Validator(
                _with_subset_patterns(schema, subsets),
                validate_formats=True,
                formats={
                    name: python_format(name) for name in formats if name not in NATIVE_FORMATS
                },
            )
        except Exception:  # a schema rs cannot compile: Python validates it
            return None
        return cls(validator.is_valid, {f: checker.checkers.get(f) for f in formats})

    def accepts(self, instance: object) -> bool:
        checkers = self._checkers
        for name, entry in self._formats:
            if checkers.get(name) is not entry:
                return False  # a format checker was (re)registered since: ask Python
        if not plain_json(instance):
            return False
        try:
            return self._is_valid(instance) is True
        except Exception:  # whatever rs cannot read, Python can
            return False


# -------------------------------------------------------------------------- specs


def _coerce_enum(enum: type[StrEnum], value: object, what: str) -> Any:
    raw = getattr(value, "value", value)
    try:
        if not isinstance(raw, str):
            raise ValueError(raw)
        return enum(raw)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ToolDefinitionError(f"{what} must be one of {allowed}, got {raw!r}") from None


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

    @classmethod
    def build(
        cls,
        name: str,
        *,
        schema: Mapping[str, Any] | type[BaseModel],
        effect: Effect | str = Effect.READ,
        idempotency: Idempotency | str = Idempotency.NONE,
        dedupe: Sequence[str] | None = None,
        reconcile: Callable[[CallInfo], Any] | None = None,
        timeout: float | None = None,
        dispatch: object | None = None,
        description: str | None = None,
    ) -> ToolSpec:
        """Normalize user-facing options and reject bad ones before any call arrives."""
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError("a tool needs a non-empty string name")
        model: type[BaseModel] | None = None
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            model = schema
            schema_dict: Mapping[str, Any] = schema.model_json_schema()
        elif isinstance(schema, Mapping):
            schema_dict = schema
        else:
            raise ToolDefinitionError(
                f"tool {name!r}: schema must be a JSON Schema dict or a pydantic model"
            )
        try:
            Draft202012Validator.check_schema(schema_dict)
        except jsonschema.SchemaError as exc:
            where = json_pointer(list(exc.absolute_path)) or "/"
            raise ToolDefinitionError(
                f"tool {name!r}: schema is not valid Draft 2020-12 at {where} ({exc.validator})"
            ) from None
        if schema_dict.get("type", "object") != "object":
            raise ToolDefinitionError(f"tool {name!r}: schema must describe a JSON object")
        dedupe_t: tuple[str, ...] | None = None
        if dedupe is not None:
            if isinstance(dedupe, str) or not dedupe:
                raise ToolDefinitionError(f"tool {name!r}: dedupe must be a non-empty list")
            dedupe_t = tuple(dedupe)
            props = schema_dict.get("properties")
            if isinstance(props, Mapping):
                unknown = [d for d in dedupe_t if d not in props]
                if unknown:
                    raise ToolDefinitionError(
                        f"tool {name!r}: dedupe names arguments the schema does not "
                        f"declare: {', '.join(unknown)}"
                    )
        if timeout is not None and not timeout > 0:
            raise ToolDefinitionError(f"tool {name!r}: timeout must be positive seconds")
        dispatch_s: str | None = None
        if dispatch is not None:
            dispatch_s = str(getattr(dispatch, "value", dispatch))
            if dispatch_s not in DISPATCH_MODES:
                raise ToolDefinitionError(
                    f"tool {name!r}: dispatch must be one of {', '.join(sorted(DISPATCH_MODES))}"
                )
        if reconcile is not None and not callable(reconcile):
            raise ToolDefinitionError(f"tool {name!r}: reconcile must be callable")
        return cls(
            name=name,
            schema=schema_dict,
            model=model,
            effect=_coerce_enum(Effect, effect, f"tool {name!r}: effect"),
            idempotency=_coerce_enum(Idempotency, idempotency, f"tool {name!r}: idempotency"),
            dedupe=dedupe_t,
            reconcile=reconcile,
            timeout=float(timeout) if timeout is not None else None,
            dispatch=dispatch_s,
            description=description,
        )


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
    validator: Draft202012Validator = field(init=False, repr=False)
    _fast: _FastAccept | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.is_async = _is_async(self.fn)
        self.validator = Draft202012Validator(
            self.spec.schema, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
        self._fast = _FastAccept.build(self.spec.schema)

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, arguments: object) -> dict[str, Any] | BaseModel:
        """Return what the tool receives: the argument dict, or the model instance."""
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise ArgumentsNotObject(self.name, json_type_name(arguments))
        args = dict(arguments)
        # jsonschema-rs may only say yes (about 40x faster); a no, or anything it
        # was not vetted for, is python-jsonschema's to decide and to explain.
        if self._fast is None or not self._fast.accepts(args):
            errors = _schema_errors(self.validator, args)
            if errors:
                raise ArgumentsInvalid(self.name, errors)
        if self.spec.model is None:
            return args
        try:
            return self.spec.model.model_validate(args)
        except ValidationError as exc:
            raise ArgumentsInvalid(self.name, _pydantic_errors(exc)) from None

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
        dumped = self._dump(validated)
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
        if isinstance(validated, BaseModel) and self._dump(validated) != judged:
            raise ArgumentsInvalid(self.name, [ArgumentError("", COERCION_UNSTABLE)])
        return validated

    def _dump(self, validated: BaseModel) -> dict[str, Any]:
        try:
            return validated.model_dump(mode="json", by_alias=True)
        except PydanticSerializationError:
            raise ArgumentsInvalid(self.name, [ArgumentError("", COERCION_UNSTABLE)]) from None

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
        schema: Mapping[str, Any] | type[BaseModel],
        effect: Effect | str = Effect.READ,
        idempotency: Idempotency | str = Idempotency.NONE,
        dedupe: Sequence[str] | None = None,
        reconcile: Callable[[CallInfo], Any] | None = None,
        timeout: float | None = None,
        dispatch: object | None = None,
        description: str | None = None,
    ) -> Tool:
        """Add one tool; the non-decorator form of ``tool``."""
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name:
            raise ToolDefinitionError("a tool function without a __name__ needs name=")
        spec = ToolSpec.build(
            tool_name,
            schema=schema,
            effect=effect,
            idempotency=idempotency,
            dedupe=dedupe,
            reconcile=reconcile,
            timeout=timeout,
            dispatch=dispatch,
            description=description if description is not None else inspect.getdoc(fn),
        )
        return self.add(spec, fn)

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
        effect: Effect | str = Effect.READ,
        idempotency: Idempotency | str = Idempotency.NONE,
        dedupe: Sequence[str] | None = None,
        reconcile: Callable[[CallInfo], Any] | None = None,
        timeout: float | None = None,
        dispatch: object | None = None,
        description: str | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        schema: Mapping[str, Any] | type[BaseModel] | None = None,
        effect: Effect | str = Effect.READ,
        idempotency: Idempotency | str = Idempotency.NONE,
        dedupe: Sequence[str] | None = None,
        reconcile: Callable[[CallInfo], Any] | None = None,
        timeout: float | None = None,
        dispatch: object | None = None,
        description: str | None = None,
    ) -> Any:
        """Decorator registering a function (sync or async) and returning it unchanged.

        A bare ``@tools.tool`` takes its schema from a single pydantic-model parameter.
        """

        def decorate(func: F) -> F:
            the_schema = schema if schema is not None else _model_parameter(func)
            self.register(
                func,
                name=name,
                schema=the_schema,
                effect=effect,
                idempotency=idempotency,
                dedupe=dedupe,
                reconcile=reconcile,
                timeout=timeout,
                dispatch=dispatch,
                description=description,
            )
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


def _model_parameter(fn: Callable[..., Any]) -> type[BaseModel]:
    """Find the pydantic model a bare ``@tools.tool`` function takes as its only argument."""
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception as exc:  # unresolved forward references
        raise ToolDefinitionError(
            f"tool {getattr(fn, '__name__', fn)!r}: cannot resolve annotations ({exc})"
        ) from None
    params = [p for p in inspect.signature(fn).parameters.values()]
    if len(params) == 1:
        hint = hints.get(params[0].name)
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return hint
    raise ToolDefinitionError(
        f"tool {getattr(fn, '__name__', fn)!r} needs schema= (a JSON Schema dict or a "
        "pydantic model), or a single parameter annotated with a pydantic model"
    )
