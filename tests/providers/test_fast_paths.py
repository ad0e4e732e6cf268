"""The accumulator's short path decides exactly what the long path decides.

``Accumulator.feed`` takes a short path for plain dicts and agent-gate's own
``ServerSentEvent``s with a built-in adapter (``hot_delta``, replay content without
``WireEvent``); an adapter subclass always takes the long way (decode -> replay guard
-> translate -> apply). Every recorded transcript, as SSE events, as dicts and mixed,
and then randomly damaged (events dropped, repeated, swapped, fields changed), must
give the same calls, terminal, anomalies, counters and errors both ways.

The compiled JSON helpers are checked against the standard library they stand in for:
``loads_event`` against ``json.loads`` and ``mapping_content`` against equality of
``json.dumps(sort_keys=True)`` text, each with the compiled library and without it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gate import accumulate as accumulate_module
from agent_gate.accumulate import Accumulator, DispatchMode
from agent_gate.errors import ReplayConflictError
from agent_gate.providers import base
from agent_gate.providers.registry import ADAPTERS
from agent_gate.sse import ServerSentEvent, SSEDecoder

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts"
PROVIDERS = {
    "openai_responses": "openai-responses",
    "openai_chat": "openai-chat",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
CASES = sorted(
    f"{folder}/{path.stem}" for folder in PROVIDERS for path in (TRANSCRIPTS / folder).glob("*.sse")
)


def sse_events(case: str) -> tuple[str, list[ServerSentEvent]]:
    folder, stem = case.split("/")
    decoder = SSEDecoder()
    events = decoder.feed((TRANSCRIPTS / folder / f"{stem}.sse").read_bytes())
    decoder.end()
    return PROVIDERS[folder], events


def as_dict(event: ServerSentEvent) -> object:
    """The event as an SDK would hand it over, when it is a JSON object."""
    try:
        data = json.loads(event.data)
    except ValueError:
        return event
    return data if isinstance(data, dict) else event


def long_way(provider: str) -> Any:
    """The same adapter through a subclass: the accumulator never takes its short path."""
    return type("LongWay", (ADAPTERS[provider],), {})()


def outcome(
    provider: str | Any,
    events: list[object],
    reconnect_at: int | None,
    limits: tuple[int, int] = (400, 900),
) -> list[object]:
    acc = Accumulator(
        provider,
        dispatch=DispatchMode.ON_CALL_COMPLETE,
        max_call_argument_bytes=limits[0],
        max_total_argument_bytes=limits[1],
    )
    # The built-in adapters take the short path unless AGENT_GATE_PURE_PYTHON=1.
    assert acc._fast is (isinstance(provider, str) and accumulate_module._KNOWN_ADAPTER_PATH)
    seen: list[object] = []
    try:
        for at, event in enumerate(events):
            if at == reconnect_at:
                acc.reconnected()
            seen.append(acc.feed(event))
        seen.append(acc.close())
    except Exception as exc:
        seen.append((type(exc).__name__, str(exc)))
    seen += [acc.terminal, acc.anomalies, acc.stats, acc.turn]
    return seen


def both_ways(
    provider: str,
    events: list[object],
    reconnect_at: int | None = None,
    limits: tuple[int, int] = (400, 900),
) -> None:
    short = outcome(provider, events, reconnect_at, limits)
    assert short == outcome(long_way(provider), events, reconnect_at, limits)


@pytest.mark.parametrize("case", CASES)
def test_every_transcript_gives_the_same_outcome_both_ways(case: str) -> None:
    provider, events = sse_events(case)
    dicts = [as_dict(e) for e in events]
    mixed = [d if i % 2 else e for i, (e, d) in enumerate(zip(events, dicts, strict=True))]
    for feed in (events, dicts, mixed):
        both_ways(provider, list(feed))


@pytest.mark.parametrize("reasoning", ["think", ""])
def test_chat_reasoning_beside_a_fragment_is_kept_for_the_next_turn_both_ways(
    reasoning: str,
) -> None:
    """DeepSeek's ``reasoning_content`` in the chunk that carries an argument fragment
    is part of the turn sent back; the short path once dropped it (it only looked at
    ``content`` and ``function_call`` beside the fragment)."""
    start = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    chunks = [
        {"tool_calls": [start]},
        {
            "reasoning_content": reasoning,
            "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}],
        },
    ]
    events: list[object] = [
        {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in chunks
    ]
    events.append(
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    both_ways("openai-chat", events)
    acc = Accumulator("openai-chat")
    for event in events:
        acc.feed(event)
    acc.close()
    assert acc.turn.entries[0].part == {"reasoning_content": reasoning}


def _mutations(value: object) -> Iterator[object]:
    """Values a broken or hostile server might put in a field instead."""
    yield None
    yield 1
    yield True
    yield ""
    yield "x"
    yield [value]
    if isinstance(value, str):
        yield value + "1"
    if isinstance(value, int) and not isinstance(value, bool):
        yield value + 1


def _with_mutation(event: object, choice: int) -> object:
    """``event`` with one field of its JSON (at any depth) replaced."""
    data = event if isinstance(event, dict) else as_dict(event)  # type: ignore[arg-type]
    if not isinstance(data, dict):
        return event
    paths: list[tuple[list[object], object]] = []

    def walk(node: object, path: list[object]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append(([*path, key], value))
                walk(value, [*path, key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                paths.append(([*path, i], value))
                walk(value, [*path, i])

    walk(data, [])
    options = [(path, new) for path, value in paths for new in _mutations(value)]
    if not options:
        return event
    path, new = options[choice % len(options)]
    copy = json.loads(json.dumps(data))
    target: Any = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    if isinstance(event, ServerSentEvent):
        return ServerSentEvent(event.event, json.dumps(copy), event.id)
    return copy


@pytest.mark.parametrize("case", CASES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_damaged_streams_give_the_same_outcome_both_ways(case: str, data: st.DataObject) -> None:
    provider, events = sse_events(case)
    feed: list[object] = [
        as_dict(e) if data.draw(st.booleans(), label="as dict") else e for e in events
    ]
    for _ in range(data.draw(st.integers(0, 6), label="edits")):
        if not feed:
            break
        at = data.draw(st.integers(0, len(feed) - 1), label="at")
        edit = data.draw(st.sampled_from(["drop", "repeat", "swap", "mutate"]), label="edit")
        if edit == "drop":
            del feed[at]
        elif edit == "repeat":
            feed.insert(data.draw(st.integers(at, len(feed)), label="to"), feed[at])
        elif edit == "swap" and at + 1 < len(feed):
            feed[at], feed[at + 1] = feed[at + 1], feed[at]
        elif edit == "mutate":
            feed[at] = _with_mutation(feed[at], data.draw(st.integers(0, 10_000), label="m"))
    reconnect_at = data.draw(st.none() | st.integers(0, len(feed)), label="reconnect")
    # Small limits too, so that a fragment that hits one is compared both ways.
    limits = data.draw(st.sampled_from([(400, 900), (30, 60), (12, 1000)]), label="limits")
    both_ways(provider, feed, reconnect_at, limits)


_ITEM = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f"}


def _call_fc_1() -> tuple[dict[str, Any], dict[str, Any]]:
    """A Responses function call's announcement and its first argument delta (fresh)."""
    added = {"type": "response.output_item.added", "output_index": 0, "item": dict(_ITEM)}
    delta = {
        "type": "response.function_call_arguments.delta",
        "item_id": "fc_1",
        "delta": '{"a":',
        "sequence_number": 1,
    }
    return added, delta


