"""``plain_json`` answers exactly as its definition, written the obvious recursive way.

The walker is shaped for speed (members checked in place, only containers
stacked), so it is compared with a definition that is easy to read: every value,
every key, every number, at any depth, with and without tuples and a float floor.
"""

from __future__ import annotations

import enum
import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.plainjson import plain_json


def definition(value: Any) -> bool:
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return True
    if kind is int:
        return -(2**63) <= value < 2**63
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str for k in value) and all(definition(v) for v in value.values())
    if kind is list:
        return all(definition(v) for v in value)
    return False


class Colour(enum.Enum):
    RED = "red"


class Label(str):
    pass


class Mapping(dict):  # type: ignore[type-arg]
    pass


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.sampled_from([2**63 - 1, -(2**63), 2**63, -(2**63) - 1])
    | st.floats()
    | st.sampled_from([1e-4, 9.99e-5, -1e-5, 0.0, -0.0, 5e-324])
    | st.text(max_size=3)
    | st.sampled_from([uuid.UUID(int=3), Colour.RED, Label("x"), b"x", 1j, Mapping()])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=2), inner, max_size=4)
        | st.dictionaries(st.integers(0, 2) | st.none() | st.text(max_size=1), inner, max_size=3)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(value=values)
def test_plain_json_is_its_definition(value: Any) -> None:
    assert plain_json(value) is definition(value)


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ({"a": [1, "x", None, True, 2.5, {"b": []}]}, True),
        ({"a": [[[[[[(1,)]]]]]]}, False),
        ({"a": {"b": {"c": float("nan")}}}, False),
        ({"a": [2**63]}, False),
        ([Label("x")], False),
        ({Label("x"): 1}, False),
        (Mapping(a=1), False),
    ],
)
def test_plain_json_examples(value: Any, plain: bool) -> None:
    assert plain_json(value) is plain


def test_deep_values_need_no_recursion() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    assert plain_json(deep)
    assert plain_json({"a": deep})
