"""Edit then approve behind the agent frameworks (issue 32): while a framework's run
waits on a large payment, a person lowers its amount (``Gate.approve(edit=...)``, what
the inbox and ``agent-gate approve --set`` do); when the framework goes on, the payment
runs once with the edited amount and the model reads the arguments it ran with, not
only the tool's answer: OpenAI Agents SDK, pydantic-ai, LangGraph."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent_gate import Gate
from agent_gate.ledger.states import CallState


def edit_amount(gate: Gate, task: str, call_id: str) -> None:
    rec = gate.ledger.get(task, call_id)
    assert rec is not None and rec.state is CallState.AWAITING_APPROVAL
    gate.approve(call_id, by="olga", task_id=task, args_hash=rec.args_hash,
                 edit={"amount": 250})


def told(text: str, result: str) -> None:
    body = json.loads(text)
    assert body["result"] == result
    assert body["edited"]["fields"] == ["amount"]
    assert body["edited"]["arguments"] == {"to": "carol", "amount": 250}


def test_openai_agents(gate: Gate) -> None:
    pytest.importorskip("agents")
    from agents import Runner
    from integrations.test_openai_agents import TASK, no_tracing, outputs, payer

    del no_tracing  # autouse there; tracing is turned off here too
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    sent: list[tuple[str, int]] = []
    agent = payer(gate, sent, ("carol", 500, "call-big"))

    async def scenario() -> Any:
        paused = await Runner.run(agent, "pay carol")
        (item,) = paused.interruptions
        edit_amount(gate, TASK, "call-big")
        state = paused.to_state()
        state.approve(item)
        return await Runner.run(agent, state)

    done = asyncio.run(scenario())
    told(outputs(done)["call-big"], "paid 250 to carol")
    assert sent == [("carol", 250)]
    assert gate.ledger.verify_audit().ok


def test_pydantic_ai(gate: Gate) -> None:
    pytest.importorskip("pydantic_ai")
    from integrations.test_pydantic_ai import TASK, agent_for, one_call, tool_returns
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    sent: list[tuple[str, int]] = []
    agent = agent_for(gate, sent, one_call("carol", 500))
    waiting = agent.run_sync("pay carol 500")
    assert isinstance(waiting.output, DeferredToolRequests)
    edit_amount(gate, TASK, "call-1")
    answer = DeferredToolResults(approvals={"call-1": True},
                                 metadata={"call-1": {"approved_by": "olga"}})
    done = agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=answer)
    (returned,) = tool_returns(done.all_messages())
    told(str(returned.content), "paid 250 to carol")
    assert sent == [("carol", 250)]
    assert gate.ledger.verify_audit().ok


def test_langgraph(gate: Gate) -> None:
    pytest.importorskip("langgraph")
    from integrations.test_langgraph import CONFIG, THREAD, build, model_asking, payment
    from integrations.test_langgraph import tool_messages as messages_of
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from agent_gate.integrations.langgraph import answer

    sent: list[tuple[str, int]] = []
    graph = build(gate, sent, model_asking(payment("carol", 500, "call-big")))
    paused = graph.invoke({"messages": [HumanMessage("pay carol")]}, CONFIG)
    (pending,) = paused["__interrupt__"]
    edit_amount(gate, THREAD, "call-big")
    done = graph.invoke(Command(resume=answer(pending, approved=True, by="olga")), CONFIG)
    (message,) = messages_of(done)
    told(str(message.content), "paid 250 to carol")
    assert sent == [("carol", 250)]
    assert gate.ledger.verify_audit().ok