def test_a_sequence_number_replayed_with_other_content_conflicts_both_ways() -> None:
    added, delta = _call_fc_1()
    for other in ({**delta, "delta": '{"b":'}, {**delta, "delta": float("nan")}):
        events: list[object] = [added, delta, delta, other]
        short = outcome("openai-responses", events, None)
        assert short == outcome(long_way("openai-responses"), events, None)
        assert short[3] == (
            "ReplayConflictError",
            "event at index 3 repeats position sequence_number=1 with different content",
        )


def test_a_delta_dict_reused_after_feeding_still_replays_as_it_was_fed() -> None:
    """The short path keeps a first-seen delta mapping as a shallow copy, not a snapshot:
    a caller that rewrites the same dict for its next event must not rewrite history."""
    added, _ = _call_fc_1()
    item = added["item"]
    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    acc.feed(added)
    reused: dict[str, Any] = {"type": "response.function_call_arguments.delta", "item_id": "fc_1"}
    for seq, piece in enumerate(['{"a":', "1}"], start=1):
        reused["sequence_number"] = seq
        reused["delta"] = piece
        acc.feed(reused)
    acc.reconnected()
    first = {**reused, "sequence_number": 1, "delta": '{"a":'}
    assert acc.feed(first) == [] and acc.stats.replayed_events == 1
    done = {"type": "response.output_item.done", "output_index": 0}
    done["item"] = {**item, "status": "completed", "arguments": '{"a":1}'}
    (call,) = acc.feed(done)
    assert call.arguments == {"a": 1}


