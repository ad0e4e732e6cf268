"""Arguments nested deeper than the limit: the call is rejected alone, its batch goes on.

A batch of three calls whose middle one nests 1,000 levels deep (and one just past
the limit, still shallow enough for the interpreter) is driven through ``Gate.run``
for each wire protocol's shapes: the two others are recorded and run exactly once,
the deep one is recorded ``rejected`` with ``arguments_too_deep``, and running the
same stream again runs nothing.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.errors import ArgumentsTooDeep
from agent_gate.plainjson import MAX_ARGUMENT_DEPTH, canonical_json, check_depth
from agent_gate.sse import ServerSentEvent

SHALLOW = ('{"n": 1}', '{"n": 3}')


def deep_text(depth: int) -> str:
    """An arguments object nesting ``depth`` containers, written as text (a Python
    value this deep could not even be built by ``json.loads``)."""
    inner = depth - 1
    return '{"nest": ' + "[" * inner + "]" * inner + "}"


def sse(payload: dict[str, Any] | str, event: str | None = None) -> ServerSentEvent:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return ServerSentEvent(data=data, event=event or "message", id="")


def responses_events(texts: list[str], name: str = "echo") -> list[ServerSentEvent]:
    out: list[ServerSentEvent] = []

    def add(payload: dict[str, Any]) -> None:
        payload["sequence_number"] = len(out)
        out.append(sse(payload, payload["type"]))

    add({"type": "response.created", "response": {"id": "resp_deep"}})
    for i, text in enumerate(texts):
        item = {
            "id": f"fc_{i}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": f"call_{i}",
            "name": name,
        }
        add({"type": "response.output_item.added", "output_index": i, "item": item})
        add(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{i}",
                "output_index": i,
                "delta": text,
            }
        )
        add(
            {
                "type": "response.function_call_arguments.done",
                "item_id": f"fc_{i}",
                "output_index": i,
                "arguments": text,
            }
        )
        done = dict(item, status="completed", arguments=text)
        add({"type": "response.output_item.done", "output_index": i, "item": done})
    add({"type": "response.completed", "response": {"id": "resp_deep", "status": "completed"}})
    return out


def _anthropic(blocks: list[tuple[str, str]]) -> list[str]:
    """Anthropic events as data text; each block is (start input text, partial json)."""
    out = [
        '{"type":"message_start","message":{"id":"msg_deep","type":"message",'
        '"role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}'
    ]
    for i, (start_input, partial) in enumerate(blocks):
        out.append(
            f'{{"type":"content_block_start","index":{i},"content_block":'
            f'{{"type":"tool_use","id":"toolu_{i}","name":"echo","input":{start_input}}}}}'
        )
        if partial:
            delta = {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": partial},
            }
            out.append(json.dumps(delta))
        out.append(f'{{"type":"content_block_stop","index":{i}}}')
    out.append(
        '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},'
        '"usage":{"output_tokens":5}}'
    )
    out.append('{"type":"message_stop"}')
    return out


def anthropic_delta_events(texts: list[str]) -> list[ServerSentEvent]:
    return [sse(data, json.loads(data)["type"]) for data in _anthropic([("{}", t) for t in texts])]


def anthropic_start_input_mappings(texts: list[str]) -> list[dict[str, Any]]:
    """The arguments in ``content_block_start``'s ``input`` (no deltas), as the
    mappings an SDK's ``model_dump()`` gives: already parsed, the deep one too."""
    datas = _anthropic([(t, "") for t in texts])
    return [_loads_deep(data) for data in datas]


def gemini_text(texts: list[str]) -> list[str]:
    parts = ",".join('{"functionCall":{"name":"echo","args":' + t + "}}" for t in texts)
    return [
        '{"candidates":[{"content":{"parts":[' + parts + '],"role":"model"},"index":0}],'
        '"responseId":"r-deep"}',
        '{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},'
        '"finishReason":"STOP","index":0}],"responseId":"r-deep"}',
    ]


def gemini_events(texts: list[str]) -> list[ServerSentEvent]:
    return [sse(data) for data in gemini_text(texts)]


def gemini_mappings(texts: list[str]) -> list[dict[str, Any]]:
    return [_loads_deep(data) for data in gemini_text(texts)]


def _loads_deep(text: str) -> Any:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 4000)
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)


