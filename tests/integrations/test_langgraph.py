"""LangGraph behind a gate, with langchain_core's ``GenericFakeChatModel``: no network.

The graph is the ordinary agent loop (model node, ``ToolNode``, ``tools_condition``)
with an in-memory checkpointer; side effects are counted in ``sent``, outside the
ledger, and the ledger is a real SQLite file. The task is the graph's thread id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from agent_gate import Gate
from agent_gate.integrations.langgraph import answer, gated_tool_node
from agent_gate.ledger.states import CallState

THREAD = "thread-7"
CONFIG = {"configurable": {"thread_id": THREAD}}


def payment(to: str, amount: int, call_id: str) -> dict[str, Any]:
    return {"name": "send_payment", "args": {"to": to, "amount": amount}, "id": call_id}


def model_asking(*calls: dict[str, Any]) -> GenericFakeChatModel:
    """A model that asks for ``calls`` in one message, then says it is done, forever."""

    def replies() -> Iterator[AIMessage]:
        yield AIMessage(content="", tool_calls=list(calls))
        while True:
            yield AIMessage(content="done")

    return GenericFakeChatModel(messages=replies())


def build(gate: Gate, sent: list[tuple[str, int]], model: GenericFakeChatModel) -> Any:
    @tool
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", gated_tool_node([send_payment], gate))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_a_write_runs_once_across_a_replay_and_a_repeated_run(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    graph = build(gate, sent, model_asking(payment("bob", 10, "call-1")))
    state = graph.invoke({"messages": [HumanMessage("pay bob")]}, CONFIG)
    assert [m.content for m in tool_messages(state)] == ["paid 10 to bob"]
    # Replay the tools node from the checkpoint taken before it ran (time travel).
    before = next(s for s in graph.get_state_history(CONFIG) if s.next == ("tools",))
    replayed = graph.invoke(None, before.config)
    assert [m.content for m in tool_messages(replayed)] == ["paid 10 to bob"]
    # A new process, its checkpoints lost, given the same response again.
    fresh = build(gate, sent, model_asking(payment("bob", 10, "call-1")))
    again = fresh.invoke({"messages": [HumanMessage("pay bob")]}, CONFIG)
    assert [m.content for m in tool_messages(again)] == ["paid 10 to bob"]
    assert sent == [("bob", 10)]
    (outcome,) = gate.calls(THREAD)
    assert (outcome.call_id, outcome.state, outcome.attempt) == ("call-1", CallState.SUCCEEDED, 1)
    assert gate.ledger.verify_audit().ok


def test_a_denied_call_never_reaches_the_tool(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    graph = build(gate, sent, model_asking(payment("mallory", 5, "call-1")))
    (message,) = tool_messages(graph.invoke({"messages": [HumanMessage("pay")]}, CONFIG))
    assert sent == [] and message.status == "error"
    text = str(message.content)
    assert '"reason_id": "policy_denied"' in text
    assert "SECRET-RULE-TEXT" not in text and "no-payments-to-mallory" not in text
    assert gate.calls(THREAD)[0].state is CallState.REJECTED
    assert gate.ledger.verify_audit().ok


def test_an_approval_through_interrupt_runs_the_call_once_and_the_node_rerun_is_answered(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]], bound: Callable[..., bool]
) -> None:
    sent: list[tuple[str, int]] = []
    model = model_asking(payment("bob", 10, "call-small"), payment("carol", 500, "call-big"))
    graph = build(gate, sent, model)
    paused = graph.invoke({"messages": [HumanMessage("pay both")]}, CONFIG)
    (pending,) = paused["__interrupt__"]
    asked = pending.value["agent_gate"]
    assert (asked["call_id"], asked["task_id"]) == ("call-big", THREAD)
    assert asked["tool"] == "send_payment"
    assert asked["arguments"] == {"to": "carol", "amount": 500}
    assert asked["args_hash"] == gate.ledger.get(THREAD, "call-big").args_hash
    assert sent == [("bob", 10)]

    done = graph.invoke(Command(resume=answer(pending, approved=True, by="alice")), CONFIG)
    # The tools node ran again from its start: the small payment came from the ledger.
    assert sent == [("bob", 10), ("carol", 500)]
    contents = sorted(str(m.content) for m in tool_messages(done))
    assert contents == ["paid 10 to bob", "paid 500 to carol"]
    (approval,) = approvals()
    assert approval["verdict"] == "approved" and approval["decided_by"] == "alice"
    assert approval["consumed"] and bound(THREAD, approval)
    assert {o.call_id: o.state for o in gate.calls(THREAD)} == {
        "call-small": CallState.SUCCEEDED, "call-big": CallState.SUCCEEDED,
    }
    assert gate.ledger.verify_audit().ok


def test_a_denial_through_interrupt_is_recorded_and_runs_nothing(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]]
) -> None:
    sent: list[tuple[str, int]] = []
    graph = build(gate, sent, model_asking(payment("carol", 500, "call-1")))
    (pending,) = graph.invoke({"messages": [HumanMessage("pay carol")]}, CONFIG)["__interrupt__"]
    said_no = answer(pending, approved=False, by="bob", reason="no")
    done = graph.invoke(Command(resume=said_no), CONFIG)
    (message,) = tool_messages(done)
    assert message.status == "error" and '"reason_id": "denied_by_operator"' in str(message.content)
    assert sent == []
    assert [(a["verdict"], a["decided_by"]) for a in approvals()] == [("denied", "bob")]
    assert gate.ledger.verify_audit().ok


def test_the_async_graph_takes_the_same_approval_path(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]]
) -> None:
    sent: list[tuple[str, int]] = []
    graph = build(gate, sent, model_asking(payment("carol", 500, "call-1")))

    async def scenario() -> dict[str, Any]:
        paused = await graph.ainvoke({"messages": [HumanMessage("pay carol")]}, CONFIG)
        (pending,) = paused["__interrupt__"]
        assert sent == []
        return await graph.ainvoke(Command(resume=answer(pending, approved=True)), CONFIG)

    done = asyncio.run(scenario())
    assert [m.content for m in tool_messages(done)] == ["paid 500 to carol"]
    assert sent == [("carol", 500)]
    assert [(a["verdict"], a["decided_by"]) for a in approvals()] == [("approved", "langgraph")]


def test_a_framework_tool_run_outside_its_framework_never_runs(gate: Gate) -> None:
    sent: list[tuple[str, int]] = []
    build(gate, sent, model_asking())  # registers send_payment in the gate
    direct = {"call_id": "call-1", "name": "send_payment", "arguments": {"to": "bob", "amount": 1}}
    outcome = gate.execute(THREAD, direct)
    assert sent == []
    assert outcome.state is CallState.FAILED and outcome.error is not None
    assert outcome.error["type"] == "GateUsageError"
