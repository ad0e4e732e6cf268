"""LangGraph behind agent-gate: ``gated_tool_node`` in place of ``ToolNode``.

The graph is LangGraph's usual agent loop (a model node, the tools node,
``tools_condition``) with a checkpointer; the task is the run's ``thread_id``.
Every call goes through the policy (``payments_policy.yaml``) and the ledger. A
``GenericFakeChatModel`` plays the model, so this runs offline in about a second
(``pip install 'agent-gate[langgraph]'``):

1. one model turn asks for a payment of 40 and one of 500: the 40 runs, the 500
   calls ``interrupt()`` and the graph stops;
2. ``Command(resume=answer(asked, approved=True, by="alice"))``, an answer naming
   that call by its id with the hash of the arguments shown, records the approval
   in the ledger and pays 500 once; the tools node ran again from its start, and
   the 40 was answered from the ledger, not paid twice;
3. a payment to a blocked vendor never reaches the tool; the model reads why.

Run it: ``python examples/with_langgraph.py [--db URL]``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from agent_gate import Gate, ToolRegistry
from agent_gate.integrations.langgraph import answer, gated_tool_node

POLICY = Path(__file__).resolve().parent / "payments_policy.yaml"
PAID: list[tuple[str, int]] = []


@tool
def send_payment(to: str, amount: int) -> str:
    """Pay a vendor from the company account."""
    PAID.append((to, amount))
    return f"paid {amount} to {to}"


def model_asking(*payments: tuple[str, int, str]) -> GenericFakeChatModel:
    """Stands in for an LLM: asks for ``payments`` in one turn, then says it is done."""

    def replies() -> Iterator[AIMessage]:
        calls = [{"name": "send_payment", "args": {"to": to, "amount": amount}, "id": call_id}
                 for to, amount, call_id in payments]
        yield AIMessage(content="", tool_calls=calls)
        while True:
            yield AIMessage(content="done")

    return GenericFakeChatModel(messages=replies())


def graph_for(gate: Gate, model: GenericFakeChatModel) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", gated_tool_node([send_payment], gate))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def tool_texts(state: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    db = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='agent-gate-lg-')) / 'ledger.db'}"
    PAID.clear()
    with Gate(ToolRegistry(), db, policy=POLICY, create=True) as gate:
        pay = {"configurable": {"thread_id": "langgraph-example"}}
        graph = graph_for(gate, model_asking(("acme", 40, "call-small"),
                                             ("globex", 500, "call-large")))
        paused = graph.invoke({"messages": [HumanMessage("pay acme and globex")]}, pay)
        (asked,) = paused["__interrupt__"]
        print("1. paid so far:", PAID, "| waits:", asked.value["agent_gate"]["call_id"])
        done = graph.invoke(Command(resume=answer(asked, approved=True, by="alice")), pay)
        print("2. after alice approved:", tool_texts(done))

        blocked = {"configurable": {"thread_id": "langgraph-example-blocked"}}
        graph = graph_for(gate, model_asking(("shady-vendor", 10, "call-blocked")))
        print("3.", tool_texts(graph.invoke({"messages": [HumanMessage("pay")]}, blocked)))

        states = {o.call_id: o.state.value
                  for task in ("langgraph-example", "langgraph-example-blocked")
                  for o in gate.calls(task)}
        audit_ok = gate.ledger.verify_audit().ok
    print(f"payments made: {PAID}; ledger: {states}; audit chain verifies: {audit_ok}")
    return {"db": db, "paid": list(PAID), "states": states, "audit_ok": audit_ok}


if __name__ == "__main__":
    main()
