"""jsonschema-rs may only say yes, and only where its yes is python-jsonschema's yes.

``Tool.validate`` asks jsonschema-rs first for schemas inside the vetted subset
(``VETTED_KEYWORDS``, ``vetted_pattern``, formats either native and vetted or
delegated to Python's checkers); anything it does not accept is decided by
python-jsonschema exactly as before. These tests generate schemas from the vetted
subset and instances around them (format strings damaged at random included) and
check that the verdicts and errors are identical with and without the shortcut, and
that an rs "valid" never meets a Python "invalid".
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, SchemaError

from agent_gate._speedups import PURE_PYTHON
from agent_gate.plainjson import plain_json
from agent_gate.tools import ArgumentsInvalid, Tool, ToolRegistry, _fastpath
from agent_gate.tools._fastpath import (
    NATIVE_FORMATS,
    SUBSET_PATTERNS,
    FastValidator,
    subset_pattern,
    vetted_pattern,
)
from agent_gate.tools.validate import ReferenceValidator

pytestmark = pytest.mark.skipif(
    _fastpath.jsonschema_rs is None or PURE_PYTHON,
    reason="jsonschema-rs not installed, or AGENT_GATE_PURE_PYTHON is set",
)

FORMAT_SEEDS = {
    "email": ["a@b.com", "ana.lopez+x@example.org", "a@[127.0.0.1]", '"a b"@x.org', "a@"],
    "uuid": ["6f1c2a9e-3b7d-4c8e-9a1f-2d3e4f5a6b7c", "{6f1c2a9e-3b7d-4c8e-9a1f-2d3e4f5a6b7c}"],
    "ipv4": ["192.0.2.17", "0.0.0.0", "255.255.255.255", "01.2.3.4"],
    "ipv6": ["::1", "2001:db8::1", "::ffff:1.2.3.4"],
    "uri": [
        "https://billing.example.com/t/42?l=de",
        "http://[::1]:80/x",
        "mailto:a@b",
        "https://u:p@files.example.com:8443/a%20b/;x=1?q=a/b?c#f/g",
        "urn:isbn:0451450523",
        "file:///etc/hosts",
        "http://192.0.2.17/",
        "a:",
    ],
    "date-time": [
        "2025-07-01T09:30:00+02:00",
        "2016-12-31T23:59:60Z",
        "2025-07-01t09:30:00z",
        "2024-02-29T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2025-04-31T23:59:59.123456-11:30",
        "0999-01-01T00:00:00Z",
        "0000-01-01T00:00:00Z",
    ],
    "date": ["2025-07-01", "2024-02-29", "2025-02-29"],
    "time": ["09:30:00Z", "23:59:60Z"],
    "hostname": ["example.com", "a-b.c"],
    "duration": ["P1D", "PT1H30M"],
}
_NOISE = [*'0123456789abcdefAF:.-_@/?#[]%+ zZtT{}"\\é\n', "::", "..", "%2", "中"]


@st.composite
def format_strings(draw: st.DrawFn, name: str | None = None) -> str:
    fmt = name or draw(st.sampled_from(sorted(FORMAT_SEEDS)))
    text = draw(st.sampled_from(FORMAT_SEEDS[fmt]))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        char = draw(st.sampled_from(_NOISE))
        if op == "insert":
            text = text[:at] + char + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + char + text[at + 1 :]
    return text


PATTERNS = ["^[a-z0-9-]{1,40}$", "^[^/\\\\]{1,8}$", "^[0-9a-f]{4}$", "a|b", "^(?:ab)+c?$", "x.y"]
assert all(vetted_pattern(p) for p in PATTERNS)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(-1e6, 1e6, allow_nan=False)
    | st.text(alphabet="abcxy0-/\n", max_size=6)
    | format_strings()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=4)
    ),
    max_leaves=12,
)

_leaf_keywords: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"])
    | st.lists(st.sampled_from(["string", "integer", "null"]), min_size=1, max_size=2, unique=True),
    "enum": st.lists(json_scalars, min_size=1, max_size=3),
    "const": json_scalars,
    "minLength": st.integers(0, 3),
    "maxLength": st.integers(0, 6),
    "minimum": st.integers(-10, 10) | st.floats(-10, 10),
    "maximum": st.integers(-10, 10) | st.floats(-10, 10),
    "exclusiveMinimum": st.integers(-10, 10),
    "exclusiveMaximum": st.integers(-10, 10),
    "minItems": st.integers(0, 2),
    "maxItems": st.integers(0, 3),
    "uniqueItems": st.booleans(),
    "minProperties": st.integers(0, 2),
    "maxProperties": st.integers(0, 3),
    "required": st.lists(st.sampled_from("abcd"), max_size=2, unique=True),
    "pattern": st.sampled_from(PATTERNS),
    "format": st.sampled_from(sorted(FORMAT_SEEDS)),
    "title": st.just("t"),
}


def _schema_from(keywords: dict[str, Any], subschemas: dict[str, Any]) -> dict[str, Any] | bool:
    return {**keywords, **subschemas}


schemas = st.recursive(
    st.dictionaries(st.sampled_from(sorted(_leaf_keywords)), st.none(), max_size=3).flatmap(
        lambda picked: st.fixed_dictionaries({k: _leaf_keywords[k] for k in picked})
    )
    | st.booleans(),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {"properties": st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)},
            optional={
                "additionalProperties": inner,
                "required": st.lists(st.sampled_from("abcd"), max_size=2, unique=True),
            },
        ),
        st.fixed_dictionaries(
            {"items": inner}, optional={"prefixItems": st.lists(inner, min_size=1, max_size=2)}
        ),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"oneOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"not": inner}),
        st.builds(lambda sub: {"$defs": {"d": sub}, "$ref": "#/$defs/d"}, inner),
    ),
    max_leaves=8,
)


def valid_schema(schema: Any) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return False
    return True


def _fast_for(schema: Any) -> FastValidator | None:
    """The shortcut for ``schema``, or None where jsonschema-rs may not answer."""
    return FastValidator.build(ReferenceValidator(schema))


def _fast_of(tool: Tool) -> FastValidator:
    """The tool's validator, which must be the shortcut."""
    assert isinstance(tool.validator, FastValidator)
    return tool.validator


