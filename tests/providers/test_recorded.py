"""Streams recorded from the real APIs by other projects, through agent-gate.

``tests/transcripts`` was written from the documentation; the fixtures in
``tests/recorded`` were recorded by public projects (VCR cassettes, SDK snapshot
files, chunk fixtures) against the real OpenAI, Anthropic, Gemini/Vertex and
OpenAI-compatible APIs, and are kept byte-exact: ``tests/recorded/MANIFEST.toml``
names each file's repository, path and commit, its sha256, how its response body is
extracted (``tests/recorded/bodies.py``) and what the source's own test asserts,
which the calls and terminal state expected here restate.

Each body is fed through the public entry points (``provider="auto"`` detection,
the accumulator, ``Gate.run``) whole, one byte at a time and in seeded random
splits, with the line endings as recorded (several Gemini bodies use CRLF).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_gate import Gate, ToolRegistry
from agent_gate.accumulate import Accumulator, stream_calls
from agent_gate.autodetect import accumulator
from agent_gate.calls import ToolCall
from agent_gate.gate.mcp_approval import is_approval_name
from agent_gate.ledger import CallState
from agent_gate.sse import ServerSentEvent, SSEDecoder

RECORDED = Path(__file__).resolve().parents[1] / "recorded"
sys.path.append(str(RECORDED))  # for bodies (a unique name)

from bodies import body  # noqa: E402

MANIFEST: list[dict[str, Any]] = tomllib.loads((RECORDED / "MANIFEST.toml").read_text("utf-8"))[
    "fixture"
]
PROTOCOLS = ("openai-responses", "openai-chat", "anthropic", "gemini")
IDS = [Path(f["file"]).name for f in MANIFEST]
SEEDS = range(5)


def recorded_body(fixture: dict[str, Any]) -> bytes:
    return body((RECORDED / fixture["file"]).read_bytes(), fixture["extract"])


def expected_calls(fixture: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    return [
        (
            c["status"],
            c["name"],
            c["call_id"],
            json.loads(c["arguments"]) if "arguments" in c else None,
        )
        for c in fixture.get("calls", [])
    ]


def observed(calls: list[ToolCall]) -> list[tuple[str, str, str, Any]]:
    return [(c.status.value, c.name, c.call_id, c.arguments) for c in calls]


def cuts(size: int, seed: int) -> list[int]:
    """Seeded random read boundaries: some tiny reads, some large ones."""
    rng = random.Random(seed)
    count = rng.randint(1, max(1, size // 16))
    return sorted(rng.sample(range(1, size), min(count, size - 1))) if size > 1 else []


def chunked(raw: bytes, bounds: list[int]) -> Iterator[bytes]:
    edges = [0, *bounds, len(raw)]
    return (raw[start:stop] for start, stop in itertools.pairwise(edges))


def run(raw: bytes, bounds: list[int], provider: str = "auto") -> tuple[Any, list[ToolCall]]:
    acc = accumulator(provider)
    calls = list(stream_calls(chunked(raw, bounds), acc))
    return acc, calls


def check(fixture: dict[str, Any], acc: Any, calls: list[ToolCall]) -> None:
    assert acc.provider == fixture["protocol"]
    assert observed(calls) == expected_calls(fixture)
    assert str(acc.terminal) == fixture["terminal"]
    assert [a.reason for a in acc.anomalies] == fixture["anomalies"]


# -- the manifest ----------------------------------------------------------------------


def test_three_independent_sources_per_protocol() -> None:
    for protocol in PROTOCOLS:
        repos = {f["repository"] for f in MANIFEST if f["protocol"] == protocol}
        assert len(repos) >= 3, (protocol, repos)


def test_every_recorded_file_is_in_the_manifest() -> None:
    on_disk = {
        str(p.relative_to(RECORDED))
        for p in RECORDED.rglob("*")
        if p.is_file() and p.parent != RECORDED and "__pycache__" not in p.parts
    }
    assert on_disk == {f["file"] for f in MANIFEST}


@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_file_is_byte_exact_with_its_source(fixture: dict[str, Any]) -> None:
    data = (RECORDED / fixture["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == fixture["sha256"]
    assert len(fixture["commit"]) == 40 and fixture["repository"].count("/") == 1


def response_ids(fixture: dict[str, Any]) -> set[str]:
    """What names the response in each payload: one HTTP response holds one of them
    (a recording that concatenates turns of an agent loop is not one stream)."""
    names: set[str] = set()
    for event in sse_events(recorded_body(fixture)):
        if not event.data.startswith("{"):
            continue
        payload = json.loads(event.data)
        if fixture["protocol"] == "openai-responses" and payload.get("type") == "response.created":
            names.add(payload["response"]["id"])
        elif fixture["protocol"] == "anthropic" and payload.get("type") == "message_start":
            names.add(payload["message"]["id"])
        elif fixture["protocol"] == "openai-chat" and payload.get("id"):
            names.add(payload["id"])
        elif fixture["protocol"] == "gemini" and payload.get("responseId"):
            names.add(payload["responseId"])
    return names


@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_each_fixture_is_one_response(fixture: dict[str, Any]) -> None:
    assert len(response_ids(fixture)) <= 1


# -- every chunking ----------------------------------------------------------------------


@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_whole_body_gives_what_the_source_asserts(fixture: dict[str, Any]) -> None:
    raw = recorded_body(fixture)
    check(fixture, *run(raw, []))
    # Naming the protocol gives the same answer as detecting it.
    acc, calls = run(raw, [], fixture["protocol"])
    assert isinstance(acc, Accumulator)
    check(fixture, acc, calls)


@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_one_byte_at_a_time(fixture: dict[str, Any]) -> None:
    raw = recorded_body(fixture)
    check(fixture, *run(raw, list(range(1, len(raw)))))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_random_splits(fixture: dict[str, Any], seed: int) -> None:
    raw = recorded_body(fixture)
    check(fixture, *run(raw, cuts(len(raw), seed)))


# -- through the gate ----------------------------------------------------------------------


class Recorder:
    """A read tool per name the fixture calls, counting every run with its arguments."""

    def __init__(self, names: set[str]) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.tools = ToolRegistry()
        for name in sorted(names):
            self.tools.register(
                self._runner(name), name=name, schema={"type": "object"}, effect="read"
            )

    def _runner(self, name: str) -> Any:
        def tool(**arguments: Any) -> dict[str, Any]:
            self.runs.append((name, arguments))
            return {"ok": True}

        return tool


def sse_events(raw: bytes, bounds: list[int] | None = None) -> Iterator[ServerSentEvent]:
    """The body's events as a client reading it in ``bounds`` reads would see them."""
    decoder = SSEDecoder()
    for chunk in chunked(raw, bounds or []):
        yield from decoder.feed(chunk)
    decoder.end()


