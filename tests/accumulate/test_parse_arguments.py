"""``parse_arguments``: strict verdicts, checked against a plain ``json.loads``.

Texts are generated with duplicate keys at any depth, colons in keys and values
(literal and escaped as ``\\u003a``), NaN and Infinity, lone surrogates, big
integers, concatenations and random damage. Whatever ``json.loads`` refuses, or
accepts but the strict rules forbid (duplicate keys, NaN, a lone surrogate, not an
object, too deep), must be rejected; everything else must parse to the same value.
(A msgspec fast path was checked here against the reference until issue 15 measured
it and it went: under 1% of the decision path.)
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gate import strict_json
from agent_gate.errors import StrictParseError
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, depth_exceeds, text_depth_exceeds
from agent_gate.strict_json import parse_arguments

_keys = st.text(alphabet='ab:é\\"', max_size=3)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet='ab:{}[]é中😀\\"\x01', max_size=6)
    | st.sampled_from(["\ud800", "a\udc00", "\u2028"])
)
# Objects are lists of pairs, so that keys can repeat.
trees = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: ("array", items))
        | st.lists(st.tuples(_keys, inner), max_size=4).map(lambda pairs: ("object", pairs))
    ),
    max_leaves=15,
)


def render(tree: Any, ascii_only: bool, escape_colons: bool) -> str:
    def scalar(value: Any) -> str:
        text = json.dumps(value, ensure_ascii=ascii_only)
        return text.replace(":", "\\u003a") if escape_colons else text

    if isinstance(tree, tuple) and tree and tree[0] == "array":
        return "[" + ", ".join(render(i, ascii_only, escape_colons) for i in tree[1]) + "]"
    if isinstance(tree, tuple) and tree and tree[0] == "object":
        members = (f"{scalar(k)}: {render(v, ascii_only, escape_colons)}" for k, v in tree[1])
        return "{" + ",".join(members) + "}"
    return scalar(tree)


def _objects() -> st.SearchStrategy[str]:
    top = st.lists(st.tuples(_keys, trees), max_size=5).map(lambda pairs: ("object", pairs))
    return st.builds(render, top | trees, st.booleans(), st.booleans())


def _texts() -> st.SearchStrategy[str]:
    damaged = st.builds(
        lambda text, at, insert: text[:at] + insert + text[at:],
        _objects(),
        st.integers(0, 30),
        st.sampled_from(["", "{", "}", ":", ",", '"', "\\", " ", "{}", "NaN", "\\u003a"]),
    )
    special = st.sampled_from(
        [
            '{"a":' + "[" * 240 + "]" * 240 + "}",
            '{"a":' + "[" * 3000 + "]" * 3000 + "}",
            '{"a":1}{"b":2}',
            '{"a": 1e400}',
            '{"a": 123456789012345678901234567890}',
            '{"a\\u003a": 1, "a:": 2}',
            '{"a": "x:\\n", "a": "y"}',
            '{"a": "\\u003a", "a": ":"}',
            '{"a": 18446744073709551616, "a": 1}',
            '{"a": 18446744073709551616, "b": ":"}',
            '{"a":' + '{"a":' * 200 + "1" + "}" * 201,
            '{"a":' + '{"a":' * 300 + "1" + "}" * 301,
            '{"a":[' + "{}," * 400 + "{}]}",
            '{"a":[' + '{"b":1,"b":2},' * 100 + "{}]}",
            '{"a": "\\ud83d\\ude00"}',
            '\ufeff{"a": 1}',
            ' \n{"a": -0.0}\r\t',
        ]
    )
    return _objects() | damaged | special | st.text(max_size=20)


def verdict(parse: Any, text: str) -> tuple[str, Any]:
    try:
        return ("ok", parse(text))
    except StrictParseError as rejected:
        return ("rejected", rejected.reason)


def same(a: Any, b: Any) -> bool:
    """Equal with the same types, float bits and key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def plain_verdict(text: str) -> tuple[str, Any]:
    """``json.loads`` with no strictness, then each strict rule checked on its result:
    ("rejected", None) when any of them forbids the text."""
    duplicates: list[bool] = []
    constants: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            duplicates.append(True)
        return dict(items)

    def constant(name: str) -> float:
        constants.append(name)
        return float("nan")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError):
        return ("rejected", None)
    if duplicates or constants or not isinstance(value, dict):
        return ("rejected", None)
    if depth_exceeds(value, MAX_ARGUMENT_DEPTH):
        return ("rejected", None)
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return ("rejected", None)
    return ("ok", value)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(text=_texts())
