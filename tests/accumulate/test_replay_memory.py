"""The replay guard's memory is a fixed digest per position, and bounded.

Measured with tracemalloc (a count of bytes, not a timing): feeding N small
positioned events keeps at most ``PER_POSITION_BYTES`` per event alive, whatever
the events' size, and the position past ``max_replay_positions`` is a typed error.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_gate import Gate, ToolRegistry
from agent_gate.accumulate import Accumulator
from agent_gate.errors import ReplayLimitExceeded
from agent_gate.providers import ReplayConflictError
from agent_gate.providers.replay import PER_POSITION_BYTES
from agent_gate.sse import ServerSentEvent

N = 5_000


def text_delta(seq: int) -> dict[str, Any]:
    """A small positioned event that leaves nothing behind in the accumulator but
    its replay memory (a text delta only adds to a character count)."""
    return {
        "type": "response.output_text.delta",
        "item_id": "msg_0a11ce5e000000000000000001",
        "output_index": 0,
        "content_index": 0,
        "delta": f"word {seq} of a long answer ",
        "sequence_number": seq,
    }


def as_sse(seq: int) -> ServerSentEvent:
    payload = text_delta(seq)
    return ServerSentEvent(data=json.dumps(payload), event=payload["type"], id="")


def anthropic_with_id(seq: int) -> ServerSentEvent:
    """An event positioned only by its SSE id, one per event and long (a server
    chooses its ids): the guard keeps a run per id."""
    payload = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": f"word {seq} of a long answer "},
    }
    sse_id = f"{seq:08d}-" + "0123456789abcdef" * 12
    return ServerSentEvent(data=json.dumps(payload), event=payload["type"], id=sse_id)


def retained(feed: Callable[[Accumulator, int], None], provider: str) -> int:
    """Bytes still allocated after N events were fed and every event dropped."""
    # The turn keeps text for the next request (bounded by max_turn_chars, tested in
    # tests/gate/test_next_input.py); here nothing but the replay memory may grow.
    acc = Accumulator(provider, max_turn_chars=0)
    feed(acc, 0)  # the first event builds whatever is built once
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for seq in range(1, N + 1):
            feed(acc, seq)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert acc.stats.replayed_events == 0 and acc.stats.text_chars > 0
    return after - before


@pytest.mark.parametrize(
    ("provider", "feed"),
    [
        pytest.param("openai-responses", lambda acc, seq: acc.feed(as_sse(seq)), id="sse"),
        pytest.param("openai-responses", lambda acc, seq: acc.feed(text_delta(seq)), id="mappings"),
        pytest.param("anthropic", lambda acc, seq: acc.feed(anthropic_with_id(seq)), id="sse-ids"),
    ],
)
def test_replay_memory_per_event_is_a_small_fixed_bound(
    provider: str, feed: Callable[[Accumulator, int], None]
) -> None:
    grown = retained(feed, provider)
    assert grown < PER_POSITION_BYTES * N, f"{grown / N:.0f} bytes per event"


def test_the_position_past_the_bound_is_a_typed_error() -> None:
    acc = Accumulator("openai-responses", max_replay_positions=100)
    for seq in range(100):
        acc.feed(text_delta(seq))
    # Seen positions still replay within the bound; a new one past it is refused.
    assert acc.feed(text_delta(7)) == [] and acc.stats.replayed_events == 1
    with pytest.raises(ReplayLimitExceeded) as caught:
        acc.feed(text_delta(100))
    assert caught.value.limit == "max_replay_positions" and caught.value.limit_value == 100
    assert "index 101" in str(caught.value) and "word" not in str(caught.value)


def test_replays_are_still_recognised_and_type_only_differences_conflict() -> None:
    acc = Accumulator("openai-responses")
    event = text_delta(3)
    acc.feed(dict(event))
    assert acc.feed(dict(event)) == [] and acc.stats.replayed_events == 1
    for different in (1, 1.0, True):
        acc = Accumulator("openai-responses")
        acc.feed({**event, "output_index": 1})
        if different == 1:
            assert acc.feed({**event, "output_index": 1}) == []
            continue
        with pytest.raises(ReplayConflictError):
            acc.feed({**event, "output_index": different})


def test_a_run_past_the_bound_stops_with_the_error_and_records_what_completed(
    db_url: str,
) -> None:
    ran: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read", idempotency="natural")
    def look(**arguments: Any) -> str:
        ran.append("look")
        return "ok"

    def events() -> Iterator[dict[str, Any]]:
        item = {
            "id": "fc_1",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": "call_1",
            "name": "look",
        }
        done = dict(item, status="completed", arguments="{}")
        yield {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": item,
            "sequence_number": 0,
        }
        yield {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": done,
            "sequence_number": 1,
        }
        seq = 2
        while True:  # a server that never stops: the guard's bound stops it
            yield text_delta(seq)
            seq += 1

    with Gate(tools, db_url) as gate:
        acc = Accumulator("openai-responses", max_replay_positions=500, dispatch=gate.dispatch_mode)
        result = gate.run(events(), task_id="t", provider="openai-responses", accumulator=acc)
    assert result.error is not None and "max_replay_positions=500" in result.error
    assert [o.call_id for o in result.outcomes] == ["call_1"]
    assert ran == ["look"]