def _reference_only(tool: Tool) -> None:
    """Make ``tool`` validate with python-jsonschema alone, as PURE_PYTHON would."""
    tool.validator = ReferenceValidator(tool.spec.schema)


def python_valid(schema: Any, instance: Any) -> bool:
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return bool(validator.is_valid(instance))


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, instances=st.lists(json_values, min_size=1, max_size=5))
def test_an_rs_yes_is_always_a_python_yes(schema: Any, instances: list[Any]) -> None:
    if not valid_schema(schema):
        return
    fast = _fast_for(schema) if isinstance(schema, dict) else None
    if fast is None:
        return
    for instance in instances:
        if fast.accepts(instance):
            assert python_valid(schema, instance), (schema, instance)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(data=st.data())
def test_native_formats_never_accept_what_python_refuses(data: st.DataObject) -> None:
    fmt = data.draw(st.sampled_from(sorted(NATIVE_FORMATS)))
    text = data.draw(format_strings(fmt))
    fast = _fast_for({"format": fmt})
    assert fast is not None
    if fast.accepts(text):
        assert Draft202012Validator.FORMAT_CHECKER.conforms(text, fmt), (fmt, text)


def _subset_in_use(name: str) -> str:
    pattern = subset_pattern(name, Draft202012Validator.FORMAT_CHECKER.checkers.get(name))
    if pattern is None:
        pytest.skip(f"{name}: jsonschema's checker is not the one the subset was written for")
    return pattern


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SUBSET_PATTERNS))
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_subset_pattern_match_is_always_a_python_yes(name: str, data: st.DataObject) -> None:
    """What rs's regex engine matches, Python's checker accepts: strings drawn from the
    pattern itself (as Python reads it) and damaged format strings, matched by rs."""
    pattern = _subset_in_use(name)
    text = data.draw(st.from_regex(pattern, fullmatch=True) | format_strings(name))
    rs_matches = _fastpath.jsonschema_rs.Draft202012Validator({"pattern": pattern}).is_valid(
        text
    )
    if rs_matches:
        assert Draft202012Validator.FORMAT_CHECKER.conforms(text, name), (name, text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("uri", "https://billing.example.com/tickets/42?lang=de"),
        ("uri", "https://u:p@files.example.com:8443/a%20b/;x=1?q=a/b?c#f/g"),
        ("uri", "urn:isbn:0451450523"),
        ("uri", "mailto:a@b"),
        ("date-time", "2025-07-01T09:30:00+02:00"),
        ("date-time", "2025-12-31t23:59:59.5z"),
    ],
)
def test_common_format_strings_need_no_python_call(name: str, text: str) -> None:
    assert _fastpath.jsonschema_rs.Draft202012Validator(
        {"pattern": _subset_in_use(name)}
    ).is_valid(text)


