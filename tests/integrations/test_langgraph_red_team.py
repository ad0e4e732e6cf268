"""LangGraph's answers reach the call they name, whatever order the calls run in.

LangGraph hands a resume value to whichever of a node's parallel tool calls reaches
``interrupt()`` first. Here the order is forced (a call's wrapper waits until its
sibling's has finished), so that the call the person was not shown asks first: the
approval must still run the call it names, and only that one. The rest attacks the
answer itself: ids that are hostile, unknown, of another thread, of a call that ran,
or carrying another arguments' hash; answers racing one another. Each ends by reading
the ledger: no call ran twice, none ran without a person's approval.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Interrupt
from support import answers as ledger_answers

from agent_gate import Gate, ToolRegistry
from agent_gate.errors import AnswerMismatch, UnmatchedAnswer
from agent_gate.integrations.langgraph import GateToolCalls, answer, answers
from agent_gate.ledger.states import CallState

POLICY = Path(__file__).with_name("policy.yaml")
THREAD = "thread-7"
CONFIG = {"configurable": {"thread_id": THREAD}}
Sent = ledger_answers.Sent
Approvals = ledger_answers.Approvals


def payment(to: str, amount: int, call_id: str) -> dict[str, Any]:
    return {"name": "send_payment", "args": {"to": to, "amount": amount}, "id": call_id}


def model_asking(*turns: list[dict[str, Any]]) -> GenericFakeChatModel:
    """A model that asks for each turn's calls in one message, then says it is done."""

    def replies() -> Iterator[AIMessage]:
        for calls in turns:
            yield AIMessage(content="", tool_calls=calls)
        while True:
            yield AIMessage(content="done")

    return GenericFakeChatModel(messages=replies())


class Order:
    """Which call's wrapper goes first; the other starts once the first has finished."""

    def __init__(self, first: str | None = None, second: str | None = None) -> None:
        self.first, self.second = first, second
        self.done = threading.Event()
        self.adone: asyncio.Event | None = None

    def then(self, first: str, second: str) -> None:
        self.first, self.second = first, second
        self.done.clear()
        self.adone = None

    def wrap(self, calls: GateToolCalls) -> Callable[..., Any]:
        def ordered(request: ToolCallRequest, execute: Callable[..., Any]) -> Any:
            cid = request.tool_call["id"]
            if cid == self.second:
                assert self.done.wait(30), "the first call's wrapper never finished"
            try:
                return calls.wrap_tool_call(request, execute)
            finally:
                if cid == self.first:
                    self.done.set()

        return ordered

    def awrap(self, calls: GateToolCalls) -> Callable[..., Awaitable[Any]]:
        async def ordered(request: ToolCallRequest, execute: Callable[..., Any]) -> Any:
            if self.adone is None:
                self.adone = asyncio.Event()
            done, cid = self.adone, request.tool_call["id"]
            if cid == self.second:
                await asyncio.wait_for(done.wait(), 30)
            try:
                return await calls.awrap_tool_call(request, execute)
            finally:
                if cid == self.first:
                    done.set()

        return ordered


def build(
    gate: Gate, sent: Sent, model: GenericFakeChatModel, order: Order | None = None,
    saver: InMemorySaver | None = None, **node_options: Any,
) -> Any:
    @tool
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    calls = GateToolCalls(gate)
    calls.register(send_payment)
    order = order or Order()
    node = ToolNode([send_payment], wrap_tool_call=order.wrap(calls),
                    awrap_tool_call=order.awrap(calls), **node_options)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver or InMemorySaver())


def shown(state: dict[str, Any]) -> list[Interrupt]:
    return list(state.get("__interrupt__", ()))


def states(gate: Gate, task: str = THREAD) -> dict[str, CallState]:
    return ledger_answers.states(gate, task)


@pytest.fixture
def approvals(gate: Gate) -> Approvals:
    return lambda: ledger_answers.recorded(gate)


@pytest.fixture
def gate_on(db_url: str) -> Iterator[Gate]:
    """A gate on each ledger backend in turn (PostgreSQL when configured)."""
    with Gate(ToolRegistry(), db_url, policy=POLICY) as g:
        yield g


def assert_sound(gate: Gate, sent: Sent, approvals: Approvals, *tasks: str) -> None:
    ledger_answers.assert_sound(gate, sent, approvals, tasks or (THREAD,))


