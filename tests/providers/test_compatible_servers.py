"""Chat Completions from OpenAI-compatible servers, through the gate.

Ollama, vLLM and LiteLLM bridges send every parallel call at tool-call index 0,
each with its own id; Mistral and Gemini's compatibility layer send fragments
without any index; OpenRouter sends an error chunk after ``finish_reason:
length``. The recorded shapes live in ``tests/transcripts/openai_chat``; here
they run through ``Gate.run`` with tools that count what really ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.schemas import EMAIL_ANY_TO, FILE_WRITE, WEATHER

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import Accumulator
from agent_gate.calls import TerminalKind
from agent_gate.providers import (
    StreamAnomaly,
    ToolCallArgumentsDelta,
    ToolCallArgumentsDone,
    ToolCallStarted,
    adapter_for,
)
from agent_gate.sse import ServerSentEvent, SSEDecoder

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts" / "openai_chat"

class Recording:
    """Tools that record every run with its arguments: what happened outside the ledger."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.tools = ToolRegistry()
        self.tools.register(self.get_weather, schema=WEATHER, effect="read")
        self.tools.register(self.send_email, schema=EMAIL_ANY_TO, effect="write")
        self.tools.register(self.file_write, schema=FILE_WRITE, effect="write")

    def get_weather(self, city: str, unit: str = "celsius") -> dict[str, Any]:
        self.runs.append(("get_weather", {"city": city, "unit": unit}))
        return {"city": city, "temperature": 21}

    def send_email(self, to: str, subject: str, body: str) -> dict[str, Any]:
        self.runs.append(("send_email", {"to": to, "subject": subject, "body": body}))
        return {"queued": True}

    def file_write(self, path: str, content: str) -> dict[str, Any]:
        self.runs.append(("file_write", {"path": path, "content": content}))
        return {"written": len(content)}


@pytest.fixture
def counting() -> Recording:
    return Recording()


@pytest.fixture
def gate(db_url: str, counting: Recording) -> Iterator[Gate]:
    with Gate(counting.tools, db_url) as gate:
        yield gate


