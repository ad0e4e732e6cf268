"""Every recorded transcript gives the same calls however the bytes arrive.

A network read is not an event and an event is not a call: each transcript in
``tests/transcripts`` is decoded by the real SSE decoder fed whole, one byte at
a time, in fixed-size reads and in random chunkings, and must always yield the
calls and terminal state written by hand in its ``.expected.jsonl``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gate.accumulate import Accumulator, DispatchMode, stream_calls
from agent_gate.calls import CallStatus
from agent_gate.cli.calls import call_record

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


def load(case: str) -> tuple[bytes, str, list[dict[str, object]]]:
    folder, stem = case.split("/")
    raw = (TRANSCRIPTS / folder / f"{stem}.sse").read_bytes()
    lines = (TRANSCRIPTS / folder / f"{stem}.expected.jsonl").read_text("utf-8").splitlines()
    return raw, PROVIDERS[folder], [json.loads(line) for line in lines]


def run(
    raw: bytes,
    provider: str,
    cuts: list[int],
    dispatch: DispatchMode = DispatchMode.ON_CALL_COMPLETE,
) -> list[dict[str, object]]:
    bounds = [0, *sorted(cuts), len(raw)]
    chunks = (raw[start:stop] for start, stop in itertools.pairwise(bounds))
    acc = Accumulator(provider, dispatch=dispatch)
    records = [call_record(call) for call in stream_calls(chunks, acc)]
    return [*records, {"terminal": str(acc.terminal)}]


def test_there_are_transcripts_for_every_provider() -> None:
    for folder in PROVIDERS:
        assert len([c for c in CASES if c.startswith(folder + "/")]) >= 7, folder


@pytest.mark.parametrize("case", CASES)
def test_whole_stream_gives_the_expected_calls(case: str) -> None:
    raw, provider, expected = load(case)
    assert run(raw, provider, []) == expected


@pytest.mark.parametrize("case", CASES)
def test_one_byte_at_a_time_gives_the_same_calls(case: str) -> None:
    raw, provider, expected = load(case)
    assert run(raw, provider, list(range(1, len(raw)))) == expected


@pytest.mark.parametrize("size", [2, 3, 7, 61, 4096])
@pytest.mark.parametrize("case", CASES)
def test_fixed_size_reads_give_the_same_calls(case: str, size: int) -> None:
    raw, provider, expected = load(case)
    assert run(raw, provider, list(range(size, len(raw), size))) == expected


@pytest.mark.parametrize("case", CASES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_chunkings_give_the_same_calls(case: str, data: st.DataObject) -> None:
    raw, provider, expected = load(case)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=60))
    assert run(raw, provider, cuts) == expected


@pytest.mark.parametrize(
    "case",
    ["anthropic/unicode_split", "openai_chat/unicode_split", "gemini/no_args_and_unicode"],
)
def test_every_single_cut_point_gives_the_same_calls(case: str) -> None:
    raw, provider, expected = load(case)
    for cut in range(len(raw) + 1):
        assert run(raw, provider, [cut]) == expected, f"cut at byte {cut}"


@pytest.mark.parametrize("case", CASES)
def test_holding_calls_until_the_response_ends_changes_when_not_what(case: str) -> None:
    raw, provider, expected = load(case)
    held = run(raw, provider, [], DispatchMode.ON_RESPONSE_COMPLETE)
    assert held[-1] == expected[-1]

    def key(record: dict[str, object]) -> str:
        return str(record["call_id"])

    assert sorted(held[:-1], key=key) == sorted(expected[:-1], key=key)


@pytest.mark.parametrize("case", CASES)
def test_no_complete_call_is_handed_over_before_the_end_by_default(case: str) -> None:
    raw, provider, _ = load(case)
    acc = Accumulator(provider)
    seen: list[str] = []
    for call in stream_calls([raw], acc):
        if call.status is CallStatus.COMPLETE:
            assert acc.terminal is not None, call.call_id
        seen.append(call.call_id)
    assert len(seen) == len(set(seen)), "a call was released twice"