@pytest.mark.parametrize("fixture", MANIFEST, ids=IDS)
def test_gate_runs_each_complete_call_once(
    fixture: dict[str, Any], sqlite_url: str
) -> None:
    """``Gate.run(provider="auto")`` over the events of randomly split reads: each
    complete call runs once, with its recorded arguments, the provider-executed ones
    never reach a tool, and running the same response again runs nothing."""
    expected = expected_calls(fixture)
    answered = [c for c in expected if c[0] == "complete" and is_approval_name(c[1])]
    complete = [
        (name, args)
        for status, name, _id, args in expected
        if status == "complete" and not is_approval_name(name)
    ]
    # Declaring the approval names allows them: the gate answers them, their
    # declared function never runs (agent_gate.gate.mcp_approval).
    recorder = Recorder({name for name, _args in complete} | {c[1] for c in answered})
    raw = recorded_body(fixture)
    with Gate(recorder.tools, sqlite_url) as gate:
        result = gate.run(sse_events(raw, cuts(len(raw), 7)), task_id="recorded", provider="auto")
        replay = gate.run(sse_events(raw), task_id="recorded", provider="auto")
    assert result.provider == fixture["protocol"]
    assert str(result.terminal) == fixture["terminal"]
    assert Counter(json.dumps(r, sort_keys=True) for r in recorder.runs) == Counter(
        json.dumps(c, sort_keys=True) for c in complete
    )
    ran = {o.call_id for o in result.outcomes if o.state is CallState.SUCCEEDED}
    assert ran == {cid for status, _n, cid, _a in expected if status == "complete"}
    # Each approval request is answered in the next turn, approved, by its id.
    responses = [
        item for item in result.next_input(fixture["protocol"])
        if item.get("type") == "mcp_approval_response"
    ]
    assert responses == [
        {"type": "mcp_approval_response", "approval_request_id": cid, "approve": True}
        for _s, _n, cid, _a in answered
    ]
    assert not any(o.state is CallState.SUCCEEDED and not o.replayed for o in replay.outcomes)
    assert len(recorder.runs) == len(complete)  # the replay ran nothing


