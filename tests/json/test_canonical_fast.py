"""Canonical JSON and argument hashes are byte for byte json.dumps's.

``agent_gate.plainjson.canonical_json`` (with ``sha256_hex``, the one definition of each)
is the one definition; it once had an orjson fast path, and the cases where orjson
writes other bytes stay pinned here. Lives next to the argument validation tests,
because it is the last step of the same decision path: the bytes are what the ledger
compares, so a single differing byte would turn a replay into a conflict.
"""

from __future__ import annotations

import enum
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.ledger.canonical import arguments_hash
from agent_gate.plainjson import canonical_json, sha256_hex


class Colour(enum.Enum):
    RED = "red"


class Label(str):
    pass


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.sampled_from([1e16, 1e-5, 9.9e-5, 1e-4, -0.0, 5e-324, 1.7976931348623157e308])
    | st.text()
    | st.sampled_from(["\u2028", "\x7f", "\x00\x1f", '"\\/', "\ud800", "é中😀"])
    | st.sampled_from([uuid.UUID(int=7), Colour.RED, Label("x"), 2**64])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.dictionaries(st.integers(0, 3) | st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=20,
)


def outcome(fn: Any, value: Any) -> object:
    try:
        return ("ok", fn(value))
    except Exception as exc:
        return ("error", type(exc).__name__)


def reference_text(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(value=values)
def test_canonical_json_and_hash_are_the_reference_bytes(value: Any) -> None:
    assert outcome(canonical_json, value) == outcome(reference_text, value)
    assert outcome(arguments_hash, value) == outcome(lambda v: sha256_hex(reference_text(v)), value)


def test_the_cases_that_differ_in_orjson_are_the_references() -> None:
    assert canonical_json({"a": 2**70}) == '{"a":1180591620717411303424}'
    assert canonical_json({"a": 1e-5, "b": 9.9e-5}) == '{"a":1e-05,"b":9.9e-05}'
    assert canonical_json({"z": 1, "é": 2, "a": 3}) == '{"a":3,"z":1,"é":2}'
    assert canonical_json({1: "x"}) == '{"1":"x"}'
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            canonical_json({"a": bad})
    for unserializable in (uuid.UUID(int=1), Colour.RED):
        with pytest.raises(TypeError):
            canonical_json({"a": unserializable})
