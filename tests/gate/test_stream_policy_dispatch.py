"""A policy's ``effect: write`` / ``destructive`` wins over a laxer dispatch mode.

Before this was fixed, ``Gate.run(dispatch=DispatchMode.ON_CALL_COMPLETE)`` ran a
tool the policy file classes destructive as soon as its arguments completed, so it
ran even when the response then failed. A caller's own accumulator built with
that mode made the gate mark a completed write "incomplete" instead of running
it after the response completed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import Accumulator, DispatchMode

StreamOf = Callable[..., list[dict[str, Any]]]

POLICY = """
version: 1
tools:
  wipe:
    effect: destructive
    rules:
      - id: wipe-ok
        effect: allow
  peek:
    effect: read
    rules:
      - id: peek-ok
        effect: allow
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolRegistry, Counter[str], Path]:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()

    # The code calls it a read and even asks for early dispatch; the policy says
    # destructive, and the policy is the operator's word.
    @tools.tool(schema={"type": "object"}, effect="read", dispatch="on_call_complete")
    def wipe() -> str:
        ran["wipe"] += 1
        return "wiped"

    @tools.tool(schema={"type": "object"}, effect="read")
    def peek() -> str:
        ran["peek"] += 1
        return "seen"

    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return tools, ran, policy


CALLS = [("c_wipe", "wipe", "{}"), ("c_peek", "peek", "{}")]


@pytest.mark.parametrize("how", ["mode", "callable", "default"])
def test_a_destructive_call_never_runs_before_a_failed_response_ends(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path], responses_stream: StreamOf,
    how: str,
) -> None:
    tools, ran, policy = setup
    dispatch: Any = {
        "mode": DispatchMode.ON_CALL_COMPLETE,
        "callable": lambda _name: DispatchMode.ON_CALL_COMPLETE,
        "default": None,
    }[how]
    with Gate(tools, db_url, policy=policy) as gate:
        assert gate.dispatch_mode("wipe") is DispatchMode.ON_RESPONSE_COMPLETE
        result = gate.run(
            responses_stream(CALLS, end="failed"), task_id="t", provider="openai-responses",
            dispatch=dispatch,
        )
    states = {o.call_id: o.state for o in result.outcomes}
    assert states == {"c_wipe": CallState.INCOMPLETE, "c_peek": CallState.SUCCEEDED}
    assert ran == Counter({"peek": 1})


def test_an_outside_accumulator_releasing_early_holds_the_write_until_the_end(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path], responses_stream: StreamOf
) -> None:
    tools, ran, policy = setup
    with Gate(tools, db_url, policy=policy) as gate:
        lax = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
        done = gate.run(
            responses_stream(CALLS), task_id="t1", provider="openai-responses", accumulator=lax
        )
        assert {o.call_id: o.state for o in done.outcomes} == {
            "c_wipe": CallState.SUCCEEDED, "c_peek": CallState.SUCCEEDED}
        lax = Accumulator("openai-responses", dispatch=DispatchMode.ON_CALL_COMPLETE)
        failed = gate.run(
            responses_stream(CALLS, end="failed"), task_id="t2", provider="openai-responses",
            accumulator=lax,
        )
        assert {o.call_id: o.state for o in failed.outcomes} == {
            "c_wipe": CallState.INCOMPLETE, "c_peek": CallState.SUCCEEDED}
    assert ran == Counter({"peek": 2, "wipe": 1})


def test_async_run_holds_the_write_too(
    db_url: str, setup: tuple[ToolRegistry, Counter[str], Path], responses_stream: StreamOf
) -> None:
    import asyncio

    tools, ran, policy = setup

    async def go() -> Any:
        with Gate(tools, db_url, policy=policy) as gate:
            return await gate.arun(
                responses_stream(CALLS, end="failed"), task_id="t", provider="openai-responses",
                dispatch=DispatchMode.ON_CALL_COMPLETE,
            )

    result = asyncio.run(go())
    assert {o.call_id: o.state for o in result.outcomes} == {
        "c_wipe": CallState.INCOMPLETE, "c_peek": CallState.SUCCEEDED}
    assert ran == Counter({"peek": 1})