@pytest.mark.parametrize("other", [1.0, True, "1"])
def test_a_replayed_delta_differing_only_in_a_json_type_conflicts(other: object) -> None:
    """Kept as a dict copy, a delta still compares as its JSON text would: 1, 1.0 and
    true are equal in Python and different on the wire."""
    added, delta = _call_fc_1()
    delta["output_index"] = 1
    events: list[object] = [added, delta, {**delta, "output_index": other}]
    short = outcome("openai-responses", events, 2)
    assert short == outcome(long_way("openai-responses"), events, 2)
    assert short[2] == (
        "ReplayConflictError",
        "event at index 2 repeats position sequence_number=1 with different content",
    )


# -- the compiled JSON helpers against the standard library -----------------------------


@pytest.fixture(params=["compiled", "pure"])
def json_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the compiled helpers (when installed) and without them."""
    if request.param == "pure":
        monkeypatch.setattr(base, "fast_loads", None)
        monkeypatch.setattr(base, "_fast_dumps", None)
    elif base.fast_loads is None or base._fast_dumps is None:
        pytest.skip("msgspec/orjson not installed, or AGENT_GATE_PURE_PYTHON is set")
    return str(request.param)


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.sampled_from(["null", "\ud800", "\udfff\ud800", "a\u2028b", "\x00", "é中😀"])
)
json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _same(a: object, b: object) -> bool:
    """Equal, with the same types, float bits and key order (what ``==`` glosses over)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))  # type: ignore[arg-type]
    return a == b


def _loads_verdict(loads: Any, text: str) -> object:
    try:
        return ("ok", loads(text))
    except json.JSONDecodeError as exc:
        return ("JSONDecodeError", exc.msg, exc.pos)
    except RecursionError:
        return ("RecursionError",)


def _texts() -> st.SearchStrategy[str]:
    dumped = st.builds(
        lambda v, ascii_only, compact: json.dumps(
            v, ensure_ascii=ascii_only, separators=(",", ":") if compact else None
        ),
        json_values,
        st.booleans(),
        st.booleans(),
    )
    damaged = st.builds(
        lambda text, at, insert: text[:at] + insert + text[at + 1 :],
        dumped,
        st.integers(0, 40),
        st.sampled_from(["", "{", "}", '"', "\\", ",", ":", "1", "e", "-", " ", "\x01", "\\u"]),
    )
    special = st.sampled_from(
        [
            '{"a":1,"a":2,"b":3,"a":4}',
            "1e400",
            "-1e400",
            "1e-400",
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890.5",
            "0.1000000000000000055511151231257827",
            "[" * 3000 + "]" * 3000,
            "\ufeff{}",
            '{"a":"\\ud83d\\ude00"}',
            "-0",
            "1.0E+2",
            "NaN",
            "-Infinity",
            '"\\/"',
            " \t\n\r{}\r\n",
        ]
    )
    return dumped | damaged | special | st.text(max_size=30)