@pytest.mark.parametrize(
    ("name", "text", "valid"),
    [
        ("uri", "http://[::1]:80/x", True),  # IP literal: Python's call
        ("uri", "http://a\n", True),  # Python's $ before a final newline
        ("uri", "http://a b", False),
        ("date-time", "2024-02-29T00:00:00Z", True),  # leap day: Python's calendar
        ("date-time", "2025-02-29T00:00:00Z", False),
        ("date-time", "0999-01-01T00:00:00Z", True),
        ("date-time", "0000-01-01T00:00:00Z", False),
        ("date-time", "2016-12-31T23:59:60Z", False),  # leap second
    ],
)
def test_what_the_subset_misses_is_python_s_verdict(name: str, text: str, valid: bool) -> None:
    pattern = _subset_in_use(name)
    assert not _fastpath.jsonschema_rs.Draft202012Validator({"pattern": pattern}).is_valid(text)
    schema = {"type": "object", "properties": {"a": {"type": "string", "format": name}}}
    registry = ToolRegistry()
    registry.register(lambda **_: None, name="t", schema=schema)
    python_only = ToolRegistry()
    python_only.register(lambda **_: None, name="t", schema=schema)
    _reference_only(python_only["t"])
    assert _outcome(registry, {"a": text}) == _outcome(python_only, {"a": text})
    assert (_outcome(registry, {"a": text})[0] == "ok") is valid


@pytest.mark.parametrize(
    "node",
    [
        {"format": "uri", "allOf": [{"maxLength": 30}], "anyOf": [{"pattern": "^https"}]},
        {"$ref": "#/$defs/when"},
        {"type": "array", "items": {"format": "date-time"}, "prefixItems": [{"format": "uri"}]},
        {"not": {"format": "uri"}},
        {"oneOf": [{"format": "uri"}, {"format": "date-time"}]},
        {"type": ["string", "integer"], "format": "date-time"},
    ],
)
def test_subset_rewriting_keeps_every_verdict_and_error(node: dict[str, Any]) -> None:
    schema = {
        "type": "object",
        "$defs": {"when": {"format": "date-time", "allOf": [{"minLength": 20}]}},
        "properties": {"a": node},
    }
    instances = [
        "https://example.com/a",
        "https://example.com/" + "a" * 30,
        "http://example.com/",
        "https://[::1]/",
        "not a uri",
        "2025-07-01T09:30:00Z",
        "2025-07-01T09:30:00.123456+02:00",
        "2024-02-29T00:00:00Z",
        "2025-02-29T00:00:00Z",
        7,
        ["https://example.com/", "2025-07-01T09:30:00Z"],
        ["x", "2025-13-01T09:30:00Z"],
    ]
    with_rs = ToolRegistry()
    with_rs.register(lambda **_: None, name="t", schema=schema)
    python_only = ToolRegistry()
    python_only.register(lambda **_: None, name="t", schema=schema)
    _reference_only(python_only["t"])
    _fast_of(with_rs["t"])
    for instance in instances:
        assert _outcome(with_rs, {"a": instance}) == _outcome(python_only, {"a": instance}), (
            instance
        )


def test_a_subset_is_only_used_for_the_checker_it_was_written_for() -> None:
    checker = Draft202012Validator.FORMAT_CHECKER
    for name in SUBSET_PATTERNS:
        entry = checker.checkers.get(name)
        if entry is not None:
            assert subset_pattern(name, (lambda value: True, entry[1])) is None
    assert subset_pattern("email", checker.checkers.get("email")) is None
    # A stricter uri checker registered before the tool: rs must call it for every uri.
    original = checker.checkers.get("uri")
    checker.checks("uri")(lambda value: not isinstance(value, str) or value.startswith("https:"))
    try:
        registry = ToolRegistry()
        tool = registry.register(
            lambda **_: None,
            name="t",
            schema={"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}},
        )
        _fast_of(tool)
        assert not _fast_of(tool).accepts({"a": "http://example.com/"})
        assert _fast_of(tool).accepts({"a": "https://example.com/"})
    finally:
        if original is None:
            del checker.checkers["uri"]
        else:
            checker.checkers["uri"] = original


def _outcome(registry: ToolRegistry, arguments: Any) -> object:
    try:
        return ("ok", registry.validate("t", arguments))
    except ArgumentsInvalid as exc:
        return ("invalid", exc.errors, str(exc))
    except Exception as exc:  # a schema Python cannot resolve: the same error both ways
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    properties=st.dictionaries(st.sampled_from("abcd"), schemas, max_size=4),
    extra=st.booleans(),
    arguments=st.dictionaries(st.sampled_from("abcde"), json_values, max_size=5),
)
def test_tool_validate_gives_the_same_verdict_and_errors_with_and_without_rs(
    properties: dict[str, Any], extra: bool, arguments: dict[str, Any]
) -> None:
    schema = {"type": "object", "properties": properties, "additionalProperties": extra}
    if not valid_schema(schema):
        return
    with_rs = ToolRegistry()
    with_rs.register(lambda **_: None, name="t", schema=schema)
    python_only = ToolRegistry()
    python_only.register(lambda **_: None, name="t", schema=schema)
    _reference_only(python_only["t"])
    assert _outcome(with_rs, arguments) == _outcome(python_only, arguments)


