"""Model-chosen text the ledger cannot store rejects that call, never the run.

PostgreSQL refuses a call id longer than its column, a NUL character or a lone
surrogate; SQLite stores them. Before this was fixed, one such call aborted the
whole run with a database error (PostgreSQL) or a ``UnicodeEncodeError`` (both),
and the other calls of the batch were never recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from agent_gate import CallState, Gate, GateUsageError, ToolRegistry

StreamOf = Callable[..., list[dict[str, Any]]]


def make_tools(ran: Counter[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"x": {"type": "string"}}})
    def look(x: str = "") -> str:
        ran["look"] += 1
        return "ok"

    return tools


BAD_IDS = {
    "long call id": ("c" * 300, "look"),
    "long tool name": ("c_name", "t" * 250),
    "NUL in call id": ("c\x00x", "look"),
}


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_an_unstorable_id_rejects_only_its_call(
    db_url: str, case: str, responses_stream: StreamOf
) -> None:
    bad_id, bad_name = BAD_IDS[case]
    ran: Counter[str] = Counter()
    stream = responses_stream(
        [("c_before", "look", "{}"), (bad_id, bad_name, "{}"), ("c_after", "look", "{}")]
    )
    with Gate(make_tools(ran), db_url) as gate:
        first = gate.run(stream, task_id="t", provider="openai-responses")
        states = {o.call_id: o.state for o in first.outcomes}
        assert states == {
            "c_before": CallState.SUCCEEDED,
            bad_id: CallState.REJECTED,
            "c_after": CallState.SUCCEEDED,
        }
        [rejected] = [o for o in first.outcomes if o.call_id == bad_id]
        assert rejected.code == "identifier_unstorable"
        # The agent answers the model under the id the model chose.
        answers = first.tool_results("openai-responses")
        assert bad_id in {a["call_id"] for a in answers}
        # A replay of the same stream finds the same rows: nothing new, nothing runs.
        second = gate.run(stream, task_id="t", provider="openai-responses")
        assert all(o.replayed for o in second.outcomes)
        assert {o.call_id: o.state for o in second.outcomes} == states
        stored = {rec.call_id: rec.state for rec in gate.ledger.calls("t")}
        assert len(stored) == 3
    assert ran["look"] == 2


def test_a_lone_surrogate_in_handed_in_arguments_is_a_typed_rejection(db_url: str) -> None:
    ran: Counter[str] = Counter()
    with Gate(make_tools(ran), db_url) as gate:
        bad = gate.execute("t", {"call_id": "c1", "name": "look", "arguments": {"x": "\ud800"}})
        good = gate.execute("t", {"call_id": "c2", "name": "look", "arguments": {"x": "fine"}})
        key = gate.execute("t", {"call_id": "c3", "name": "look", "arguments": {"\udfff": "k"}})
    assert (bad.state, bad.code) == (CallState.REJECTED, "arguments_not_json")
    assert "surrogate" in (bad.reason or "")
    assert (key.state, key.code) == (CallState.REJECTED, "arguments_not_json")
    assert good.state is CallState.SUCCEEDED
    assert ran["look"] == 1


def test_a_lone_surrogate_in_a_call_id_is_recorded_under_a_stand_in(db_url: str) -> None:
    ran: Counter[str] = Counter()
    with Gate(make_tools(ran), db_url) as gate:
        out = gate.execute("t", {"call_id": "c\ud800", "name": "look", "arguments": {}})
        again = gate.execute("t", {"call_id": "c\ud800", "name": "look", "arguments": {}})
        [rec] = gate.ledger.calls("t")
    assert (out.state, out.code, out.call_id) == (
        CallState.REJECTED, "identifier_unstorable", "c\ud800")
    assert again.replayed
    assert rec.call_id.startswith("unstorable:")
    json.dumps(rec.call_id).encode("utf-8")
    assert ran["look"] == 0


@pytest.mark.parametrize("task_id", ["t" * 256, "t\x00", "t\ud800", ""])
def test_an_unstorable_task_id_is_the_callers_error(db_url: str, task_id: str) -> None:
    ran: Counter[str] = Counter()
    with Gate(make_tools(ran), db_url) as gate, pytest.raises(GateUsageError, match="task_id"):
        gate.execute(task_id, {"call_id": "c1", "name": "look", "arguments": {}})
    assert ran["look"] == 0
