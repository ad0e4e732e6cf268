"""The snapshot of a mapping event, with and without orjson: one text.

``mapping_content`` names an event's content for replay detection, and Gemini's call
ids are digests of it. Before, the pure-Python path wrote another text than orjson
(json.dumps' spacing, a different tag), so a worker with AGENT_GATE_PURE_PYTHON=1 (or
without orjson) derived other call ids for the same Gemini stream than every other
worker: a replay there would not find the calls already recorded. ``snapshot_text``
is the plain-Python reference of orjson's text, held to it here for every value.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gate.providers import base

orjson = pytest.importorskip("orjson")

TRANSCRIPT = Path(__file__).resolve().parents[1] / "transcripts" / "gemini"


# The snapshot's options, spelled out: under AGENT_GATE_PURE_PYTHON=1 the package never
# imports orjson, but this test still compares against it.
OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def orjson_text(value: object) -> str | None:
    try:
        return str(orjson.dumps(value, base._refuse, OPTIONS).decode())
    except TypeError:
        return None


class Key(str):
    pass


floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-5, -1.5e-5, 1e-4, 1e-6, 1e16, 1e15, 5e-324, -0.0, 1e308]),
)
ints = st.one_of(
    st.integers(), st.sampled_from([2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1])
)
texts = st.one_of(st.text(), st.sampled_from(["\ud800", "a\udfffb", "\u2028\x1f\"\\/", "é😀"]))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(texts, inner, max_size=4),
        st.dictionaries(st.one_of(st.integers(), st.builds(Key, st.text())), inner, max_size=2),
    ),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_snapshot_text_is_orjsons_text_or_refuses_where_orjson_does(value: Any) -> None:
    assert base.snapshot_text(value) == orjson_text(value)


@pytest.mark.parametrize("depth", [253, 254, 255, 300])
def test_nesting_is_refused_exactly_where_orjson_stops(depth: int) -> None:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if depth % 2 else [value]
    assert base.snapshot_text(value) == orjson_text(value)


def test_mapping_content_is_the_same_with_and_without_orjson(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = [
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}}],
         "usageMetadata": {"promptTokenCount": 12, "avgLogprobs": -1.5e-05}},
        {"a": [1.0, 1e16, "x"], "b": {"é": 2**63}},
        {"n": None}, {"big": 2**80}, {"nan": math.nan},
    ]
    fast = [base.mapping_content(e) for e in events]
    monkeypatch.setattr(base, "_fast_dumps", None)
    assert [base.mapping_content(e) for e in events] == fast


def test_gemini_call_ids_do_not_depend_on_the_pure_python_switch() -> None:
    # The user-level symptom, in fresh processes: one stream, one set of call ids.
    script = (
        "import json, sys\n"
        "from agent_gate.autodetect import accumulator\n"
        "from agent_gate.sse.decoder import SSEDecoder\n"
        "acc = accumulator('gemini')\n"
        "ids = [c.call_id for e in SSEDecoder().feed(open(sys.argv[1], 'rb').read())"
        " for c in acc.feed(e)] + [c.call_id for c in acc.close()]\n"
        "print(json.dumps(ids))\n"
    )
    path = TRANSCRIPT / "two_streamed_calls.sse"
    assert path.exists(), path
    seen = []
    for pure in ("0", "1"):
        env = {**os.environ, "AGENT_GATE_PURE_PYTHON": pure}
        out = subprocess.run([sys.executable, "-c", script, str(path)], env=env,
                             capture_output=True, text=True, check=True, timeout=120)
        seen.append(json.loads(out.stdout))
    assert seen[0] and seen[0] == seen[1]