def events(name: str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    out = decoder.feed((TRANSCRIPTS / f"{name}.sse").read_bytes())
    decoder.end()
    return out


def states(result: Any) -> list[tuple[str, str, CallState, str | None]]:
    return [(o.call_id, o.tool, o.state, o.code) for o in result.outcomes]


# -- runs: each call once, with its own arguments; a replay runs nothing ------------------


@pytest.mark.parametrize(
    ("transcript", "expected"),
    [
        (  # Ollama: two parallel calls, both at index 0
            "index_reuse",
            [
                ("call_ReuseA", "get_weather", {"city": "Lyon", "unit": "celsius"}),
                ("call_ReuseB", "send_email", {"to": "a@example.com", "subject": "s", "body": "b"}),
            ],
        ),
        (  # Ollama: three writes at index 0, the third repeating the first's arguments
            "index_reuse_three_calls",
            [
                ("call_aa11bb22", "file_write", {"path": "a.txt", "content": "1"}),
                ("call_cc33dd44", "file_write", {"path": "b.txt", "content": "2"}),
                ("call_ee55ff66", "file_write", {"path": "a.txt", "content": "1"}),
            ],
        ),
        (  # Mistral: whole calls without index, two in one chunk
            "no_index_whole_calls",
            [
                ("D681PevKs", "get_weather", {"city": "Lyon", "unit": "celsius"}),
                (
                    "A2Yq9rTbN",
                    "send_email",
                    {"to": "ops@example.com", "subject": "Météo", "body": "voir Lyon"},
                ),
            ],
        ),
        (  # fragments without index, joined by id or else by position
            "no_index_fragments",
            [
                ("Wq7Lk2PzR", "get_weather", {"city": "Oslo", "unit": "celsius"}),
                (
                    "Bn4Xc8VmT",
                    "send_email",
                    {"to": "ops@example.com", "subject": "Oslo", "body": "ok"},
                ),
            ],
        ),
    ],
)
def test_every_call_of_a_compatible_server_runs_once_with_its_own_arguments(
    gate: Gate,
    counting: Recording,
    transcript: str,
    expected: list[tuple[str, str, dict[str, Any]]],
) -> None:
    first = gate.run(events(transcript), task_id="t", provider="openai-chat")
    assert first.terminal is not None and first.terminal.kind is TerminalKind.COMPLETED
    assert states(first) == [(cid, tool, CallState.SUCCEEDED, None) for cid, tool, _ in expected]
    assert counting.runs == [(tool, args) for _, tool, args in expected]

    again = gate.run(events(transcript), task_id="t", provider="openai-chat")
    assert [(o.call_id, o.replayed) for o in again.outcomes] == [
        (cid, True) for cid, _, _ in expected
    ]
    assert len(counting.runs) == len(expected)


# -- nothing runs when the stream cannot vouch for a call ----------------------------------


def test_an_index_taken_while_its_call_is_open_runs_neither_call(
    gate: Gate, counting: Recording
) -> None:
    result = gate.run(events("index_reuse_open_call"), task_id="t", provider="openai-chat")
    assert states(result) == [
        ("call_k3v9q2wd", "file_write", CallState.REJECTED, "stream_rejected"),
        ("call_p8x1m4ze", "file_write", CallState.REJECTED, "stream_rejected"),
    ]
    assert counting.runs == []


def test_an_error_after_finish_reason_length_ends_incomplete_length(
    gate: Gate, counting: Recording
) -> None:
    result = gate.run(events("error_after_length"), task_id="t", provider="openai-chat")
    assert str(result.terminal) == "incomplete:length"
    assert states(result) == [
        ("call_or7Len", "send_email", CallState.INCOMPLETE, "arguments_incomplete")
    ]
    assert [a.reason for a in result.anomalies] == ["error_after_finish_reason"]
    task = gate.ledger.task("t")
    assert task is not None and (task.terminal, task.terminal_reason) == ("incomplete", "length")
    assert counting.runs == []


def test_an_error_after_finish_reason_tool_calls_fails_and_runs_nothing(
    gate: Gate, counting: Recording
) -> None:
    result = gate.run(events("error_after_tool_calls"), task_id="t", provider="openai-chat")
    assert result.terminal is not None and result.terminal.kind is TerminalKind.FAILED
    assert states(result) == [
        ("call_or8Err", "send_email", CallState.INCOMPLETE, "response_not_completed")
    ]
    assert counting.runs == []


def test_eof_without_finish_reason_or_done_runs_nothing(gate: Gate, counting: Recording) -> None:
    result = gate.run(events("eof_without_finish_or_done"), task_id="t", provider="openai-chat")
    assert result.terminal is not None and result.terminal.kind is TerminalKind.TRUNCATED
    assert [(o.call_id, o.state) for o in result.outcomes] == [
        ("call_ff01aa02", CallState.INCOMPLETE),
        ("call_ff03aa04", CallState.INCOMPLETE),
    ]
    assert counting.runs == []


# -- the correlation rules at the adapter's boundary --------------------------------------


def chunk(*fragments: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    delta = {"tool_calls": list(fragments)} if fragments else {}
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def frag(arguments: str, call_id: str | None = None, name: str | None = None, **extra: Any) -> Any:
    out: dict[str, Any] = {**extra, "function": {"arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
    if name is not None:
        out["function"]["name"] = name
    return out


class Driver:
    def __init__(self) -> None:
        self.adapter = adapter_for("openai-chat")
        self.count = 0

    def __call__(self, data: dict[str, Any]) -> list[Any]:
        out = self.adapter.translate(self.adapter.decode(data, self.count), self.count)
        self.count += 1
        return out


def test_a_fragment_without_index_follows_its_id_wherever_it_sits() -> None:
    drive = Driver()
    drive(chunk(frag("", "a", "f"), frag("", "b", "g")))
    # "b" now sits at position 0: its id, not its position, decides.
    assert drive(chunk(frag('{"x":1}', "b"), frag("{}", "a"))) == [
        ToolCallArgumentsDelta("b", '{"x":1}'),
        ToolCallArgumentsDelta("a", "{}"),
    ]
    assert drive(chunk(finish="tool_calls")) == [
        ToolCallArgumentsDone("a"),
        ToolCallArgumentsDone("b"),
    ]


def test_a_null_index_is_the_same_as_none() -> None:
    drive = Driver()
    assert drive(chunk(frag("{}", "a", "f", index=None))) == [
        ToolCallStarted("a", "f", 0),
        ToolCallArgumentsDelta("a", "{}"),
    ]


def test_an_id_coming_back_to_an_index_another_call_took_is_an_anomaly() -> None:
    drive = Driver()
    drive(chunk(frag("{}", "a", "f", index=0)))
    drive(chunk(frag("{}", "b", "f", index=0)))  # a is whole: b is a new call
    out = drive(chunk(frag("{}", "a", "f", index=0)))
    assert StreamAnomaly("index_reused", ("b", "a")) in out


def test_a_reused_index_whose_call_holds_only_concatenated_json_is_an_anomaly() -> None:
    acc = Accumulator("openai-chat")
    calls = [
        *acc.feed(chunk(frag('{"a":1}{"b":2}', "a", "f", index=0))),
        *acc.feed(chunk(frag("{}", "b", "f", index=0))),
        *acc.feed(chunk(finish="tool_calls")),
        *acc.close(),
    ]
    assert [(c.call_id, c.status.value, c.reason) for c in calls] == [
        ("a", "rejected", "index_reused"),
        ("b", "rejected", "index_reused"),
    ]