# The fixture only picks a path; it holds no state an input could leave behind.
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_texts())
def test_loads_event_is_json_loads(json_path: str, text: str) -> None:
    ours = _loads_verdict(base.loads_event, text)
    reference = _loads_verdict(json.loads, text)
    assert ours[0] == reference[0]
    if ours[0] == "ok":
        assert _same(ours[1], reference[1])  # type: ignore[index]
    else:
        assert ours == reference


def _canonical(value: object) -> str | None:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return None


# The fixture only picks a path; it holds no state an input could leave behind.
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(a=st.dictionaries(st.text(max_size=5), json_values, max_size=5), data=st.data())
def test_mapping_content_is_equal_exactly_when_the_json_text_is(
    json_path: str, a: dict[str, Any], data: st.DataObject
) -> None:
    # Half the time compare with a near copy, so that equal pairs are common too.
    b = (
        json.loads(json.dumps(a))
        if data.draw(st.booleans())
        else data.draw(st.dictionaries(st.text(max_size=5), json_values, max_size=5))
    )
    text_a, text_b = _canonical(a), _canonical(b)
    if text_a is None or text_b is None:
        return
    assert (base.mapping_content(a) == base.mapping_content(b)) == (text_a == text_b)


def test_nan_and_null_are_different_content(json_path: str) -> None:
    assert base.mapping_content({"a": float("nan")}) != base.mapping_content({"a": None})
    assert base.mapping_content({"a": 2**70}) == base.mapping_content({"a": 2**70})
    assert base.mapping_content({"a": 2**70}) != base.mapping_content({"a": float(2**70)})


def test_agent_gate_pure_python_turns_the_compiled_paths_off() -> None:
    code = (
        "from agent_gate.providers import base;"
        "from agent_gate import _speedups;"
        "print(_speedups.PURE_PYTHON, base.fast_loads is None, base._fast_dumps is None)"
    )
    env = {**os.environ, "AGENT_GATE_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize("as_sse", [False, True])
def test_a_limit_hit_by_a_fragment_leaves_the_same_counters_both_ways(as_sse: bool) -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f"}
    events: list[Any] = [{"type": "response.output_item.added", "output_index": 0, "item": item}]
    for seq, piece in enumerate(['{"a":"', "x" * 300, "y" * 300, '"}'], start=1):
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "delta": piece,
                "sequence_number": seq,
            }
        )
    if as_sse:
        events = [ServerSentEvent("message", json.dumps(e), "") for e in events]
    short = outcome("openai-responses", events, None)
    assert short[-5] == (
        "AccumulatorLimitExceeded",
        "limit max_call_argument_bytes=400 exceeded at event index 3",
    )
    assert short == outcome(long_way("openai-responses"), events, None)


@pytest.mark.parametrize("limit", [0, 640, 4300])
def test_event_decode_honours_the_integer_digit_limit_like_json(json_path: str, limit: int) -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        for digits in (639, 641, 4300, 4301):
            text = '{"n": ' + "9" * digits + "}"
            ours = _loads_verdict_any(base.loads_event, text)
            assert ours == _loads_verdict_any(json.loads, text), (limit, digits)
    finally:
        sys.set_int_max_str_digits(old)


def _loads_verdict_any(loads: Any, text: str) -> object:
    try:
        return ("ok", loads(text))
    except ValueError as exc:
        return ("error", type(exc).__name__, str(exc))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sse_type=st.sampled_from(["message", "response.function_call_arguments.delta", "é", "x"])
    | st.text(alphabet=st.characters(blacklist_characters="\n\r"), min_size=1, max_size=8),
    raw=st.text(max_size=300),
)
def test_sse_digest_is_content_digest_of_the_event_content(
    monkeypatch: pytest.MonkeyPatch, sse_type: str, raw: str
) -> None:
    """The replay guard's per-event digest (a kept state per SSE type, copied and fed
    the text) is the reference's digest of the same content, whatever the text holds
    (lone surrogates included) and however many types were seen."""
    monkeypatch.setattr(base, "_SEEDED_DIGEST", True)
    expected = base.content_digest(base.event_content(sse_type, raw, {}))
    assert base.sse_digest(sse_type, raw) == expected
    assert base.sse_digest(sse_type, raw) == expected  # the kept state is not consumed


