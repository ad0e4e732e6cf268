"""Section 4: memory while accumulating 1,000 tool calls in parallel.

One response announces 1,000 function calls and then streams their arguments
interleaved, one delta per call in turn, as a model that emits parallel calls
does. The events are built before tracing starts, so the peak counts what the
accumulator itself keeps: the calls' state and their argument text, which it
must hold until each call completes. The figure to compare it with is the
argument text itself (what no accumulator can avoid holding).
(The decoder's own peak on the 50 MB stream is in section 1.)
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from agent_gate.accumulate import Accumulator
from agent_gate.calls import CallStatus
from agent_gate.sse import ServerSentEvent


def parallel_events(calls: int, deltas: int, delta_chars: int) -> tuple[list[ServerSentEvent], int]:
    """``calls`` function calls, each ``deltas`` deltas of ``delta_chars`` characters."""
    events: list[dict[str, Any]] = []
    texts = []
    for i in range(calls):
        body = ("x" * (deltas * delta_chars - 40))[: deltas * delta_chars - 40]
        text = json.dumps({"n": i, "body": body})
        texts.append(text)
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "t"}
        events.append({"type": "response.output_item.added", "output_index": i, "item": item})
    step = -(-max(len(t) for t in texts) // deltas)
    for d in range(deltas + 1):
        for i, text in enumerate(texts):
            piece = text[d * step : (d + 1) * step]
            if piece:
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": f"fc_{i}",
                        "output_index": i,
                        "delta": piece,
                    }
                )
    for i, text in enumerate(texts):
        item = {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "t",
            "status": "completed",
            "arguments": text,
        }
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": {"id": "r", "status": "completed"}})
    sse = [ServerSentEvent(e["type"], json.dumps(e, separators=(",", ":")), "") for e in events]
    return sse, sum(len(t) for t in texts)


def run_section(quick: bool) -> dict[str, Any]:
    calls = 1000
    deltas = 20 if quick else 100
    events, argument_chars = parallel_events(calls, deltas, 20)
    acc = Accumulator("openai-responses", max_calls=calls)
    released = []
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for event in events:
        released += acc.feed(event)
    released += acc.close()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert len(released) == calls and all(c.status is CallStatus.COMPLETE for c in released)
    return {
        "calls": calls,
        "deltas_per_call": deltas,
        "events": len(events),
        "argument_bytes": argument_chars,
        "peak_extra_heap_bytes": peak,
        "peak_per_call_bytes": peak / calls,
        "peak_over_argument_bytes": peak / argument_chars,
    }
