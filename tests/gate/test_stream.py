"""Gate.run: recorded provider streams through accumulator, ledger and tools."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import DispatchMode
from agent_gate.calls import TerminalKind
from agent_gate.sse import ServerSentEvent, SSEDecoder

TRANSCRIPTS = Path(__file__).parents[1] / "transcripts"


def events(provider_dir: str, name: str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    out = decoder.feed((TRANSCRIPTS / provider_dir / f"{name}.sse").read_bytes())
    decoder.end()
    return out


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def gate(db_url: str, effects_file: Path, agent_tools: Any) -> Gate:
    with Gate(agent_tools.tools, db_url) as gate:
        yield gate


def summary(result: Any) -> list[tuple[str, str, str, bool, str | None]]:
    return [(o.call_id, o.tool, o.state.value, o.replayed, o.code) for o in result.outcomes]


def test_completed_response_runs_every_call_once_and_replays_run_none(
    gate: Gate, effects_file: Path
) -> None:
    first = gate.run(
        events("openai_responses", "parallel_calls"), task_id="t", provider="openai-responses"
    )
    assert first.terminal is not None and first.terminal.kind is TerminalKind.COMPLETED
    assert summary(first) == [
        ("call_8fJk2LwQe9", "get_weather", "succeeded", False, None),
        ("call_R4nd0mW7xt", "send_email", "succeeded", False, None),
    ]
    assert effect_lines(effects_file) == [
        "t get_weather Zürich",
        "t send_email marta@example.org Réunion à 14h",
    ]
    second = gate.run(
        events("openai_responses", "parallel_calls"), task_id="t", provider="openai-responses"
    )
    assert [o.replayed for o in second.outcomes] == [True, True]
    assert [o.result for o in second.outcomes] == [o.result for o in first.outcomes]
    assert len(effect_lines(effects_file)) == 2
    task = gate.ledger.task("t")
    assert task is not None and task.terminal == "completed"


def test_a_write_whose_response_was_cut_is_recorded_not_run(gate: Gate, effects_file: Path) -> None:
    # Chat Completions: the call's arguments completed, but [DONE] never came.
    result = gate.run(
        events("openai_chat", "truncated_before_done"), task_id="t", provider="openai-chat"
    )
    (outcome,) = result.outcomes
    assert result.terminal is not None and result.terminal.kind is TerminalKind.TRUNCATED
    assert (outcome.tool, outcome.state, outcome.code) == (
        "send_email",
        CallState.INCOMPLETE,
        "response_not_completed",
    )
    assert "ended truncated" in (outcome.reason or "") and "not run" in outcome.reason
    assert effect_lines(effects_file) == []
    (message,) = result.tool_results("openai-chat")
    assert message["tool_call_id"] == "call_NoDone11" and '"executed": false' in message["content"]


def test_reads_run_on_call_complete_writes_wait_for_the_end(gate: Gate, effects_file: Path) -> None:
    # Anthropic: get_weather's block stopped, then the response hit max_tokens.
    result = gate.run(
        events("anthropic", "max_tokens_after_block_stop"), task_id="t", provider="anthropic"
    )
    assert summary(result) == [
        ("toolu_01Confirmed000004", "get_weather", "succeeded", False, None),
        ("toolu_01Unconfirmed0004", "send_email", "incomplete", False, "arguments_incomplete"),
    ]
    assert str(result.terminal) == "incomplete:max_tokens"
    # The same stream with every tool held until a successful end: nothing runs.
    held = gate.run(
        events("anthropic", "max_tokens_after_block_stop"),
        task_id="t2",
        provider="anthropic",
        dispatch=DispatchMode.ON_RESPONSE_COMPLETE,
    )
    weather = next(o for o in held.outcomes if o.tool == "get_weather")
    assert (weather.state, weather.code) == (CallState.INCOMPLETE, "response_not_completed")
    assert "incomplete:max_tokens" in (weather.reason or "")
    assert effect_lines(effects_file) == ["t get_weather Lisbon"]


def test_reconnect_replay_in_one_stream_runs_each_call_once(gate: Gate, effects_file: Path) -> None:
    result = gate.run(
        events("openai_responses", "replayed_after_reconnect"),
        task_id="t",
        provider="openai-responses",
    )
    assert [o.state.value for o in result.outcomes] == ["succeeded", "succeeded"]
    assert len(effect_lines(effects_file)) == 2


def test_provider_executed_calls_are_not_ours(gate: Gate) -> None:
    result = gate.run(
        events("openai_responses", "provider_executed"), task_id="t", provider="openai-responses"
    )
    assert [o.tool for o in result.outcomes] == ["get_weather"]
    assert [r.call_id for r in gate.ledger.calls("t")] == ["call_X1"]


def test_unusable_calls_in_streams_never_run(gate: Gate, effects_file: Path) -> None:
    for provider_dir, name, provider in [
        ("openai_responses", "arguments_mismatch", "openai-responses"),
        ("openai_chat", "truncated_mid_call", "openai-chat"),
        ("anthropic", "index_reuse", "anthropic"),
        ("openai_responses", "custom_tool_call", "openai-responses"),
    ]:
        result = gate.run(events(provider_dir, name), task_id=name, provider=provider)
        assert result.outcomes and all(o.ran is False for o in result.outcomes), name
        assert all(o.reason and "not run" in o.reason for o in result.outcomes), name
    assert effect_lines(effects_file) == []


def test_a_broken_stream_is_reported_and_held_writes_are_not_run(
    gate: Gate, effects_file: Path
) -> None:
    good = events("openai_responses", "parallel_calls")
    cut = [e for e in good if e.event != "response.completed"]
    broken = [*cut, ServerSentEvent(event="response.output_text.delta", data="{oops", id="")]
    result = gate.run(broken, task_id="t", provider="openai-responses")
    assert result.error is not None and "not valid JSON" in result.error
    assert str(result.terminal) == "truncated"
    assert summary(result) == [
        ("call_8fJk2LwQe9", "get_weather", "succeeded", False, None),
        ("call_R4nd0mW7xt", "send_email", "incomplete", False, "response_not_completed"),
    ]
    assert effect_lines(effects_file) == ["t get_weather Zürich"]


def test_an_event_source_that_raises_still_records_held_calls(
    gate: Gate, effects_file: Path
) -> None:
    def source() -> Iterator[ServerSentEvent]:
        for event in events("openai_responses", "parallel_calls"):
            if event.event == "response.completed":
                raise ConnectionResetError("peer went away")
            yield event

    with pytest.raises(ConnectionResetError):
        gate.run(source(), task_id="t", provider="openai-responses")
    states = {r.tool: (r.state.value, r.reason_code) for r in gate.ledger.calls("t")}
    assert states == {
        "get_weather": ("succeeded", None),
        "send_email": ("incomplete", "response_not_completed"),
    }
    assert effect_lines(effects_file) == ["t get_weather Zürich"]


def test_arun_with_an_async_source_and_async_tools(db_url: str) -> None:
    seen: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    async def get_weather(**kw: Any) -> str:
        await asyncio.sleep(0)
        seen.append(f"weather {kw['city']}")
        return "sunny"

    @tools.tool(schema={"type": "object"}, effect="write")
    def send_email(**kw: Any) -> str:
        seen.append(f"mail {kw['to']}")
        return "queued"

    async def source() -> AsyncIterator[ServerSentEvent]:
        for event in events("anthropic", "parallel_tool_use"):
            await asyncio.sleep(0)
            yield event

    async def main() -> None:
        with Gate(tools, db_url) as gate:
            result = await gate.arun(source(), task_id="t", provider="anthropic")
            assert [o.state.value for o in result.outcomes] == ["succeeded", "succeeded"]
            blocks = result.tool_results("anthropic")
            assert [b["content"] for b in blocks] == ["sunny", "queued"]
            again = await gate.arun(
                events("anthropic", "parallel_tool_use"), task_id="t", provider="anthropic"
            )
            assert all(o.replayed for o in again.outcomes)

    asyncio.run(main())
    assert seen == ["weather Zürich", "mail marta@example.org"]


def test_gate_errors_propagate_but_stream_errors_are_reported(db_url: str) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    async def get_weather(**kw: Any) -> str:
        return "sunny"

    good = events("openai_responses", "single_call")
    broken = [good[0], ServerSentEvent(event="response.created", data="[", id=""), *good[1:]]

    async def main() -> None:
        with Gate(tools, db_url) as gate:
            # A sync run inside a running loop cannot run an async tool: that is the
            # caller's mistake, raised, not folded into the run's stream error.
            from agent_gate import GateUsageError

            with pytest.raises(GateUsageError, match="use aexecute"):
                gate.run(good, task_id="t", provider="openai-responses")
            reported = await gate.arun(broken, task_id="t2", provider="openai-responses")
            assert reported.error is not None and "not valid JSON" in reported.error
            assert str(reported.terminal) == "truncated" and reported.outcomes == ()

    asyncio.run(main())


def test_a_held_accumulator_recognises_events_replayed_after_a_reconnect(
    gate: Gate, effects_file: Path
) -> None:
    """What a live transport does: on reconnect it tells the run's accumulator, and
    the server replays from its last event ID; nothing is appended or run twice.

    The server here sets an ID on every third event only (the others inherit
    it), and the connection drops inside such a run, so the replay restarts the
    very run the accumulator was in: only the reconnect signal tells the two apart.
    """
    stream = [
        event._replace(id=f"run-{index // 3}")
        for index, event in enumerate(events("anthropic", "parallel_tool_use"))
    ]
    acc = gate.accumulator_for("anthropic")

    def source() -> Iterator[ServerSentEvent]:
        yield from stream[:7]  # the drop comes after the first event of run-2, a delta
        acc.reconnected()
        yield from stream[6:]  # the server resumes from the start of run-2

    result = gate.run(source(), task_id="t-reconnect", provider="anthropic", accumulator=acc)
    assert result.terminal is not None and result.terminal.kind is TerminalKind.COMPLETED
    assert list(result.anomalies) == []
    call_ids = [o.call_id for o in result.outcomes]
    assert len(call_ids) == len(set(call_ids)) > 0
    assert all(o.state is CallState.SUCCEEDED for o in result.outcomes)
    assert len(effect_lines(effects_file)) == len(call_ids)
