"""The OpenAI Agents SDK behind a gate, with the SDK's own ``ScriptedModel``: no network.

Side effects are counted in ``sent``, outside the ledger; the ledger is a real
SQLite file. Approvals go the SDK's way: ``result.interruptions``, ``RunState``,
``state.approve``; a saved state resumed twice must not pay twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_gate import Gate
from agent_gate.integrations.openai_agents import gate_tools, record_rejection
from agent_gate.ledger.states import CallState

TASK = "order-17"


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # offline: nothing to export traces to


def payer(gate: Gate, sent: list[tuple[str, int]], *calls: tuple[str, int, str]) -> Agent[Any]:
    """An agent whose model asks for ``calls`` (to, amount, call id) at once, then is done."""

    @function_tool
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    asks = [function_call("send_payment", {"to": to, "amount": amount}, call_id=call_id)
            for to, amount, call_id in calls]
    model = ScriptedModel([asks, *([[assistant_message("done")]] * 4)])
    return Agent(name="payer", model=model,
                 tools=gate_tools([send_payment], gate, task_id=TASK))


def outputs(result: Any) -> dict[str, str]:
    return {
        item.raw_item["call_id"]: str(item.output)
        for item in result.new_items if isinstance(item, ToolCallOutputItem)
    }


def test_a_write_runs_once_across_a_repeated_run(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    first = asyncio.run(Runner.run(payer(gate, sent, ("bob", 10, "call-1")), "pay bob"))
    assert outputs(first) == {"call-1": "paid 10 to bob"}
    again = asyncio.run(Runner.run(payer(gate, sent, ("bob", 10, "call-1")), "pay bob"))
    assert outputs(again) == {"call-1": "paid 10 to bob"}
    assert sent == [("bob", 10)]
    (outcome,) = gate.calls(TASK)
    assert (outcome.state, outcome.attempt) == (CallState.SUCCEEDED, 1)
    assert gate.tools["send_payment"].spec.schema["additionalProperties"] is False
    assert gate.ledger.verify_audit().ok


def test_a_denied_call_never_reaches_the_tool(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    result = asyncio.run(Runner.run(payer(gate, sent, ("mallory", 5, "call-1")), "pay"))
    assert sent == [] and result.final_output == "done"
    text = outputs(result)["call-1"]
    assert '"reason_id": "policy_denied"' in text
    assert "SECRET-RULE-TEXT" not in text and "no-payments-to-mallory" not in text
    assert gate.calls(TASK)[0].state is CallState.REJECTED
    assert gate.ledger.verify_audit().ok


def test_an_approval_through_the_run_state_runs_the_call_once_even_resumed_twice(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]], bound: Callable[..., bool]
) -> None:
    sent: list[tuple[str, int]] = []
    agent = payer(gate, sent, ("bob", 10, "call-small"), ("carol", 500, "call-big"))

    async def scenario() -> tuple[Any, Any]:
        paused = await Runner.run(agent, "pay both")
        (item,) = paused.interruptions
        assert (item.call_id, item.name) == ("call-big", "send_payment")
        assert sent == [("bob", 10)]
        state = paused.to_state()
        state.approve(item)
        saved = state.to_string()
        done = await Runner.run(agent, state)
        # The same approved state, saved before it ran, resumed again.
        again = await Runner.run(agent, await RunState.from_string(agent, saved))
        return done, again

    done, again = asyncio.run(scenario())
    assert outputs(done)["call-big"] == "paid 500 to carol"
    assert outputs(again)["call-big"] == "paid 500 to carol"
    assert sent == [("bob", 10), ("carol", 500)]
    (approval,) = approvals()
    assert (approval["call_id"], approval["verdict"]) == ("call-big", "approved")
    assert approval["decided_by"] == "openai-agents"
    assert approval["consumed"] and bound(TASK, approval)
    assert gate.ledger.verify_audit().ok


def test_a_rejection_through_the_run_state_is_recorded_and_runs_nothing(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]]
) -> None:
    sent: list[tuple[str, int]] = []
    agent = payer(gate, sent, ("carol", 500, "call-1"))

    async def scenario() -> Any:
        paused = await Runner.run(agent, "pay carol")
        (item,) = paused.interruptions
        state = paused.to_state()
        state.reject(item, rejection_message="not today")
        assert record_rejection(gate, item, task_id=TASK, by="bob", reason="not today")
        return await Runner.run(agent, state)

    done = asyncio.run(scenario())
    assert outputs(done)["call-1"] == "not today" and sent == []
    assert gate.calls(TASK)[0].state is CallState.REJECTED
    assert [(a["verdict"], a["decided_by"]) for a in approvals()] == [("denied", "bob")]


def test_quotas_count_calls_the_sdk_made(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    calls = [("bob", 1, "call-1"), ("bob", 2, "call-2"), ("bob", 3, "call-3")]
    result = asyncio.run(Runner.run(payer(gate, sent, *calls), "pay thrice"))
    assert len(sent) == 2  # the policy allows two per task
    refused = [text for text in outputs(result).values() if "policy_denied" in text]
    assert len(refused) == 1
    assert sorted(o.state for o in gate.calls(TASK)) == sorted(
        [CallState.SUCCEEDED, CallState.SUCCEEDED, CallState.REJECTED]
    )