def test_parse_arguments_agrees_with_plain_json_and_the_strict_rules(text: str) -> None:
    ours = verdict(parse_arguments, text)
    plain = plain_verdict(text)
    assert ours[0] == plain[0], (text, ours, plain)
    if ours[0] == "ok":
        assert same(ours[1], plain[1])


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": 1, "b": {"c": 2, "c": 3}}', "duplicate_key"),
        ('{"a:": 1, "a:": 2}', "duplicate_key"),
        ('{"a\\u003a": 1, "a\\u003a": "x"}', "duplicate_key"),
        ('{"a": [{"k": 1, "k": 1}]}', "duplicate_key"),
        ('{"a": NaN}', "invalid_json"),
        ('{"a": "\\udfff"}', "invalid_unicode"),
        ('{"a": 1} {}', "concatenated_json"),
        ("[1]", "arguments_not_object"),
    ],
)
def test_rejections_keep_their_reasons(text: str, reason: str) -> None:
    assert verdict(parse_arguments, text) == ("rejected", reason)


def test_big_integers_stay_exact() -> None:
    assert parse_arguments('{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }


# -- the short path beside its reference ------------------------------------------------


@pytest.fixture
def fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The short path on, even under AGENT_GATE_PURE_PYTHON=1 (it is pure Python)."""
    monkeypatch.setattr(strict_json, "_FAST_PATH", True)


@pytest.mark.slow
@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_texts(), depth=st.sampled_from([MAX_ARGUMENT_DEPTH, 0, 1, 3, 2000]))
def test_short_path_gives_the_reference_verdict_and_reason(
    fast_path: None, text: str, depth: int
) -> None:
    fast = verdict(lambda t: parse_arguments(t, depth), text)
    reference = verdict(lambda t: strict_json.parse_arguments_reference(t, depth), text)
    assert fast[0] == reference[0] and (
        same(fast[1], reference[1]) if fast[0] == "ok" else fast[1] == reference[1]
    ), (text, fast, reference)


# Brackets, quotes and backslashes in every arrangement: strings that never end,
# escaped quotes, closers before openers, brackets inside strings.
_structure = st.text(alphabet='[]{}"\\a:', max_size=60)


@pytest.mark.slow  # 3,000 examples: ~9 s on 2 cores
@settings(max_examples=3000, deadline=None)
@given(text=_structure | _texts(), limit=st.integers(-1, 6))
def test_depth_scan_agrees_with_plainjson(text: str, limit: int) -> None:
    assert strict_json._depth_exceeds(text, limit) == text_depth_exceeds(text, limit)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": "\\ud800"}', "invalid_unicode"),
        ('{"a": "\\uDBFF"}', "invalid_unicode"),
        ('{"\\udc00": 1}', "invalid_unicode"),
        ('{"a": "x\ud800"}', "invalid_unicode"),  # a raw surrogate in the text itself
        ('{"a": "\\ud83d\\ude00", "b": "\\udfff"}', "invalid_unicode"),
        ('{"a": [' + "[" * 70 + "]" * 70 + "]}", "arguments_too_deep"),
        ('{"a": "' + "[" * 70 + '"}', None),  # brackets in a string do not nest
        ('{"a": "\\\\ud800"}', None),  # an escaped backslash, then plain text
        ('{"a": "\\ud83d\\ude00 \u00e9"}', None),  # a pair is one character
    ],
)
def test_surrogates_and_depth_on_the_short_path(
    fast_path: None, text: str, reason: str | None
) -> None:
    expected = ("rejected", reason) if reason else ("ok", json.loads(text))
    assert verdict(parse_arguments, text) == expected
    assert verdict(strict_json.parse_arguments_reference, text) == expected
