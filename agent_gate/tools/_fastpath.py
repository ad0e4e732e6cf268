"""jsonschema-rs as an accept-only fast path in front of the reference validator.

``reference.ReferenceValidator`` (python-jsonschema) is the judge of every verdict
and the author of every error. ``FastValidator`` has the same interface and asks
jsonschema-rs first, about 40x faster, but rs may only ever say yes, and only for
schemas inside a vetted subset (``VETTED_KEYWORDS``, ``vetted_pattern``, formats
either native and vetted or delegated to Python's own checkers) where its yes was
checked to be Python's yes (tests/tools/test_fast_validation.py). A no, or anything
outside the subset, goes to the reference unchanged. Which of the two a tool gets
is decided at one site, ``validate.compile_validator``, reading
``agent_gate._speedups.PURE_PYTHON``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from agent_gate.errors import ArgumentError
from agent_gate.plainjson import plain_json
from agent_gate.tools.reference import ReferenceValidator

try:
    import jsonschema_rs
except ImportError:  # pragma: no cover - the reference decides alone
    jsonschema_rs = None

__all__ = [
    "NATIVE_FORMATS",
    "SUBSET_PATTERNS",
    "VETTED_KEYWORDS",
    "FastValidator",
    "subset_pattern",
    "vetted_pattern",
]

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
"valid" on plain JSON instances (tests/tools/test_fast_validation.py). Left out on
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
the judge of everything else (tests/tools/test_fast_validation.py)."""

_SUBSET_CHECKERS = {
    "uri": ("is_uri", "rfc3986_validator", "validate_rfc3986"),
    "date-time": ("is_datetime", "rfc3339_validator", "validate_rfc3339"),
}


def subset_pattern(name: str, entry: object) -> str | None:
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


class FastValidator:
    """jsonschema-rs as an accept-only shortcut in front of python-jsonschema.

    Built only for schemas inside ``VETTED_KEYWORDS`` and ``vetted_pattern``. Formats
    outside ``NATIVE_FORMATS`` are checked by python-jsonschema's own checker
    function, called from rs, so their verdicts are Python's by construction (after
    a ``SUBSET_PATTERNS`` match, which only ever says yes where Python does); rs's
    stricter "email" only ever sends a call to Python. ``accepts`` answers True only
    when rs says valid for a plain JSON instance and the format checkers are still
    the ones it was built with; False means "ask Python", whose verdict and errors
    (``errors``, the reference's) are final.
    """

    __slots__ = ("_checkers", "_formats", "_is_valid", "reference")

    def __init__(
        self,
        is_valid: Callable[[Any], bool],
        formats: dict[str, object],
        reference: ReferenceValidator,
    ) -> None:
        self._is_valid = is_valid
        self._checkers = Draft202012Validator.FORMAT_CHECKER.checkers
        self._formats = tuple(formats.items())
        self.reference = reference

    @classmethod
    def build(cls, reference: ReferenceValidator) -> FastValidator | None:
        """The shortcut for ``reference``'s schema, or None where rs may not answer."""
        schema = reference.schema
        if jsonschema_rs is None:
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
            and (pattern := subset_pattern(name, checker.checkers.get(name))) is not None
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
        return cls(validator.is_valid, {f: checker.checkers.get(f) for f in formats}, reference)

    def accepts(self, instance: object) -> bool:
        """True only where rs's yes is Python's yes; False means "ask the reference"."""
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

    def errors(self, instance: Mapping[str, Any]) -> list[ArgumentError]:
        """No errors where rs accepts; otherwise the reference's verdict and errors."""
        if self.accepts(instance):
            return []
        return self.reference.errors(instance)