def test_sse_digest_beyond_the_kept_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_SEEDED", {})
    monkeypatch.setattr(base, "_SEEDED_DIGEST", True)
    for n in range(base._MAX_SEEDED + 5):
        sse_type = f"type-{n}"
        expected = base.content_digest(base.event_content(sse_type, '{"a":1}', {}))
        assert base.sse_digest(sse_type, '{"a":1}') == expected
    assert len(base._SEEDED) == base._MAX_SEEDED


def _chat_chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **extra}


_CHAT_START = _chat_chunk(
    {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}]}
)
_CHAT_FRAGMENT = {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}


@pytest.mark.parametrize(
    "odd",
    [
        '"created": ' + "9" * 700,  # past sys.get_int_max_str_digits: json.loads refuses
        '"created": NaN',  # json.loads takes it, msgspec does not
        '"note": "\\ud800"',
        '"type": null',
        '"error": {}',
        '"choices": []',
        '"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": '
        '{"arguments": "1", "name": "g"}}]}}]',
        '"choices": [{"index": 0, "delta": {"content": "hi", "tool_calls": [{"index": 0, '
        '"function": {"arguments": "1"}}]}}]',
        '"choices": [{"index": 0.0, "delta": {"tool_calls": [{"index": 0, "function": '
        '{"arguments": "1"}}]}}]',
    ],
)
def test_chat_typed_decode_decides_as_the_dict_both_ways(odd: str) -> None:
    """A Chat fragment chunk read by the typed decoder (``hot_decode``) gives what
    the dict and the long way give, when it carries what json.loads refuses, what
    msgspec refuses, or a field that makes it no plain fragment. The last key wins
    in both, so ``odd`` (appended last) replaces a field it names."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        head = json.dumps(_chat_chunk(_CHAT_FRAGMENT))[:-1]
        events: list[object] = [
            ServerSentEvent("message", json.dumps(_CHAT_START), ""),
            ServerSentEvent("message", f"{head}, {odd}}}", ""),
            ServerSentEvent("message", json.dumps(_chat_chunk(_CHAT_FRAGMENT)), ""),
        ]
        both_ways("openai-chat", events)
    finally:
        sys.set_int_max_str_digits(old)


def test_chat_fragments_take_the_typed_decode() -> None:
    """The typed decoder is the one that reads a plain fragment chunk (the test above
    would pass without it): with msgspec and the switch on."""
    if base._speedups.msgspec is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")
    acc = Accumulator("openai-chat")
    assert acc._hot_decode is not None
    typed = acc._hot_decode(json.dumps(_chat_chunk(_CHAT_FRAGMENT)))
    acc.feed(_CHAT_START)
    assert acc._adapter.hot_fragment(typed, "message") == ("call_1", '{"a":')


def test_chat_chunks_without_tool_calls_skip_the_typed_decode() -> None:
    """A text chunk (most of a Chat stream) cannot be a fragment: it is not tried by
    the typed decoder, whose failure would cost as much as the dict decode after it."""
    acc = Accumulator("openai-chat")
    real = acc._hot_decode
    if real is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")
    tried: list[str] = []

    def counting(raw: str) -> Any:
        tried.append(raw)
        return real(raw)

    acc._hot_decode = counting
    text = json.dumps(_chat_chunk({"content": "hello"}))
    fragment = json.dumps(_chat_chunk(_CHAT_FRAGMENT))
    for data in (json.dumps(_CHAT_START), text, fragment):
        acc.feed(ServerSentEvent("message", data, ""))
    assert tried == [json.dumps(_CHAT_START), fragment]
    assert acc.turn.entries[0].part == {"content": "hello"}


def test_chat_fragments_read_typed_keep_the_replay_and_terminal_decisions() -> None:
    """A fragment the typed decoder reads goes through the same replay guard and
    terminal check as one decoded to a dict: positioned by its SSE id alone, a
    resent fragment is dropped, a resent id with other text conflicts, and a fragment
    after the terminal is counted and ignored, both ways (the transcripts carry no
    SSE ids, so the damaged-stream test above never replays a typed fragment)."""
    if base._speedups.msgspec is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")

    def fragment(text: str) -> str:
        call = {"index": 0, "function": {"arguments": text}}
        return json.dumps(_chat_chunk({"tool_calls": [call]}))

    first, second, other = fragment('{"a":'), fragment("1}"), fragment("2}")
    done = json.dumps(_chat_chunk({}) | {"choices": [
        {"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    replayed = [
        ServerSentEvent("message", json.dumps(_CHAT_START), "1"),
        ServerSentEvent("message", first, "2"),
        ServerSentEvent("message", second, "3"),
        ServerSentEvent("message", first, "2"),  # after the reconnect: resent, same text
        ServerSentEvent("message", second, "3"),
        ServerSentEvent("message", done, "4"),
        ServerSentEvent("message", "[DONE]", ""),
        ServerSentEvent("message", second, "5"),  # after the terminal
    ]
    both_ways("openai-chat", list(replayed), reconnect_at=3)
    conflicting = [*replayed[:3], ServerSentEvent("message", other, "3"), *replayed[5:]]
    both_ways("openai-chat", conflicting, reconnect_at=3)

    acc = Accumulator("openai-chat")
    real = acc._hot_decode
    assert real is not None
    typed: list[str] = []

    def counting(raw: str) -> Any:
        typed.append(raw)
        return real(raw)

    acc._hot_decode = counting
    calls = []
    for at, event in enumerate(replayed):
        if at == 3:
            acc.reconnected()
        calls += acc.feed(event)
    calls += acc.close()
    assert typed.count(first) == 2 and typed.count(second) == 3
    assert [(c.call_id, c.arguments) for c in calls] == [("call_1", {"a": 1})]
    assert (acc.stats.replayed_events, acc.stats.events_after_terminal) == (2, 1)


_RESPONSES_DELTA = "response.function_call_arguments.delta"


def _responses_delta(seq: int, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": _RESPONSES_DELTA,
        "item_id": "fc_1",
        "output_index": 0,
        "delta": text,
        "obfuscation": "a1",
        "sequence_number": seq,
        **extra,
    }


def _responses_start() -> ServerSentEvent:
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "sequence_number": 0,
        "item": {**_ITEM, "status": "in_progress", "arguments": ""},
    }
    return ServerSentEvent("response.output_item.added", json.dumps(added), "")


def _responses_done(seq: int, arguments: str) -> list[ServerSentEvent]:
    done = {
        "type": "response.output_item.done",
        "output_index": 0,
        "sequence_number": seq,
        "item": {**_ITEM, "status": "completed", "arguments": arguments},
    }
    completed = {"type": "response.completed", "sequence_number": seq + 1, "response": {}}
    return [
        ServerSentEvent("response.output_item.done", json.dumps(done), ""),
        ServerSentEvent("response.completed", json.dumps(completed), ""),
    ]


@pytest.mark.parametrize(
    "odd",
    [
        '"created": ' + "9" * 700,  # past sys.get_int_max_str_digits: json.loads refuses
        '"output_index": NaN',  # json.loads takes it, msgspec does not
        '"delta": "\\ud800"',
        '"delta": ""',
        '"delta": 7',
        '"item_id": "fc_unknown"',
        '"item_id": null',
        '"type": "response.output_text.delta"',
        '"type": "response.custom_tool_call_input.delta"',
        '"sequence_number": 1.0',
        '"sequence_number": true',
        '"sequence_number": 0',  # the start's position again, with other content
        '"sequence_number": ' + "9" * 30,  # beyond 64 bits, still an int to both
    ],
)
@pytest.mark.parametrize("sse_type", [_RESPONSES_DELTA, "message", "response.other"])
def test_responses_typed_decode_decides_as_the_dict_both_ways(odd: str, sse_type: str) -> None:
    """A Responses argument delta read by the typed decoder (``hot_decode``, which
    also holds its sequence number) gives what the dict and the long way give, when
    it carries what json.loads refuses, what msgspec refuses, a field that makes it
    no plain delta, or a sequence number of another type or already seen. The last
    key wins in both, so ``odd`` (appended last) replaces a field it names."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        head = json.dumps(_responses_delta(1, '{"a":'))[:-1]
        events: list[object] = [
            _responses_start(),
            ServerSentEvent(sse_type, f"{head}, {odd}}}", ""),
            ServerSentEvent(sse_type, json.dumps(_responses_delta(2, '{"a":')), ""),
            ServerSentEvent(_RESPONSES_DELTA, json.dumps(_responses_delta(3, "1}")), ""),
            *_responses_done(4, '{"a":1}'),
        ]
        both_ways("openai-responses", events)
    finally:
        sys.set_int_max_str_digits(old)


