"""``parse_arguments`` gives exactly ``parse_arguments_reference``'s verdicts.

The fast path (msgspec plus a duplicate-key check by counting ``:``) must accept
the same texts with the same values, and leave every rejection to the reference,
whose reasons are final. Texts are generated with duplicate keys at any depth,
colons in keys and values (literal and escaped as ``\\u003a``), NaN and Infinity,
lone surrogates, big integers, concatenations and random damage.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gate import strict_json
from agent_gate.strict_json import StrictParseError, parse_arguments, parse_arguments_reference


@pytest.fixture(params=["compiled", "pure"])
def parse_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(strict_json, "_CODEC", None)
    elif strict_json._CODEC is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")
    return str(request.param)


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


# The fixture only picks a path; it holds no state an input could leave behind.
@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_texts())
def test_parse_arguments_gives_the_reference_verdict(parse_path: str, text: str) -> None:
    ours = verdict(parse_arguments, text)
    reference = verdict(parse_arguments_reference, text)
    assert ours[0] == reference[0]
    if ours[0] == "ok":
        assert same(ours[1], reference[1])
    else:
        assert ours[1] == reference[1]


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
def test_rejections_keep_their_reasons(parse_path: str, text: str, reason: str) -> None:
    assert verdict(parse_arguments, text) == ("rejected", reason)


def test_big_integers_stay_exact(parse_path: str) -> None:
    assert parse_arguments('{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }


def outcome(parse: Any, text: str) -> tuple[str, Any]:
    """``verdict``, and the type of any other exception (the reference's own
    RecursionError, from its Unicode check on a value nested that deep)."""
    try:
        return verdict(parse, text)
    except RecursionError as exc:
        return ("raised", type(exc).__name__)


def _frames() -> int:
    frame, count = sys._getframe(), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1
    return count


@pytest.mark.parametrize("shape", ["array", "object", "mixed"])
def test_deep_texts_get_the_reference_verdict_under_a_low_recursion_limit(
    parse_path: str, shape: str
) -> None:
    """Near the recursion limit msgspec and json stop at different depths; the fast
    path must leave those texts to the reference, whatever the limit is."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(_frames() + 120)
    try:
        for depth in range(0, 240, 3):
            opener = {"array": ["["], "object": ['{"k":'], "mixed": ["[", '{"k":']}[shape]
            opens = [opener[i % len(opener)] for i in range(depth)]
            closes = ["]" if o == "[" else "}" for o in reversed(opens)]
            text = '{"a":' + "".join(opens) + "1" + "".join(closes) + "}"
            # The reference one frame down, as parse_arguments calls it: how deep it
            # gets depends on the stack it is given.
            reference = outcome(lambda t: parse_arguments_reference(t), text)
            assert outcome(parse_arguments, text) == reference, (shape, depth)
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("limit", [0, 640, 4300])
def test_the_integer_digit_limit_is_honoured_alike(parse_path: str, limit: int) -> None:
    """json refuses integers longer than sys.get_int_max_str_digits() (a ValueError,
    not a rejection); the fast path must not parse what the reference refuses."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        for digits in (639, 641, 700, 4300, 4301):
            text = '{"n": ' + "9" * digits + "}"
            outcomes = []
            for parse in (parse_arguments, parse_arguments_reference):
                try:
                    outcomes.append(("ok", parse(text)))
                except ValueError as exc:
                    outcomes.append(("error", type(exc).__name__))
            assert outcomes[0] == outcomes[1], (limit, digits)
    finally:
        sys.set_int_max_str_digits(old)
