"""``agent_gate.gate.live``: where the transport stops, when calls run, the async path.

Every recorded transcript of every protocol is served over loopback and must
end exactly where its recorded expectation says: the transport's terminal
predicate is the provider adapter's own verdict, so a finished answer is never
re-subscribed and an unfinished one is never taken for finished.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from agent_gate import CallState, Gate
from agent_gate.errors import (
    StreamHTTPStatusError,
    StreamTruncatedError,
    TruncationReason,
)
from agent_gate.gate.live import LiveOptions, LiveProgress, TerminalDetector, arun_live, run_live
from agent_gate.sse import SSEDecoder
from agent_gate.stream_server import Fault, FaultRule, StreamServer, Transcript
from agent_gate.transport import (
    ReconnectPolicy,
    StreamOptions,
)

from .conftest import FAST, TRANSCRIPTS, Case, TestPolicy, allowed, cases

RECORDED = sorted(TRANSCRIPTS.glob("*/*.sse"))
PROVIDERS = {
    "openai_responses": "openai-responses",
    "openai_chat": "openai-chat",
    "anthropic": "anthropic",
    "gemini": "gemini",
}


def expected_terminal(path: Path) -> str:
    lines = path.with_suffix(".expected.jsonl").read_text(encoding="utf-8").splitlines()
    return str(json.loads(lines[-1])["terminal"])


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_recorded_stream_ends_where_its_protocol_says(
    path: Path, gate: Gate, client: httpx.Client
) -> None:
    provider = PROVIDERS[path.parent.name]
    terminal = expected_terminal(path)
    transcript = Transcript.from_file(path)
    reconnect = ReconnectPolicy(initial_delay=0.001, max_delay=0.01, max_attempts=2)
    with StreamServer({"s": transcript}, join_timeout=2.0) as server:
        result = run_live(
            gate,
            server.stream_url("s"),
            provider=provider,
            task_id="t",
            client=client,
            reconnect=reconnect,
        )
        requests = server.requests
    assert str(result.terminal) == terminal
    if terminal == "truncated":
        # The server ended cleanly before any terminal: the client re-subscribed
        # within its bound, got nothing new, and reported the stream truncated.
        assert isinstance(result.stream_error, StreamTruncatedError)
        assert result.stream_error.reason is TruncationReason.ATTEMPTS_EXHAUSTED
        assert len(requests) == 1 + reconnect.max_attempts
    else:
        assert result.stream_error is None
        assert len(requests) == 1, "a finished answer is never re-subscribed"
        assert result.stats.state == "completed"


def test_the_detector_agrees_with_the_accumulator_event_by_event() -> None:
    """Gemini names no terminal event type; Chat ends at [DONE] or finish_reason."""
    for path in RECORDED:
        provider = PROVIDERS[path.parent.name]
        decoder = SSEDecoder()
        events = decoder.feed(path.read_bytes())
        detector = TerminalDetector(provider)
        verdicts = [detector(e) for e in events]
        if expected_terminal(path) == "truncated":
            assert not any(verdicts), path
        else:
            assert True in verdicts, path
            # Terminal from the first terminal event on; the transport stops there.
            first = verdicts.index(True)
            assert all(verdicts[first:]), path


def test_a_read_runs_mid_stream_and_a_write_waits_for_the_response(
    gate: Gate, client: httpx.Client
) -> None:
    case = next(c for c in cases() if c.name == "openai_responses/parallel_calls")
    seen: list[tuple[int, dict[str, CallState]]] = []

    def on_event(p: LiveProgress) -> None:
        seen.append((p.stream.events, {o.call_id: o.state for o in gate.calls("t")}))

    with StreamServer({"s": case.transcript}, join_timeout=2.0) as server:
        result = run_live(
            gate,
            server.stream_url("s"),
            provider=case.provider,
            task_id="t",
            client=client,
            on_event=on_event,
        )
    assert str(result.terminal) == "completed"
    weather, email = list(case.complete)
    assert [tool for tool, _ in case.complete.values()] == ["get_weather", "send_email"]
    ran_weather = next(i for i, states in seen if states.get(weather) is CallState.SUCCEEDED)
    recorded_email = next(i for i, states in seen if email in states)
    done = next(
        i
        for i, e in enumerate(case.transcript.events)
        if e.event == "response.output_item.done" and weather in e.data
    )
    # The read ran right after its own completion signal; the write was not even
    # recorded before the response's final event.
    assert ran_weather == done + 1 < recorded_email == len(case.transcript)
    assert seen[-1][1] == {weather: CallState.SUCCEEDED, email: CallState.SUCCEEDED}


@pytest.mark.parametrize("case", [c for c in cases() if c.sparse], ids=lambda c: c.id)
def test_the_async_path_resumes_and_runs_each_call_once(
    case: Case, gate: Gate, e2e_tools: ModuleType, effects: Path
) -> None:
    # Cut inside an event whose predecessor inherited its id: the resume resends it.
    events = case.transcript.events
    cut = next(k for k in range(len(events) // 2, len(events)) if events[k - 1].id is None)
    rules = [
        FaultRule(Fault(chunk_min=1, chunk_max=9, seed=2, cut_inside_event=cut)),
        FaultRule(Fault(chunk_min=1, chunk_max=9, seed=4), times=None),
    ]

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as aclient:
            first = await arun_live(
                gate, url, provider=case.provider, task_id="a", client=aclient, reconnect=FAST
            )
            assert first.stream_error is None and str(first.terminal) == "completed"
            assert len(first.reconnects) == 1 and first.calls.replayed_events > 0
            again = await arun_live(gate, url, provider=case.provider, task_id="a")
            assert all(o.replayed for o in again.outcomes)

    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        asyncio.run(asyncio.wait_for(main(server.stream_url("s")), timeout=30))
    assert dict(e2e_tools.executions(effects, "a")) == {c: 1 for c in allowed(case)}


def test_the_async_path_reports_a_refusal(gate: Gate, effects: Path) -> None:
    case = cases()[0]
    rules = [FaultRule(Fault(status=500), times=None)]

    async def main(url: str) -> None:
        result = await arun_live(gate, url, provider=case.provider, task_id="r")
        assert isinstance(result.stream_error, StreamHTTPStatusError)
        assert result.stream_error.status == 500
        assert result.outcomes == () and str(result.terminal) == "truncated"

    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        asyncio.run(asyncio.wait_for(main(server.stream_url("s")), timeout=30))
    assert not effects.exists()


def test_the_gates_policy_decides_live_calls(
    e2e_tools: ModuleType, effects: Path, db_url: str, client: httpx.Client
) -> None:
    """The demo stream under TestPolicy: one allowed read and write run, one call
    waits for approval, one is denied; the ledger says so and the file agrees."""
    case = next(c for c in cases() if c.name.startswith("demo/"))
    with (
        StreamServer({"s": case.transcript}, join_timeout=2.0) as server,
        Gate(e2e_tools.tools, db_url, policy=TestPolicy()) as gate,
    ):
        run_live(gate, server.stream_url("s"), provider=case.provider, task_id="p", client=client)
        states = {o.call_id: o.state for o in gate.calls("p")}
    assert states == {
        "call_weather": CallState.SUCCEEDED,
        "call_mail_team": CallState.SUCCEEDED,
        "call_mail_partner": CallState.AWAITING_APPROVAL,
        "call_cleanup": CallState.REJECTED,
    }
    assert dict(e2e_tools.executions(effects, "p")) == {"call_weather": 1, "call_mail_team": 1}


def test_one_options_object_serves_both_paths_and_keywords_override_it(
    gate: Gate, client: httpx.Client
) -> None:
    case = next(c for c in cases() if c.sparse)
    seen: list[int] = []
    options = LiveOptions(reconnect=FAST, on_event=lambda p: seen.append(p.stream.events))
    rules = [FaultRule(Fault(cut_after_events=2), times=1)]

    async def main(url: str) -> None:
        # A plain StreamOptions is widened; the keyword sets a field over it.
        again = await arun_live(
            gate, url, provider=case.provider, task_id="b", options=StreamOptions(), reconnect=FAST
        )
        assert str(again.terminal) == "completed" and again.stream_error is None

    with StreamServer({"s": case.transcript}, faults=rules, join_timeout=2.0) as server:
        url = server.stream_url("s")
        first = run_live(
            gate, url, provider=case.provider, task_id="a", client=client, options=options
        )
        asyncio.run(asyncio.wait_for(main(url), timeout=30))
        requests = server.requests
    assert str(first.terminal) == "completed" and len(first.reconnects) == 1
    assert seen == list(range(1, len(seen) + 1)) and seen[-1] == first.stats.events
    assert [r.method for r in requests] == ["GET"] * 3
    with pytest.raises(TypeError, match="retries"):
        run_live(gate, url, provider=case.provider, task_id="c", options=options, retries=3)