def test_responses_deltas_take_the_typed_decode() -> None:
    """The typed decoder is the one that reads a plain argument delta, sequence number
    included (the test above would pass without it): with msgspec and the switch on."""
    if base._speedups.msgspec is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")
    acc = Accumulator("openai-responses")
    real = acc._hot_decode
    assert real is not None
    typed = real(json.dumps(_responses_delta(7, '{"a":')))
    assert typed.sequence_number == 7
    acc.feed(_responses_start())
    assert acc._adapter.hot_fragment(typed, _RESPONSES_DELTA) == ("c1", '{"a":')
    assert acc._adapter.hot_fragment(typed, "response.other") is None

    tried: list[str] = []

    def counting(raw: str) -> Any:
        tried.append(raw)
        return real(raw)

    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    acc._hot_decode = counting
    text = {"type": "response.output_text.delta", "item_id": "m", "delta": "hi",
            "sequence_number": 1}
    fragments = [json.dumps(_responses_delta(2, '{"a":')), json.dumps(_responses_delta(3, "1}"))]
    feed = [
        _responses_start(),
        ServerSentEvent("response.output_text.delta", json.dumps(text), ""),
        *(ServerSentEvent(_RESPONSES_DELTA, f, "") for f in fragments),
        *_responses_done(4, '{"a":1}'),
    ]
    calls = [call for event in feed for call in acc.feed(event)]
    assert tried == fragments  # a text delta is not tried: it is no argument delta
    assert [(c.call_id, c.arguments) for c in calls] == [("c1", {"a": 1})]


