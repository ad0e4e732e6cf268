"""The turn the agent sends back, from streams recorded from the real APIs.

``RunResult.next_input(protocol)`` over every recorded fixture (``tests/recorded``)
that ended ``completed``, compared with what each provider's documentation says
must go back, rebuilt here independently from the recorded events:

* Anthropic (extended thinking with tool use): the assistant's content blocks
  exactly as streamed, thinking blocks with their full ``signature`` unmodified,
  ``tool_use`` with its input as an object, a text block's ``citations`` as the
  ``citations_delta`` events gave them; then one ``tool_result`` per ``tool_use``;
* Gemini (thought signatures): every part, each ``thoughtSignature`` in the part
  it came in (a signed ``functionCall`` keeps its signature; signed and unsigned
  parts are never merged); ``functionResponse`` parts name only ids the wire gave;
* OpenAI Responses (reasoning items with function calls): the output items as
  ``response.completed`` lists them, reasoning items included, then one output
  per client call (an ``mcp_approval_response`` per approval request);
* Chat Completions: one assistant message with each call's id and argument text as
  streamed; DeepSeek's ``reasoning_content`` on it when it carries tool calls.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_gate import Gate, ToolRegistry
from agent_gate.gate.mcp_approval import is_approval_name
from agent_gate.sse import ServerSentEvent, SSEDecoder

RECORDED = Path(__file__).resolve().parents[1] / "recorded"
sys.path.append(str(RECORDED))  # for bodies (a unique name)

from bodies import body  # noqa: E402

MANIFEST: list[dict[str, Any]] = tomllib.loads((RECORDED / "MANIFEST.toml").read_text("utf-8"))[
    "fixture"
]


def completed(protocol: str) -> list[dict[str, Any]]:
    return [f for f in MANIFEST if f["protocol"] == protocol and f["terminal"] == "completed"]


def named(name: str) -> dict[str, Any]:
    return next(f for f in MANIFEST if Path(f["file"]).name == name)


def ids(fixtures: list[dict[str, Any]]) -> list[str]:
    return [Path(f["file"]).name for f in fixtures]


def each_completed(protocol: str) -> pytest.MarkDecorator:
    """Parametrize ``fixture`` over the protocol's recordings that ended completed."""
    return pytest.mark.parametrize("fixture", completed(protocol), ids=ids(completed(protocol)))