def two_waiting(gate: Gate, sent: Sent, order: Order) -> tuple[Any, Interrupt]:
    """A graph paused on two large payments of one message, ``call-seen`` shown."""
    big = "x" * 20_000  # a large argument slows the call it belongs to
    model = model_asking([payment("carol", 500, "call-seen"), payment(big, 700, "call-other")])
    graph = build(gate, sent, model, order)
    (pending,) = shown(graph.invoke({"messages": [HumanMessage("pay both")]}, CONFIG))
    assert pending.value["agent_gate"]["call_id"] == "call-seen"
    return graph, pending


def test_the_approval_runs_the_call_shown_even_when_the_other_asks_first(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    order = Order(first="call-seen", second="call-other")
    graph, pending = two_waiting(gate, sent, order)
    assert pending.response_schema["required"] == ["agent_gate"]  # the form is shown
    order.then(first="call-other", second="call-seen")  # the unseen call asks first now

    paused = graph.invoke(Command(resume=answer(pending, approved=True, by="alice")), CONFIG)
    assert sent == [("carol", 500)]
    assert states(gate) == {"call-seen": CallState.SUCCEEDED,
                            "call-other": CallState.AWAITING_APPROVAL}
    (again,) = shown(paused)
    assert again.value["agent_gate"]["call_id"] == "call-other"

    done = graph.invoke(Command(resume=answer(again, approved=False, by="alice")), CONFIG)
    assert not shown(done) and sent == [("carol", 500)]
    assert states(gate) == {"call-seen": CallState.SUCCEEDED, "call-other": CallState.REJECTED}
    assert [(a["call_id"], a["verdict"]) for a in approvals()] == [
        ("call-seen", "approved"), ("call-other", "denied")]
    assert_sound(gate, sent, approvals)


def test_the_async_graph_takes_answers_by_call_too(gate: Gate, approvals: Approvals) -> None:
    # In the async ToolNode a call that stops the graph leaves its siblings running
    # unawaited, so here the answer names both calls and nobody stops: the call that
    # asks first (the one not shown) records both answers, each for its own call.
    sent: Sent = []
    order = Order(first="call-seen", second="call-other")
    graph, pending = two_waiting(gate, sent, order)  # paused by a sync run: both asked

    async def scenario() -> dict[str, Any]:
        order.then(first="call-other", second="call-seen")
        other = gate.ledger.get(THREAD, "call-other")
        assert other is not None
        other_shown = {"call_id": "call-other", "args_hash": other.args_hash}
        both = answers(answer(pending, approved=True, by="alice"),
                       answer(other_shown, approved=False, by="alice"))
        return await graph.ainvoke(Command(resume=both), CONFIG)

    done = asyncio.run(scenario())
    assert not shown(done) and sent == [("carol", 500)]
    assert states(gate) == {"call-seen": CallState.SUCCEEDED, "call-other": CallState.REJECTED}
    assert_sound(gate, sent, approvals)


def test_one_resume_answers_both_calls_by_id(gate: Gate, approvals: Approvals) -> None:
    sent: Sent = []
    order = Order(first="call-seen", second="call-other")
    graph, pending = two_waiting(gate, sent, order)
    order.then(first="call-other", second="call-seen")
    other = gate.ledger.get(THREAD, "call-other")
    assert other is not None
    other_shown = {"agent_gate": {"call_id": "call-other", "args_hash": other.args_hash}}
    both = answers(answer(pending, approved=False, by="alice", reason="no"),
                   answer(other_shown, approved=True, by="alice"))
    done = graph.invoke(Command(resume=both), CONFIG)
    assert not shown(done) and sent == [("x" * 20_000, 700)]
    assert states(gate) == {"call-seen": CallState.REJECTED, "call-other": CallState.SUCCEEDED}
    assert_sound(gate, sent, approvals)


def paused_on_one(
    gate: Gate, sent: Sent, call_id: str = "call-1", config: dict[str, Any] = CONFIG,
    **options: Any,
) -> Any:
    graph = build(gate, sent, model_asking([payment("carol", 500, call_id)]), **options)
    (pending,) = shown(graph.invoke({"messages": [HumanMessage("pay")]}, config))
    return graph, pending


@pytest.mark.parametrize(
    "resume",
    [
        True,
        {"approved": True, "by": "alice"},
        {"agent_gate": {}},
        {"agent_gate": {"call-1": True}},
        {"agent_gate": {"call-1": {"approved": "yes", "args_hash": "0"}}},
        {"agent_gate": {"call-1": {"approved": True}}},  # no hash of what was shown
        {"agent_gate": {"call-1": {"approved": True, "args_hash": "0", "run": "now"}}},
    ],
    ids=["bare-true", "old-form", "empty", "not-a-mapping", "not-a-bool", "no-hash",
         "unknown-key"],
)
def test_a_resume_that_names_no_call_properly_is_refused_and_changes_nothing(
    gate: Gate, approvals: Approvals, resume: Any
) -> None:
    sent: Sent = []
    graph, pending = paused_on_one(gate, sent, handle_tool_errors=True)
    with pytest.raises(UnmatchedAnswer):
        graph.invoke(Command(resume=resume), CONFIG)
    assert sent == [] and approvals() == []
    assert states(gate) == {"call-1": CallState.AWAITING_APPROVAL}
    # Refused, not swallowed into a message: the graph still waits for its answer.
    graph.invoke(Command(resume=answer(pending, approved=True, by="alice")), CONFIG)
    assert sent == [("carol", 500)]
    assert_sound(gate, sent, approvals)


def test_an_answer_for_an_unknown_call_or_another_threads_call_is_refused_whole(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    graph, pending = paused_on_one(gate, sent)
    elsewhere = {"configurable": {"thread_id": "thread-8"}}
    _, theirs = paused_on_one(gate, sent, config=elsewhere)
    # The other thread's call has the same id: only the thread tells them apart.
    assert theirs.value["agent_gate"]["call_id"] == "call-1"
    ours_too = answer(pending, approved=True, by="alice")
    for resume in (
        {"agent_gate": {"call-404": {"approved": True, "args_hash": "0" * 64}}},
        answers(ours_too, {"agent_gate": {"call-404": {"approved": False, "args_hash": "0"}}}),
    ):
        with pytest.raises(UnmatchedAnswer) as refused:
            graph.invoke(Command(resume=resume), CONFIG)
        assert "call-404" in str(refused.value)
    assert sent == [] and approvals() == []  # the good answer beside a bad one: not applied

    # thread-8's call is also call-1, with the same arguments (the same hash): only
    # the task the answer was shown for tells it apart, and refuses it here.
    with pytest.raises(UnmatchedAnswer, match="another task"):
        graph.invoke(Command(resume=answer(theirs, approved=True, by="mallory")), CONFIG)
    assert sent == [] and approvals() == []
    assert states(gate, "thread-8") == states(gate) == {"call-1": CallState.AWAITING_APPROVAL}
    assert_sound(gate, sent, approvals, THREAD, "thread-8")


def test_an_answer_for_a_call_that_already_ran_is_refused_unless_it_is_the_same_answer(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    model = model_asking([payment("carol", 500, "call-1")], [payment("dave", 600, "call-2")])
    graph = build(gate, sent, model)
    (first,) = shown(graph.invoke({"messages": [HumanMessage("pay")]}, CONFIG))
    (second,) = shown(graph.invoke(Command(resume=answer(first, approved=True, by="al")), CONFIG))
    assert second.value["agent_gate"]["call_id"] == "call-2" and sent == [("carol", 500)]

    with pytest.raises(UnmatchedAnswer, match="succeeded, not waiting"):
        graph.invoke(Command(resume=answer(first, approved=False, by="al")), CONFIG)
    assert states(gate) == {"call-1": CallState.SUCCEEDED, "call-2": CallState.AWAITING_APPROVAL}
    # The same approval again is that answer seen again: nothing runs twice, and the
    # call actually waiting still waits for its own.
    (still,) = shown(graph.invoke(Command(resume=answer(first, approved=True, by="al")), CONFIG))
    assert still.value["agent_gate"]["call_id"] == "call-2"
    graph.invoke(Command(resume=answer(still, approved=True, by="al")), CONFIG)
    assert sent == [("carol", 500), ("dave", 600)]
    assert_sound(gate, sent, approvals)


def test_an_answer_carrying_another_arguments_hash_is_refused(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    graph, pending = paused_on_one(gate, sent)
    stale = answer(pending, approved=True, by="alice")
    stale["agent_gate"]["call-1"]["args_hash"] = "f" * 64
    with pytest.raises(AnswerMismatch, match="other arguments"):
        graph.invoke(Command(resume=stale), CONFIG)
    assert sent == [] and approvals() == []
    assert states(gate) == {"call-1": CallState.AWAITING_APPROVAL}


@pytest.mark.parametrize(
    "call_id",
    ["../../etc/passwd", "call-é-🙂-ж", "call\n\x1b[31mred\u202e", "c" * 255],
    ids=["dot-dot", "unicode", "control-chars", "longest-stored"],
)
def test_hostile_call_ids_are_answered_by_id_and_never_echoed(
    gate: Gate, approvals: Approvals, call_id: str
) -> None:
    sent: Sent = []
    graph, pending = paused_on_one(gate, sent, call_id=call_id)
    assert pending.value["agent_gate"]["call_id"] == call_id
    wrong = {"agent_gate": {call_id + "x": {"approved": True, "args_hash": "0"}}}
    with pytest.raises(UnmatchedAnswer) as refused:
        graph.invoke(Command(resume=wrong), CONFIG)
    assert call_id not in str(refused.value) and "<unprintable>" in str(refused.value)
    done = graph.invoke(Command(resume=answer(pending, approved=True, by="alice")), CONFIG)
    (message,) = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert message.tool_call_id == call_id and sent == [("carol", 500)]
    assert states(gate) == {call_id: CallState.SUCCEEDED}
    assert_sound(gate, sent, approvals)


@pytest.mark.parametrize("call_id", ["call\x00nul", "c" * 5_000], ids=["nul", "too-long"])
def test_a_call_id_the_ledger_cannot_store_is_never_asked_about_nor_run(
    gate: Gate, approvals: Approvals, call_id: str
) -> None:
    sent: Sent = []
    graph = build(gate, sent, model_asking([payment("carol", 500, call_id)]))
    done = graph.invoke({"messages": [HumanMessage("pay")]}, CONFIG)
    (message,) = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert not shown(done) and sent == [] and message.status == "error"
    assert message.tool_call_id == call_id and call_id not in str(message.content)
    assert [o.state for o in gate.calls(THREAD)] == [CallState.REJECTED]
    assert_sound(gate, sent, approvals)


def test_a_call_id_reused_in_a_later_message_never_runs_again(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    model = model_asking([payment("carol", 500, "dup")], [payment("mallet", 900, "dup")])
    graph = build(gate, sent, model)
    (first,) = shown(graph.invoke({"messages": [HumanMessage("pay")]}, CONFIG))
    done = graph.invoke(Command(resume=answer(first, approved=True, by="alice")), CONFIG)
    assert not shown(done)  # the reused id is not asked about: it is not a new call
    assert sent == [("carol", 500)]
    last = [m for m in done["messages"] if isinstance(m, ToolMessage)][-1]
    assert last.status == "error"
    assert_sound(gate, sent, approvals)


def test_langgraphs_own_multi_interrupt_form_carries_the_answer_too(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    graph, pending = paused_on_one(gate, sent)
    keyed = {pending.id: answer(pending, approved=True, by="alice")}
    graph.invoke(Command(resume=keyed), CONFIG)
    assert sent == [("carol", 500)] and states(gate) == {"call-1": CallState.SUCCEEDED}
    assert_sound(gate, sent, approvals)


@pytest.mark.parametrize("workers", [1, 2], ids=["one-node", "two-workers"])
@pytest.mark.parametrize("verdicts", [(True, False), (True, True)], ids=["approve-vs-deny",
                                                                         "approve-twice"])
def test_answers_racing_on_one_thread_run_the_call_at_most_once(
    gate_on: Gate, verdicts: tuple[bool, bool], workers: int
) -> None:
    # One node object shares its adapter (and its lock); two workers share only the
    # checkpoints and the ledger, as two processes would.
    gate, approvals = gate_on, lambda: ledger_answers.recorded(gate_on)
    sent: Sent = []
    saver = InMemorySaver()
    graphs = [build(gate, sent, model_asking([payment("carol", 500, "call-1")]), saver=saver)
              for _ in range(workers)]
    (pending,) = shown(graphs[0].invoke({"messages": [HumanMessage("pay")]}, CONFIG))
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def resume(graph: Any, approved: bool, by: str) -> None:
        start.wait(10)
        try:
            graph.invoke(Command(resume=answer(pending, approved=approved, by=by)), CONFIG)
        except UnmatchedAnswer as exc:  # the loser, answered otherwise meanwhile
            failures.append(exc)

    racers = [threading.Thread(target=resume, args=(graphs[i % workers], v, f"op{i}"))
              for i, v in enumerate(verdicts)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    assert not any(t.is_alive() for t in racers)
    state = states(gate)["call-1"]
    assert state in (CallState.SUCCEEDED, CallState.REJECTED)
    assert sent == ([("carol", 500)] if state is CallState.SUCCEEDED else [])
    if state is CallState.REJECTED:
        assert "denied" in {a["verdict"] for a in approvals()}
    assert_sound(gate, sent, approvals)