def test_responses_deltas_read_typed_keep_the_replay_and_terminal_decisions() -> None:
    """A delta the typed decoder reads is positioned by the sequence number it holds:
    resent after a reconnect it is dropped, resent with other text it conflicts, and
    after the terminal it is counted and ignored, both ways and as the dict path."""
    if base._speedups.msgspec is None:
        pytest.skip("msgspec not installed, or AGENT_GATE_PURE_PYTHON is set")
    first = ServerSentEvent(_RESPONSES_DELTA, json.dumps(_responses_delta(1, '{"a":')), "")
    second = ServerSentEvent(_RESPONSES_DELTA, json.dumps(_responses_delta(2, "1}")), "")
    other = ServerSentEvent(_RESPONSES_DELTA, json.dumps(_responses_delta(2, "2}")), "")
    late = ServerSentEvent(_RESPONSES_DELTA, json.dumps(_responses_delta(9, "3}")), "")
    replayed = [_responses_start(), first, second, first, second, *_responses_done(3, '{"a":1}')]
    both_ways("openai-responses", [*replayed, late], reconnect_at=3)
    both_ways("openai-responses", [*replayed[:4], other, *replayed[5:]], reconnect_at=3)

    acc = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
    assert acc._hot_decode is not None
    calls = []
    for at, event in enumerate([*replayed, late]):
        if at == 3:
            acc.reconnected()
        calls += acc.feed(event)
    calls += acc.close()
    assert [(c.call_id, c.arguments) for c in calls] == [("c1", {"a": 1})]
    assert (acc.stats.replayed_events, acc.stats.events_after_terminal) == (2, 1)
    with pytest.raises(ReplayConflictError):
        acc = Accumulator("openai-responses")
        for event in [*replayed[:4], other]:
            acc.feed(event)