def events(fixture: dict[str, Any]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    out = list(decoder.feed(body((RECORDED / fixture["file"]).read_bytes(), fixture["extract"])))
    decoder.end()
    return out


def payloads(fixture: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for event in events(fixture):
        if event.data.startswith("{"):
            yield json.loads(event.data)


def client_calls(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in fixture.get("calls", []) if c["status"] == "complete"]


def run(fixture: dict[str, Any], sqlite_url: str) -> Any:
    """``Gate.run`` with a read tool (answering ``{"ok": true}``) per client call."""
    tools = ToolRegistry()
    for name in sorted({c["name"] for c in client_calls(fixture)}):
        tools.register(lambda **_: {"ok": True}, name=name, schema={"type": "object"},
                       effect="read")
    with Gate(tools, sqlite_url) as gate:
        return gate.run(events(fixture), task_id="turn", provider="auto")


# -- Anthropic -----------------------------------------------------------------------


def anthropic_blocks(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """The message's content blocks, folded from the recorded events as Anthropic's
    streaming docs describe them (the API refuses empty text blocks back)."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for data in payloads(fixture):
        if data.get("type") == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif data.get("type") == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            kind = delta["type"]
            if kind == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif kind == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif kind == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            elif kind == "citations_delta":
                block["citations"] = [*block.get("citations", []), delta["citation"]]
            elif kind == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        if text:
            blocks[index]["input"] = json.loads(text)
    return [
        b for _i, b in sorted(blocks.items()) if not (b["type"] == "text" and not b.get("text"))
    ]


@each_completed("anthropic")
def test_anthropic_turn_is_the_message_as_streamed(
    fixture: dict[str, Any], sqlite_url: str
) -> None:
    result = run(fixture, sqlite_url)
    turn = result.next_input("anthropic")
    blocks = anthropic_blocks(fixture)
    assert turn[0] == {"role": "assistant", "content": blocks}
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert uses == [c["call_id"] for c in client_calls(fixture)]
    if uses:
        assert turn[1]["role"] == "user"
        assert [(r["type"], r["tool_use_id"], r["is_error"]) for r in turn[1]["content"]] == [
            ("tool_result", use, False) for use in uses
        ]
    else:
        assert len(turn) == 1


def test_anthropic_thinking_goes_back_first_with_its_whole_signature(sqlite_url: str) -> None:
    fixture = named("pydantic-ai--test_anthropic_code_execution_tool_stream.yaml")
    signature = "".join(
        d["delta"]["signature"] for d in payloads(fixture)
        if d.get("type") == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    )
    assert len(signature) > 100
    first = run(fixture, sqlite_url).next_input("anthropic")[0]["content"][0]
    assert first["type"] == "thinking" and first["signature"] == signature
    assert first["thinking"] == "Let me calculate this mathematical expression."


def test_anthropic_citations_stay_with_their_text_block(sqlite_url: str) -> None:
    fixture = named("vercel-ai--anthropic-web-search-tool.1.chunks.txt")
    cited = [
        d["delta"]["citation"] for d in payloads(fixture)
        if d.get("type") == "content_block_delta" and d["delta"]["type"] == "citations_delta"
    ]
    content = run(fixture, sqlite_url).next_input("anthropic")[0]["content"]
    kept = [c for block in content for c in block.get("citations", [])]
    assert kept == cited and len(cited) == 14
    first = next(b for b in content if b.get("citations"))
    assert first["text"].startswith("Apple today announced the grand reopening of Apple Ginza")
    assert [c["type"] for c in first["citations"]] == ["web_search_result_location"] * 3
    assert all(c["url"].startswith("https://") for c in first["citations"])


# -- Gemini --------------------------------------------------------------------------


def gemini_parts(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for data in payloads(fixture)
        for candidate in data.get("candidates", [])[:1]
        for part in (candidate.get("content") or {}).get("parts", [])
    ]


def signed(parts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each thought signature, with what kind of part carries it."""
    return [
        ("functionCall" if "functionCall" in p else "thought" if p.get("thought") else "text",
         p["thoughtSignature"])
        for p in parts
        if p.get("thoughtSignature")
    ]


def text_of(parts: list[dict[str, Any]], thought: bool) -> str:
    return "".join(
        p.get("text", "") for p in parts if "text" in p and bool(p.get("thought")) is thought
    )


@each_completed("gemini")
def test_gemini_turn_keeps_each_signature_in_its_part(
    fixture: dict[str, Any], sqlite_url: str
) -> None:
    result = run(fixture, sqlite_url)
    turn = result.next_input("gemini")
    wire = gemini_parts(fixture)
    model = turn[0]
    assert model["role"] == "model"
    assert signed(model["parts"]) == signed(wire)
    assert text_of(model["parts"], thought=False) == text_of(wire, thought=False)
    assert text_of(model["parts"], thought=True) == text_of(wire, thought=True)
    sent = [p["functionCall"] for p in model["parts"] if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in sent] == [
        (c["name"], json.loads(c["arguments"])) for c in client_calls(fixture)
    ]
    # No id the wire did not give, in the turn or in the results.
    wire_ids = {p["functionCall"]["id"] for p in wire if p.get("functionCall", {}).get("id")}
    responses = [p["functionResponse"] for p in turn[1]["parts"]] if sent else []
    assert {r["id"] for r in responses if "id" in r} <= wire_ids
    assert {c["id"] for c in sent if "id" in c} <= wire_ids
    assert [r["name"] for r in responses] == [c["name"] for c in sent]
    assert [r["functionResponse"] for r in result.tool_results("gemini")] == responses


# -- OpenAI Responses ------------------------------------------------------------------


def done_items(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """Each output item as its ``response.output_item.done`` gave it, in output order."""
    done = {
        d["output_index"]: d["item"]
        for d in payloads(fixture)
        if d.get("type") == "response.output_item.done"
    }
    return [item for _i, item in sorted(done.items())]


def final_output(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    return next(
        d["response"]["output"] for d in payloads(fixture) if d.get("type") == "response.completed"
    )


@each_completed("openai-responses")
def test_responses_turn_is_the_final_output_then_one_answer_per_call(
    fixture: dict[str, Any], sqlite_url: str
) -> None:
    result = run(fixture, sqlite_url)
    items = result.next_input("openai-responses")
    calls = client_calls(fixture)
    turn = items[: len(items) - len(calls)]
    assert turn == done_items(fixture)
    # The same items response.completed lists (whose encrypted_content may be
    # encrypted afresh: either copy decrypts).
    assert [(i["type"], i.get("id")) for i in turn] == [
        (i["type"], i.get("id")) for i in final_output(fixture)
    ]
    answers = items[len(items) - len(calls):]
    expected = [
        {"type": "mcp_approval_response", "approval_request_id": c["call_id"], "approve": True}
        if is_approval_name(c["name"])
        else {"type": "function_call_output", "call_id": c["call_id"], "output": '{"ok": true}'}
        for c in calls
    ]
    assert answers == expected


def test_responses_reasoning_goes_back_with_its_encrypted_content(sqlite_url: str) -> None:
    fixture = named("vercel-ai--programmatic-tool-calling.1.chunks.txt")
    items = run(fixture, sqlite_url).next_input("openai-responses")
    reasoning = [i for i in items if i["type"] == "reasoning"]
    assert reasoning and all(i.get("encrypted_content") for i in reasoning)
    assert items.index(reasoning[0]) < next(
        n for n, i in enumerate(items) if i["type"] == "function_call"
    )


def test_an_mcp_approval_request_is_answered_after_the_request_item(sqlite_url: str) -> None:
    fixture = named("vercel-ai--openai-mcp-tool-approval.1.chunks.txt")
    items = run(fixture, sqlite_url).next_input("openai-responses")
    assert [i["type"] for i in items] == [
        "mcp_list_tools", "reasoning", "mcp_approval_request", "mcp_approval_response",
    ]
    request, response = items[2], items[3]
    assert (request["server_label"], request["name"]) == ("zip1", "create_short_url")
    assert response == {"type": "mcp_approval_response", "approval_request_id": request["id"],
                        "approve": True}


# -- Chat Completions ------------------------------------------------------------------


def chat_message(fixture: dict[str, Any]) -> tuple[str, str | None, dict[int, dict[str, str]]]:
    """Text, reasoning_content (None when never sent) and calls by index, as streamed."""
    text, reasoning = "", None
    calls: dict[int, dict[str, str]] = {}
    for data in payloads(fixture):
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            if isinstance(delta.get("reasoning_content"), str):
                reasoning = (reasoning or "") + delta["reasoning_content"]
            for position, fragment in enumerate(delta.get("tool_calls") or []):
                call = calls.setdefault(fragment.get("index", position),
                                        {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or fragment.get("id") or ""
                function = fragment.get("function") or {}
                call["name"] = call["name"] or function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
    return text, reasoning, calls


@each_completed("openai-chat")
def test_chat_turn_is_one_message_as_streamed(
    fixture: dict[str, Any], sqlite_url: str
) -> None:
    result = run(fixture, sqlite_url)
    message, *tools = result.next_input("openai-chat")
    text, reasoning, calls = chat_message(fixture)
    assert message["role"] == "assistant" and message["content"] == (text or None)
    sent = [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}}
        for _i, c in sorted(calls.items())
    ]
    assert message.get("tool_calls", []) == sent
    assert message.get("reasoning_content") == (reasoning if sent else None)
    assert [t["tool_call_id"] for t in tools] == [c["id"] for c in sent]


def test_deepseek_reasoning_goes_back_with_the_tool_calls(sqlite_url: str) -> None:
    fixture = named("vercel-ai--deepseek-tool-call.chunks.txt")
    message = run(fixture, sqlite_url).next_input("openai-chat")[0]
    assert message["reasoning_content"].startswith("The user is asking for the weather")
    assert message["tool_calls"][0]["id"] == "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF"


# -- beside the recordings: the edges of the same rules ----------------------------------


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> ServerSentEvent:
    data = {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return ServerSentEvent(data=json.dumps(data), event="message", id=None)


def gate_run(stream: list[Any], provider: str, sqlite_url: str) -> Any:
    tools = ToolRegistry()
    tools.register(lambda **_: {"ok": True}, name="weather", schema={"type": "object"},
                   effect="read")
    with Gate(tools, sqlite_url) as gate:
        return gate.run(stream, task_id="edge", provider=provider)


def test_an_empty_reasoning_content_still_goes_back_with_tool_calls(sqlite_url: str) -> None:
    """DeepSeek answers 400 to a tool-call turn without its reasoning_content, even
    when the model thought nothing (the field was streamed, empty)."""
    stream = [
        chat_chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        chat_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "weather", "arguments": "{}"}}]}),
        chat_chunk({}, "tool_calls"),
        ServerSentEvent(data="[DONE]", event="message", id=None),
    ]
    message = gate_run(stream, "openai-chat", sqlite_url).next_input("openai-chat")[0]
    assert message["reasoning_content"] == ""
    assert [c["id"] for c in message["tool_calls"]] == ["call_1"]


def test_reasoning_content_of_a_turn_without_calls_is_left_out(sqlite_url: str) -> None:
    """deepseek-reasoner refused reasoning_content in the input (400); newer models
    ignore it on a turn without tool calls: it is not sent, and never shown."""
    shown: list[str] = []
    stream = [
        chat_chunk({"role": "assistant", "reasoning_content": "9.11 < 9.8"}),
        chat_chunk({"content": "9.8 is greater."}, "stop"),
        ServerSentEvent(data="[DONE]", event="message", id=None),
    ]
    tools = ToolRegistry()
    with Gate(tools, sqlite_url) as gate:
        result = gate.run(stream, task_id="t", provider="openai-chat", on_text=shown.append)
    assert result.next_input("openai-chat") == [
        {"role": "assistant", "content": "9.8 is greater."}
    ]
    assert shown == ["9.8 is greater."]


def gemini_chunk(part: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "r1"}


def test_a_gemini_id_the_wire_gave_goes_back_in_both_forms(sqlite_url: str) -> None:
    stream = [
        gemini_chunk({"functionCall": {"id": "fc-7", "name": "weather", "args": {}}}),
        gemini_chunk({"functionCall": {"name": "weather", "args": {"city": "Porto"}}},
                     finish="STOP"),
    ]
    result = gate_run(stream, "gemini", sqlite_url)
    responses = [p["functionResponse"] for p in result.next_input("gemini")[1]["parts"]]
    assert [r.get("id") for r in responses] == ["fc-7", None]
    assert [r["functionResponse"] for r in result.tool_results("gemini")] == responses
    # The other protocols' results are unchanged: every call keeps its id.
    assert [r["call_id"] for r in result.tool_results("openai-responses")] == [
        o.call_id for o in result.outcomes
    ]


def test_a_citation_that_is_not_an_object_is_noted_and_the_stream_goes_on() -> None:
    from agent_gate.accumulate import Accumulator

    acc = Accumulator("anthropic")
    stream = [
        {"type": "message_start", "message": {"id": "m1", "content": []}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": "", "citations": []}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "citations_delta", "citation": "nope"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "Cited."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    ]
    for event in stream:
        acc.feed(event)
    acc.close()
    assert str(acc.terminal) == "completed"
    assert [a.reason for a in acc.anomalies] == ["malformed_citation"]
    assert acc.turn is not None
    assert [dict(e.part) for e in acc.turn.entries] == [
        {"type": "text", "text": "Cited.", "citations": []}
    ]


# -- the README names every end a recorded stream came to -------------------------------


def readme_ends() -> str:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    start = text.index("## How a response ends")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start: end if end != -1 else len(text)].split())


def test_the_readme_documents_every_terminal_a_recorded_stream_ends_in() -> None:
    from agent_gate.calls import TerminalKind

    section = readme_ends()
    for kind in TerminalKind:
        assert f"| `{kind.value}" in section, kind
    for terminal in {f["terminal"] for f in MANIFEST}:
        assert f"`{terminal}`" in section or terminal in {k.value for k in TerminalKind}, terminal
    anomalies = {a for f in MANIFEST for a in f["anomalies"]}
    for anomaly in anomalies | {"error_after_finish_reason"}:
        assert f"`{anomaly}`" in section, anomaly
    assert "`provider: detected anthropic`" in section
    assert "is the provider the right one?" in section


def test_citations_count_against_the_turn_bound() -> None:
    """Each appended citation is kept characters: past ``max_turn_chars`` the turn is
    dropped whole, never cut, and the response still completes."""
    from agent_gate.accumulate import Accumulator

    fixture = named("vercel-ai--anthropic-web-search-tool.1.chunks.txt")
    text_only = sum(
        len(d["delta"].get("text", "")) + len(d["delta"].get("partial_json", ""))
        for d in payloads(fixture) if d.get("type") == "content_block_delta"
    )
    blocks = sum(
        len(json.dumps(d["content_block"])) for d in payloads(fixture)
        if d.get("type") == "content_block_start"
    )
    # Room for every block and text fragment, not for the citations as well.
    acc = Accumulator("anthropic", max_turn_chars=blocks + text_only + 100)
    for event in events(fixture):
        acc.feed(event)
    acc.close()
    assert str(acc.terminal) == "completed"
    assert acc.turn is not None and acc.turn.dropped == "max_turn_chars"
