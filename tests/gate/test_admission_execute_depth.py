"""Arguments handed to ``Gate.execute`` as an object are bounded like streamed text.

Before this, a dict nested 1,000 deep raised an untyped ``RecursionError`` out of
``execute`` before anything was recorded; text nested past the limit was filed
as "not an object".
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "secret-leaf-value"}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def test_a_dict_too_deep_is_rejected_alone_and_named(db_url: str) -> None:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()
    tools.register(lambda **_: ran.update(["t"]), name="t", schema={"type": "object"})
    with Gate(tools, db_url) as gate:
        deep = gate.execute("task", {"call_id": "deep", "name": "t", "arguments": nested(1000)})
        text = gate.execute(
            "task", {"call_id": "text", "name": "t", "arguments": json.dumps(nested(200))})
        edge = gate.execute(
            "task", {"call_id": "edge", "name": "t", "arguments": nested(MAX_ARGUMENT_DEPTH)})
        again = gate.execute("task", {"call_id": "deep", "name": "t", "arguments": nested(1000)})
    for out in (deep, text):
        assert (out.state, out.code) == (CallState.REJECTED, "arguments_too_deep")
        assert str(MAX_ARGUMENT_DEPTH) in (out.reason or "")
        assert "secret-leaf-value" not in (out.reason or "")
    assert again.replayed and again.state is CallState.REJECTED
    assert edge.state is CallState.SUCCEEDED
    assert ran["t"] == 1
