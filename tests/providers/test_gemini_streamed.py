"""Vertex AI's streamed function-call arguments, through ``Gate.run``.

A response whose calls arrive as ``partialArgs`` pieces (``willContinue``) runs each
good call exactly once, with the object its pieces assemble to; a call whose pieces
cannot be assembled is recorded ``rejected`` with its reason and never runs, and its
siblings still do. Reading the same response again runs nothing. No chunk, candidate
or part of the wrong shape ends the run: it is an anomaly, and the calls already
whole still complete on the response's ``STOP``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH
from agent_gate.sse import ServerSentEvent
from agent_gate.sse.decoder import SSEDecoder

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts" / "gemini"


def transcript(name: str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return decoder.feed((TRANSCRIPTS / f"{name}.sse").read_bytes())


Runs = list[tuple[str, dict[str, Any]]]


def counting_tools(names: list[str]) -> tuple[ToolRegistry, Runs]:
    """A write tool per name that records every run with the arguments it got."""
    runs: Runs = []
    tools = ToolRegistry()
    for name in names:

        def run(_name: str = name, **arguments: Any) -> dict[str, Any]:
            runs.append((_name, arguments))
            return {"ok": True}

        tools.tool(name=name, schema={"type": "object"}, effect="write", idempotency="none")(run)
    return tools, runs


TICKET = {
    "title": "Drucker im 3. Stock druckt nur Streifen — 😀",
    "labels": ["hardware", "urgent"],
    "owner": {"name": "Marta", "contact": {"e-mail": "marta@example.org"}},
    "steps": [{"action": "restart", "minutes": 1.5}, {"action": "replace toner", "minutes": 10}],
    "priority": 2,
    "notify": True,
    "parent": None,
}


def test_a_streamed_call_runs_once_with_its_assembled_arguments_and_a_replay_runs_nothing(
    db_url: str,
) -> None:
    tools, runs = counting_tools(["create_ticket"])
    with Gate(tools, db_url) as gate:
        first = gate.run(transcript("streamed_call"), task_id="t", provider="gemini")
        assert first.error is None and first.terminal is not None and first.terminal.succeeded
        (outcome,) = first.outcomes
        assert (outcome.call_id, outcome.state, outcome.replayed) == (
            "ZmV0Y2gtdGlja2V0LTQ4Mg:0:0",
            CallState.SUCCEEDED,
            False,
        )
        assert runs == [("create_ticket", TICKET)]

        (again,) = gate.run(transcript("streamed_call"), task_id="t", provider="gemini").outcomes
        assert (again.call_id, again.replayed) == (outcome.call_id, True)
        assert len(runs) == 1


def test_two_streamed_calls_without_response_id_keep_their_ids_on_replay(db_url: str) -> None:
    tools, runs = counting_tools(["get_weather", "send_email"])
    with Gate(tools, db_url) as gate:
        first = gate.run(transcript("two_streamed_calls"), task_id="t", provider="gemini")
        assert [o.state for o in first.outcomes] == [CallState.SUCCEEDED] * 2
        assert runs == [
            ("get_weather", {"city": "Zürich", "unit": "celsius"}),
            ("send_email", {"to": ["marta@example.org"], "subject": "Réunion à 14h"}),
        ]
        again = gate.run(transcript("two_streamed_calls"), task_id="t", provider="gemini")
        assert [o.call_id for o in again.outcomes] == [o.call_id for o in first.outcomes]
        assert all(o.replayed for o in again.outcomes) and len(runs) == 2


def test_bad_continuations_reject_only_their_own_calls(db_url: str) -> None:
    rejected = {
        "conflict": "json_path_conflict",
        "wildcard": "unparseable_json_path",
        "onto_number": "json_path_conflict",
        "number_piece": "string_continued_with_non_string",
        "too_deep": "arguments_too_deep",
        "interrupted": "string_pieces_interrupted",
        "gap": "json_path_skips_array_index",
        "continued_number": "non_string_continued",
        "open_string": "streamed_string_not_ended",
        "never_ended": "streamed_call_not_ended",
    }
    tools, runs = counting_tools(["get_weather", "send_email", "get_time", *rejected])
    with Gate(tools, db_url) as gate:
        first = gate.run(transcript("streamed_bad_continuations"), task_id="t", provider="gemini")
        assert first.error is None and first.terminal is not None and first.terminal.succeeded
        states = {o.tool: (o.state, o.reason) for o in first.outcomes}
        for tool, reason in rejected.items():
            state, why = states[tool]
            assert state is CallState.REJECTED and reason in (why or ""), tool
            stored = gate.ledger.get("t", next(o.call_id for o in first.outcomes if o.tool == tool))
            assert stored is not None and stored.state is CallState.REJECTED
        assert sorted(runs, key=lambda r: r[0]) == [
            ("get_time", {"zone": "Europe/Oslo"}),
            ("get_weather", {"city": "Oslo"}),
            ("send_email", {"to": "ola@example.org", "cc": ["kari@example.org"]}),
        ]
        # No value of a rejected call is echoed in its reason.
        assert not any("after the bad piece" in (o.reason or "") for o in first.outcomes)

        again = gate.run(transcript("streamed_bad_continuations"), task_id="t", provider="gemini")
        assert len(runs) == 3
        assert {o.call_id for o in again.outcomes} == {o.call_id for o in first.outcomes}


# -- parts of the wrong shape --------------------------------------------------

RID = "d3Jvbmctc2hhcGVz"
GOOD = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}


def chunk(candidates: Any) -> dict[str, Any]:
    return {"candidates": candidates, "modelVersion": "gemini-2.5-pro", "responseId": RID}


def parts(*items: Any) -> dict[str, Any]:
    return chunk([{"content": {"role": "model", "parts": list(items)}, "index": 0}])


STOP = chunk([{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}])
STREAM_START = parts(
    {
        "functionCall": {
            "name": "send_email",
            "partialArgs": [{"jsonPath": "$.to", "stringValue": "ola@example.org"}],
            "willContinue": True,
        }
    }
)
STREAM_END = parts({"functionCall": {"partialArgs": [{"jsonPath": "$.body", "stringValue": "x"}]}})

WRONG_SHAPES = {
    "candidates_not_a_list": chunk({"index": 0}),
    "candidate_not_an_object": chunk(["candidate"]),
    "candidate_index_not_an_integer": chunk([{"index": "0", "content": {"parts": [GOOD]}}]),
    "content_not_an_object": chunk([{"index": 0, "content": ["parts"]}]),
    "parts_not_a_list": chunk([{"index": 0, "content": {"parts": {"text": "x"}}}]),
    "part_not_an_object": parts(42),
    "function_call_not_an_object": parts({"functionCall": "send_email(to=...)"}),
    "function_call_without_name": parts({"functionCall": {"args": {"to": "x"}}}),
    "function_call_name_not_a_string": parts({"functionCall": {"name": 7, "args": {}}}),
}


def sse(chunks: list[dict[str, Any]]) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(c), event="message", id="") for c in chunks]


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_part_of_the_wrong_shape_loses_no_sibling_call(db_url: str, shape: str) -> None:
    tools, runs = counting_tools(["get_weather", "send_email"])
    events = sse([parts(GOOD), WRONG_SHAPES[shape], STOP])
    with Gate(tools, db_url) as gate:
        result = gate.run(events, task_id="t", provider="gemini")
        assert result.error is None and result.terminal is not None and result.terminal.succeeded
        assert [(o.tool, o.state) for o in result.outcomes] == [
            ("get_weather", CallState.SUCCEEDED)
        ]
        assert runs == [("get_weather", {"city": "Oslo"})]
        assert result.anomalies, "the bad part is reported"


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_part_of_the_wrong_shape_rejects_the_streamed_call_it_may_have_belonged_to(
    db_url: str, shape: str
) -> None:
    tools, runs = counting_tools(["get_weather", "send_email"])
    events = sse([parts(GOOD), STREAM_START, WRONG_SHAPES[shape], STREAM_END, STOP])
    with Gate(tools, db_url) as gate:
        result = gate.run(events, task_id="t", provider="gemini")
        assert result.error is None and result.terminal is not None and result.terminal.succeeded
        states = {o.tool: o.state for o in result.outcomes}
        assert states == {"get_weather": CallState.SUCCEEDED, "send_email": CallState.REJECTED}
        assert runs == [("get_weather", {"city": "Oslo"})]


def test_a_finish_reason_of_the_wrong_shape_ends_the_response_without_running(
    db_url: str,
) -> None:
    tools, runs = counting_tools(["get_weather"])
    bad_finish = chunk([{"content": {"parts": [{"text": ""}]}, "finishReason": 1, "index": 0}])
    with Gate(tools, db_url) as gate:
        result = gate.run(sse([parts(GOOD), bad_finish]), task_id="t", provider="gemini")
        assert result.error is None
        assert result.terminal is not None and not result.terminal.succeeded
        ((tool, state),) = [(o.tool, o.state) for o in result.outcomes]
        assert (tool, state) == ("get_weather", CallState.INCOMPLETE)
        assert runs == []


def test_snake_case_mappings_of_a_streamed_call_are_assembled_alike(db_url: str) -> None:
    """What an SDK's ``model_dump()`` without aliases gives: the same call, run once."""

    def piece(call: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"index": 0, "content": {"parts": [{"function_call": call}]}}
        if finish is not None:
            candidate["finish_reason"] = finish
        return {"response_id": "c25ha2U", "candidates": [candidate]}

    events = [
        piece({"name": "send_email", "will_continue": True}),
        piece(
            {
                "partial_args": [
                    {"json_path": "$.to[0]", "string_value": "ola@", "will_continue": True}
                ],
                "will_continue": True,
            }
        ),
        piece(
            {
                "partial_args": [
                    {"json_path": "$.to[0]", "string_value": "example.org"},
                    {"json_path": "$.urgent", "bool_value": False},
                    {"json_path": "$.reply_to", "null_value": "NULL_VALUE"},
                ]
            },
            "STOP",
        ),
    ]
    tools, runs = counting_tools(["send_email"])
    with Gate(tools, db_url) as gate:
        (outcome,) = gate.run(events, task_id="t", provider="gemini").outcomes
        assert (outcome.call_id, outcome.state) == ("c25ha2U:0:0", CallState.SUCCEEDED)
        assert runs == [
            ("send_email", {"to": ["ola@example.org"], "urgent": False, "reply_to": None})
        ]


