"""Gemini call ids without ``responseId``: unique per response, stable under replay.

Two turns of one task, each a response whose chunks carry no ``responseId`` and
the very same ``functionCall``, differ only in what real responses differ in
(``usageMetadata``, Vertex's ``createTime``, a thinking model's
``thoughtSignature``): both calls run. The same response read again (fed again,
or resumed after a reconnect with its chunks resent) runs nothing again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import Accumulator
from agent_gate.providers.gemini import GeminiAdapter
from agent_gate.sse import ServerSentEvent

CALL = {"functionCall": {"name": "send_note", "args": {"to": "marta", "text": "on my way"}}}


def response(turn: int, differs_in: str) -> list[dict[str, Any]]:
    """One Gemini response (three chunks, no ``responseId``) of turn ``turn``."""
    first: dict[str, Any] = {
        "candidates": [
            {"content": {"parts": [{"text": "Sending it."}], "role": "model"}, "index": 0}
        ],
        "modelVersion": "gemini-2.5-flash",
    }
    part = dict(CALL)
    calls: dict[str, Any] = {
        "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
        "modelVersion": "gemini-2.5-flash",
    }
    if differs_in == "usageMetadata":
        calls["usageMetadata"] = {
            "promptTokenCount": 96 + 140 * turn,
            "candidatesTokenCount": 12,
            "totalTokenCount": 108 + 140 * turn,
        }
    elif differs_in == "createTime":
        for chunk in (first, calls):
            chunk["createTime"] = f"2026-12-01T21:0{turn}:07.512345Z"
    elif differs_in == "thoughtSignature":
        part["thoughtSignature"] = f"CiQBVKhc7{turn}xq0nCqS3cH4Vt0kZs+0d8c8K1u2y6pY5bT="
    last = {
        "candidates": [
            {
                "content": {"parts": [{"text": ""}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "modelVersion": "gemini-2.5-flash",
    }
    return [first, calls, last]


def sse(chunks: list[dict[str, Any]], ids: bool = False) -> list[ServerSentEvent]:
    return [
        ServerSentEvent(data=json.dumps(c), event="message", id=f"e{i}" if ids else "")
        for i, c in enumerate(chunks)
    ]


@pytest.fixture
def tools_and_runs() -> tuple[ToolRegistry, list[str]]:
    runs: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none")
    def send_note(to: str, text: str) -> dict[str, Any]:
        runs.append(f"{to}: {text}")
        return {"sent": True}

    return tools, runs


@pytest.mark.parametrize("differs_in", ["usageMetadata", "createTime", "thoughtSignature"])
@pytest.mark.parametrize("form", ["sse", "mappings"])
def test_two_turns_with_the_same_call_both_run_and_a_replay_runs_neither_again(
    db_url: str, tools_and_runs: tuple[ToolRegistry, list[str]], differs_in: str, form: str
) -> None:
    tools, runs = tools_and_runs

    def events(turn: int) -> list[Any]:
        chunks = response(turn, differs_in)
        return sse(chunks) if form == "sse" else chunks

    with Gate(tools, db_url) as gate:
        first = gate.run(events(1), task_id="t", provider="gemini")
        second = gate.run(events(2), task_id="t", provider="gemini")
        (one,), (two,) = first.outcomes, second.outcomes
        assert one.call_id != two.call_id
        assert (one.state, one.replayed) == (CallState.SUCCEEDED, False)
        assert (two.state, two.replayed) == (CallState.SUCCEEDED, False)
        assert runs == ["marta: on my way"] * 2

        (again,) = gate.run(events(2), task_id="t", provider="gemini").outcomes
        assert (again.call_id, again.state, again.replayed) == (
            two.call_id,
            CallState.SUCCEEDED,
            True,
        )
        assert len(runs) == 2
        assert len(gate.ledger.calls("t")) == 2


def test_a_resume_after_last_event_id_keeps_the_ids_and_runs_once(
    db_url: str, tools_and_runs: tuple[ToolRegistry, list[str]]
) -> None:
    tools, runs = tools_and_runs
    clean = sse(response(1, "usageMetadata"), ids=True)

    with Gate(tools, db_url) as gate:
        acc = Accumulator("gemini", dispatch=gate.dispatch_mode)

        def resumed() -> Iterator[ServerSentEvent]:
            yield clean[0]
            yield clean[1]
            acc.reconnected()  # the connection dropped; the server resends from e1
            yield clean[1]
            yield clean[2]

        result = gate.run(resumed(), task_id="a", provider="gemini", accumulator=acc)
        assert acc.stats.replayed_events == 1
        (resumed_call,) = result.outcomes
        (clean_call,) = gate.run(clean, task_id="b", provider="gemini").outcomes
    assert resumed_call.call_id == clean_call.call_id
    assert resumed_call.call_id.startswith("gemini-") and resumed_call.call_id.endswith(":0:0")
    assert runs == ["marta: on my way"] * 2  # once per task


def test_a_response_id_is_still_the_call_ids_response_part(db_url: str) -> None:
    chunks = response(1, "usageMetadata")
    for chunk in chunks:
        chunk["responseId"] = "pR7wYc3mN0eVb5tJk1hS2g"
    tools = ToolRegistry()
    tools.tool(schema={"type": "object"}, effect="read", name="send_note")(lambda **_: "ok")
    with Gate(tools, db_url) as gate:
        (outcome,) = gate.run(sse(chunks), task_id="t", provider="gemini").outcomes
    assert outcome.call_id == "pR7wYc3mN0eVb5tJk1hS2g:0:0"


def test_identical_responses_are_told_apart_only_by_a_response_key(
    db_url: str, tools_and_runs: tuple[ToolRegistry, list[str]]
) -> None:
    """The documented residual case: byte-identical responses without ``responseId``
    share ids (the second is answered from the ledger, never run twice), unless the
    caller passes a stable key of the response it requested."""
    tools, runs = tools_and_runs
    same = sse(response(1, "nothing"))
    with Gate(tools, db_url) as gate:
        (one,) = gate.run(same, task_id="t", provider="gemini").outcomes
        (two,) = gate.run(same, task_id="t", provider="gemini").outcomes
        assert two.call_id == one.call_id and two.replayed and len(runs) == 1

        def keyed(key: str) -> Accumulator:
            adapter = GeminiAdapter(response_key=key)
            return Accumulator(adapter, dispatch=gate.dispatch_mode)

        outcomes = [
            gate.run(same, task_id="t", provider="gemini", accumulator=keyed(key)).outcomes[0]
            for key in ("request-7", "request-8", "request-8")
        ]
    assert len({one.call_id, *(o.call_id for o in outcomes)}) == 3
    assert [o.replayed for o in outcomes] == [False, False, True]
    assert len(runs) == 3