STREAMS: dict[str, tuple[str, Callable[[list[str]], list[Any]]]] = {
    "openai-responses sse": ("openai-responses", responses_events),
    "anthropic sse deltas": ("anthropic", anthropic_delta_events),
    "anthropic start input mappings": ("anthropic", anthropic_start_input_mappings),
    "gemini sse": ("gemini", gemini_events),
    "gemini mappings": ("gemini", gemini_mappings),
}


@pytest.fixture
def counted() -> tuple[ToolRegistry, list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none")
    def echo(**arguments: Any) -> dict[str, Any]:
        runs.append(arguments)
        return {"ok": True}

    return tools, runs


@pytest.mark.parametrize("stream", sorted(STREAMS))
@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 1000])
def test_a_call_nested_too_deep_is_rejected_alone_and_replays_run_nothing(
    db_url: str, counted: tuple[ToolRegistry, list[dict[str, Any]]], stream: str, depth: int
) -> None:
    tools, runs = counted
    provider, build = STREAMS[stream]
    texts = [SHALLOW[0], deep_text(depth), SHALLOW[1]]
    with Gate(tools, db_url) as gate:
        first = gate.run(build(texts), task_id="t", provider=provider)
        assert first.error is None
        assert first.terminal is not None and first.terminal.succeeded
        by_state = {o.state: o for o in first.outcomes}
        assert sorted(o.state.value for o in first.outcomes) == [
            "rejected",
            "succeeded",
            "succeeded",
        ]
        deep = by_state[CallState.REJECTED]
        assert "arguments_too_deep" in (deep.reason or "")
        assert runs == [{"n": 1}, {"n": 3}]
        stored = gate.ledger.get("t", deep.call_id)
        assert stored is not None and stored.state is CallState.REJECTED
        assert "[[[" not in (deep.reason or "")  # the value is never echoed

        again = gate.run(build(texts), task_id="t", provider=provider)
        assert [o.call_id for o in again.outcomes] == [o.call_id for o in first.outcomes]
        assert [o.state for o in again.outcomes] == [o.state for o in first.outcomes]
        assert all(o.replayed for o in again.outcomes)
        assert runs == [{"n": 1}, {"n": 3}]


def test_arguments_at_the_limit_still_run(
    db_url: str, counted: tuple[ToolRegistry, list[dict[str, Any]]]
) -> None:
    tools, runs = counted
    text = deep_text(MAX_ARGUMENT_DEPTH)
    with Gate(tools, db_url) as gate:
        result = gate.run(responses_events([text]), task_id="t", provider="openai-responses")
    assert [o.state for o in result.outcomes] == [CallState.SUCCEEDED]
    assert runs == [json.loads(text)]


def test_a_tool_result_too_deep_to_store_still_ends_the_call(db_url: str) -> None:
    """The side effect happened: the call must end ``succeeded``, not stay ``executing``."""
    tools = ToolRegistry()
    ran: list[int] = []

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none")
    def deep_result() -> Any:
        ran.append(1)
        value: Any = 1
        for _ in range(500):
            value = [value]
        return value

    events = responses_events(["{}"], name="deep_result")
    with Gate(tools, db_url) as gate:
        (outcome,) = gate.run(events, task_id="t", provider="openai-responses").outcomes
        assert outcome.state is CallState.SUCCEEDED and outcome.code == "result_unstorable"
        assert outcome.result["result_unstorable"]["type"] == "list"
        (again,) = gate.run(events, task_id="t", provider="openai-responses").outcomes
        assert again.replayed and again.result == outcome.result
    assert ran == [1]


def test_check_depth_names_the_limit_never_the_value() -> None:
    # Garbage another test left (an object whose __del__ warns) is collected now, not
    # under the 5,000 levels below, where formatting its warning would overflow the
    # stack and pytest would pin that on this test.
    gc.collect()
    value: Any = "secret-payload"
    for _ in range(5000):
        value = {"k": value}
    with pytest.raises(ArgumentsTooDeep) as caught:
        check_depth(value, 64)
    assert caught.value.limit == 64 and "64" in str(caught.value)
    assert "secret" not in str(caught.value) and caught.value.reason == "arguments_too_deep"
    check_depth({"a": [[1]]}, 3)
    with pytest.raises(ArgumentsTooDeep):
        check_depth({"a": [[1]]}, 2)
    # Serializing it for the ledger's hash does not recurse either.
    assert canonical_json(value).count('{"k":') == 5000