@pytest.mark.parametrize(
    ("segments", "state"),
    [(MAX_ARGUMENT_DEPTH, CallState.SUCCEEDED), (MAX_ARGUMENT_DEPTH + 1, CallState.REJECTED)],
)
def test_a_streamed_path_may_nest_as_deep_as_any_other_arguments_and_no_deeper(
    db_url: str, segments: int, state: CallState
) -> None:
    """``$.d.d...`` with n segments builds n containers, the arguments object first."""
    path = "$" + ".d" * segments
    call = {
        "name": "echo",
        "partialArgs": [
            {"jsonPath": path, "boolValue": True},
            {"jsonPath": "$.e", "numberValue": 1},
        ],
    }
    tools, runs = counting_tools(["get_weather", "echo"])
    with Gate(tools, db_url) as gate:
        result = gate.run(
            sse([parts(GOOD), parts({"functionCall": call}), STOP]), task_id="t", provider="gemini"
        )
        outcomes = {o.tool: o for o in result.outcomes}
        assert outcomes["get_weather"].state is CallState.SUCCEEDED
        assert outcomes["echo"].state is state
        if state is CallState.REJECTED:
            assert "arguments_too_deep" in (outcomes["echo"].reason or "")
            assert [name for name, _ in runs] == ["get_weather"]
        else:
            ((_, arguments),) = [r for r in runs if r[0] == "echo"]
            assert arguments["e"] == 1