def test_the_benchmark_shape_takes_the_shortcut_and_keeps_python_errors() -> None:
    email = {"type": "string", "format": "email"}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["to", "at"],
        "properties": {
            "to": {"type": "array", "items": email, "minItems": 1},
            "at": {"type": "string", "format": "date-time"},
            "tag": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"},
        },
    }
    registry = ToolRegistry()
    tool = registry.register(lambda **_: None, name="t", schema=schema)
    _fast_of(tool)
    good = {"to": ["a@example.com"], "at": "2025-07-01T09:30:00Z", "tag": "q3"}
    assert _fast_of(tool).accepts(good)
    assert registry.validate("t", good) == good
    # rs refuses 'a@' (stricter); Python's verdict stands: valid.
    assert registry.validate("t", {**good, "to": ["a@"]}) == {**good, "to": ["a@"]}
    # A leap second: rs would accept it natively, so date-time is Python's, called from rs.
    leap = {**good, "at": "2016-12-31T23:59:60Z"}
    assert not _fast_of(tool).accepts(leap)
    with pytest.raises(ArgumentsInvalid) as info:
        registry.validate("t", leap)
    assert [str(e) for e in info.value.errors] == ["/at (format)"]


def test_instances_python_reads_differently_are_left_to_python() -> None:
    registry = ToolRegistry()
    tool = registry.register(
        lambda **_: None,
        name="t",
        schema={"type": "object", "properties": {"a": {"type": "array"}}},
    )
    _fast_of(tool)
    # rs reads a tuple as an array; python-jsonschema does not.
    assert not plain_json({"a": (1, 2)})
    assert not _fast_of(tool).accepts({"a": (1, 2)})
    with pytest.raises(ArgumentsInvalid):
        registry.validate("t", {"a": (1, 2)})
    for value in (2**64, float("nan"), float("inf"), {1: 2}):
        assert not plain_json(value)
        assert not _fast_of(tool).accepts({"a": [value]})
    # A lone surrogate is plain JSON to the walk; rs either reads it or raises (then
    # Python decides): its yes must still be Python's yes.
    loose = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 1}}}
    strict = _fast_for(loose)
    assert strict is not None
    for instance in ({"a": "\ud800"}, {"a": "\ud800x"}):
        if strict.accepts(instance):
            assert python_valid(loose, instance)


def test_schemas_outside_the_vetted_subset_are_python_only() -> None:
    for schema in (
        {"type": "object", "properties": {"a": {"multipleOf": 0.01}}},
        {"type": "object", "patternProperties": {"^a": {}}},
        {"type": "object", "properties": {"a": {"pattern": "^\\d+$"}}},
        {"type": "object", "properties": {"a": {"pattern": "(?i)abc"}}},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/s"}}},
        {"type": "object", "unevaluatedProperties": False},
        {"type": "object", "$defs": {"d": {"$ref": "#/$defs/d"}}, "$ref": "#/$defs/d"},
        {"type": "object", "properties": {"a": {"$defs": {"d": {}}, "$ref": "#/$defs/d"}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    ):
        assert _fast_for(schema) is None, schema


@pytest.mark.parametrize(
    ("pattern", "vetted"),
    [
        ("^[a-z0-9-]{1,40}$", True),
        ("^[^/\\\\]{1,128}$", True),
        ("\\d", False),
        ("\\w+", False),
        ("[a&&b]", False),
        ("[a--b]", False),
        ("a{", False),
        ("(?=a)", False),
        ("é", False),
        ("a**", False),
    ],
)
def test_vetted_pattern(pattern: str, vetted: bool) -> None:
    assert vetted_pattern(pattern) is vetted


def test_a_format_checker_registered_later_is_honoured() -> None:
    registry = ToolRegistry()
    tool = registry.register(
        lambda **_: None,
        name="t",
        schema={"type": "object", "properties": {"a": {"type": "string", "format": "x-upper"}}},
    )
    checker = Draft202012Validator.FORMAT_CHECKER
    assert _fast_of(tool).accepts({"a": "low"})
    checker.checks("x-upper")(lambda value: not isinstance(value, str) or value.isupper())
    try:
        assert not _fast_of(tool).accepts({"a": "low"})
        with pytest.raises(ArgumentsInvalid):
            registry.validate("t", {"a": "low"})
    finally:
        del checker.checkers["x-upper"]


def test_agent_gate_pure_python_turns_the_shortcut_off() -> None:
    code = (
        "from agent_gate.schema import ToolRegistry;"
        "r = ToolRegistry();"
        "t = r.register(lambda **_: None, name='t', schema={'type': 'object'});"
        "print(type(t.validator).__name__)"
    )
    env = {**os.environ, "AGENT_GATE_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "ReferenceValidator"