# -- xAI: the searches of a hosted tool come as custom tool calls ----------------------------

XAI = next(f for f in MANIFEST if f["file"].endswith("xai-x-search-tool.chunks.txt"))


def test_xai_search_calls_never_reach_a_client_tool_of_the_same_name(tmp_path: Path) -> None:
    """xAI's x_search reports its searches as ``custom_tool_call`` items, which it runs
    itself; a client that happens to have tools of those names must not run them."""
    recorder = Recorder({"x_keyword_search", "view_x_video"})
    with Gate(recorder.tools, f"sqlite:///{tmp_path / 'ledger.db'}", create=True) as gate:
        result = gate.run(sse_events(recorded_body(XAI)), task_id="xai", provider="auto")
    assert str(result.terminal) == "completed"
    assert recorder.runs == []
    assert not result.outcomes


def responses_stream(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A Responses stream whose one item is a ``custom_tool_call`` named run_sql."""
    response: dict[str, Any] = {"id": "resp_1", "status": "in_progress", "output": []}
    if tools is not None:
        response["tools"] = tools
    item = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "run_sql"}
    return [
        {"type": "response.created", "response": response, "sequence_number": 0},
        {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
         "item": {**item, "input": "", "status": "in_progress"}},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "sequence_number": 2,
         "item_id": "ctc_1", "delta": "SELECT 1"},
        {"type": "response.custom_tool_call_input.done", "output_index": 0, "sequence_number": 3,
         "item_id": "ctc_1", "input": "SELECT 1"},
        {"type": "response.output_item.done", "output_index": 0, "sequence_number": 4,
         "item": {**item, "input": "SELECT 1", "status": "completed"}},
        {"type": "response.completed", "response": {**response, "status": "completed"},
         "sequence_number": 5},
    ]


@pytest.mark.parametrize(
    ("tools", "status"),
    [
        # Given hosted tools only: the custom call is one of them at work.
        ([{"type": "x_search"}], "provider_executed"),
        ([{"type": "web_search"}, {"type": "function", "name": "run_sql"}], "provider_executed"),
        # Declared as a custom tool: the client's, hosted tools beside it or not.
        ([{"type": "web_search"}, {"type": "custom", "name": "run_sql"}], "complete"),
        ([{"type": "custom", "name": "run_sql"}], "complete"),
        # No hosted tool, or no list at all: nothing says it is not the client's.
        ([{"type": "function", "name": "get_weather"}], "complete"),
        ([], "complete"),
        (None, "complete"),
    ],
)
def test_a_custom_call_is_the_clients_unless_a_hosted_tool_made_it(
    tools: list[dict[str, Any]] | None, status: str
) -> None:
    acc = Accumulator("openai-responses")
    calls = [call for event in responses_stream(tools) for call in acc.feed(event)]
    calls += acc.close()
    assert [(c.call_id, c.name, c.status.value) for c in calls] == [("call_1", "run_sql", status)]
    assert str(acc.terminal) == "completed"
    assert acc.anomalies == ()
    if status == "complete":
        assert calls[0].raw_arguments == "SELECT 1"
