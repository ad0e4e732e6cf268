"""pydantic-ai and the OpenAI Agents SDK: every answer reaches the call it names.

Both frameworks match a decision to its call by the call id; the adapters must too,
and must not turn anything else into an approval: a standing approval of a tool, a
denial naming a call the task does not have (or another task's, or one that ran), an
approval carrying the hash of other arguments, two answers racing. Each test ends by
reading the ledger: no call ran twice, none ran without a person's approval of it.
The frameworks' own test models (``FunctionModel``, ``ScriptedModel``), no network.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, FunctionToolset, ToolApproved
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from support import answers as ledger_answers

from agent_gate import Gate, ToolRegistry
from agent_gate.errors import AnswerMismatch, UnmatchedAnswer
from agent_gate.integrations.openai_agents import (
    approval_request,
    gate_tools,
    record_approval,
    record_rejection,
)
from agent_gate.integrations.pydantic_ai import GatedToolset
from agent_gate.ledger.states import CallState

POLICY = Path(__file__).with_name("policy.yaml")
TASK = "order-17"
Sent = ledger_answers.Sent
Approvals = ledger_answers.Approvals
HOSTILE = ["../../etc/passwd", "call-é-🙂-ж", "call\n\x1b[31mred\u202e", "c" * 255]
HOSTILE_IDS = ["dot-dot", "unicode", "control-chars", "longest-stored"]


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # offline: nothing to export traces to


def states(gate: Gate, task: str = TASK) -> dict[str, CallState]:
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
    ledger_answers.assert_sound(gate, sent, approvals, tasks or (TASK,))


# ------------------------------------------------------------------ pydantic-ai


def payments(sent: Sent) -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    return toolset


def asking(*calls: tuple[str, int, str]) -> FunctionModel:
    """A model that asks for ``calls`` (to, amount, id) at once, then reports back."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"{len(returns)} results")])
        return ModelResponse(parts=[
            ToolCallPart("send_payment", {"to": to, "amount": amount}, tool_call_id=call_id)
            for to, amount, call_id in calls
        ])

    return FunctionModel(respond)


def pydantic_agent(
    gate: Gate, sent: Sent, *calls: tuple[str, int, str], task: str = TASK
) -> tuple[PydanticAgent[None, Any], GatedToolset]:
    gated = GatedToolset(payments(sent), gate, task_id=task)
    agent = PydanticAgent(asking(*calls), toolsets=[gated],
                          output_type=[str, DeferredToolRequests])
    return agent, gated


def deferred(agent: PydanticAgent[None, Any]) -> Any:
    waiting = agent.run_sync("pay")
    assert isinstance(waiting.output, DeferredToolRequests)
    return waiting


def hash_shown(waiting: Any, call_id: str) -> str:
    shown = waiting.output.metadata[call_id]["agent_gate"]
    assert shown["call_id"] == call_id and isinstance(shown["args_hash"], str)
    return str(shown["args_hash"])


def test_pydantic_ai_answers_two_waiting_calls_each_by_its_id(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent, gated = pydantic_agent(gate, sent, ("carol", 500, "c1"), ("dave", 700, "c2"))
    waiting = deferred(agent)
    results = DeferredToolResults(
        approvals={"c1": False, "c2": True},
        metadata={"c1": {"args_hash": hash_shown(waiting, "c1")},
                  "c2": {"approved_by": "alice", "args_hash": hash_shown(waiting, "c2")}},
    )
    assert gated.record_denials(results, by="bob") == 1
    agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=results)
    assert sent == [("dave", 700)]
    assert states(gate) == {"c1": CallState.REJECTED, "c2": CallState.SUCCEEDED}
    assert [(a["call_id"], a["verdict"], a["decided_by"]) for a in approvals()] == [
        ("c1", "denied", "bob"), ("c2", "approved", "alice")]
    assert_sound(gate, sent, approvals)


def test_pydantic_ai_an_approval_for_other_arguments_is_refused(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent, gated = pydantic_agent(gate, sent, ("carol", 500, "c1"))
    waiting = deferred(agent)
    stale = DeferredToolResults(approvals={"c1": True}, metadata={"c1": {"args_hash": "f" * 64}})
    with pytest.raises(AnswerMismatch):
        agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=stale)
    denial = DeferredToolResults(approvals={"c1": False}, metadata={"c1": {"args_hash": "0"}})
    with pytest.raises(AnswerMismatch):
        gated.record_denials(denial)
    # Approved with arguments the person was not shown: not this call's approval.
    swapped = DeferredToolResults(
        approvals={"c1": ToolApproved(override_args={"to": "mallet", "amount": 500})},
        metadata={"c1": {"args_hash": hash_shown(waiting, "c1")}},
    )
    agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=swapped)
    assert sent == [] and approvals() == []
    assert states(gate) == {"c1": CallState.AWAITING_APPROVAL}
    assert_sound(gate, sent, approvals)


def test_pydantic_ai_a_denial_naming_no_waiting_call_of_the_task_is_refused_whole(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent, gated = pydantic_agent(gate, sent, ("carol", 500, "c1"), ("bob", 10, "ran"))
    waiting = deferred(agent)  # "ran" is small: it ran at once
    other_agent, _ = pydantic_agent(gate, sent, ("dave", 600, "theirs"), task="order-18")
    deferred(other_agent)
    for unmatched in ("nope", "ran", "theirs"):
        results = DeferredToolResults(approvals={"c1": False, unmatched: False})
        with pytest.raises(UnmatchedAnswer):
            gated.record_denials(results)
    assert approvals() == [] and sent == [("bob", 10)]
    assert states(gate) == {"c1": CallState.AWAITING_APPROVAL, "ran": CallState.SUCCEEDED}
    assert states(gate, "order-18") == {"theirs": CallState.AWAITING_APPROVAL}
    # The same denial recorded twice (a retried request) is one denial.
    once = DeferredToolResults(approvals={"c1": False})
    assert gated.record_denials(once) == 1 and gated.record_denials(once) == 0
    agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=once)
    assert sent == [("bob", 10)] and len(approvals()) == 1
    assert_sound(gate, sent, approvals, TASK, "order-18")


@pytest.mark.parametrize("call_id", HOSTILE, ids=HOSTILE_IDS)
def test_pydantic_ai_hostile_call_ids_are_answered_by_id(
    gate: Gate, approvals: Approvals, call_id: str
) -> None:
    sent: Sent = []
    agent, gated = pydantic_agent(gate, sent, ("carol", 500, call_id), ("dave", 600, "plain"))
    waiting = deferred(agent)
    with pytest.raises(UnmatchedAnswer) as refused:
        gated.record_denials(DeferredToolResults(approvals={call_id + "x": False}))
    assert call_id not in str(refused.value)
    results = DeferredToolResults(approvals={call_id: True, "plain": False},
                                  metadata={call_id: {"args_hash": hash_shown(waiting, call_id)}})
    assert gated.record_denials(results) == 1
    agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=results)
    assert sent == [("carol", 500)]
    assert states(gate) == {call_id: CallState.SUCCEEDED, "plain": CallState.REJECTED}
    assert_sound(gate, sent, approvals)


def test_pydantic_ai_an_approval_racing_a_denial_or_itself_runs_at_most_once(
    gate_on: Gate,
) -> None:
    gate, approvals = gate_on, lambda: ledger_answers.recorded(gate_on)
    sent: Sent = []
    agent, gated = pydantic_agent(gate, sent, ("carol", 500, "c1"))
    waiting = deferred(agent)
    history = waiting.all_messages()
    approve = DeferredToolResults(approvals={"c1": True})
    start = threading.Barrier(3)
    refused: list[BaseException] = []

    def resume() -> None:
        start.wait(10)
        agent.run_sync(message_history=history, deferred_tool_results=approve)

    def deny() -> None:
        start.wait(10)
        try:
            gated.record_denials(DeferredToolResults(approvals={"c1": False}), by="bob")
        except UnmatchedAnswer as exc:  # approved and run first: the denial is refused
            refused.append(exc)

    racers = [threading.Thread(target=f) for f in (resume, resume, deny)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    assert not any(t.is_alive() for t in racers)
    state = states(gate)["c1"]
    assert state in (CallState.SUCCEEDED, CallState.REJECTED)
    assert sent == ([("carol", 500)] if state is CallState.SUCCEEDED else [])
    assert bool(refused) == (state is CallState.SUCCEEDED)
    assert_sound(gate, sent, approvals)


# --------------------------------------------------------- OpenAI Agents SDK


def payer(gate: Gate, sent: Sent, *turns: list[tuple[str, int, str]], task: str = TASK) -> Any:
    """An agent whose model asks, turn by turn, for payments (to, amount, id)."""

    @function_tool
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    asks = [[function_call("send_payment", {"to": to, "amount": amount}, call_id=call_id)
             for to, amount, call_id in calls] for calls in turns]
    model = ScriptedModel([*asks, *([[assistant_message("done")]] * 4)])
    return Agent(name="payer", model=model,
                 tools=gate_tools([send_payment], gate, task_id=task))


def test_agents_sdk_a_standing_approval_runs_no_call_a_person_was_not_shown(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, "shown")], [("mallet", 900, "never-shown")])

    async def scenario() -> Any:
        paused = await Runner.run(agent, "pay")
        (item,) = paused.interruptions
        state = paused.to_state()
        state.approve(item, always_approve=True)  # "and every later call of this tool"
        return await Runner.run(agent, state)

    asyncio.run(scenario())
    assert sent == [] and approvals() == []
    assert states(gate) == {"shown": CallState.AWAITING_APPROVAL,
                            "never-shown": CallState.AWAITING_APPROVAL}
    assert_sound(gate, sent, approvals)


def test_agents_sdk_approves_the_call_named_and_no_other(gate: Gate, approvals: Approvals) -> None:
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, "c1"), ("dave", 700, "c2")])

    async def scenario() -> Any:
        paused = await Runner.run(agent, "pay")
        items = {i.call_id: i for i in paused.interruptions}
        assert set(items) == {"c1", "c2"}
        state = paused.to_state()
        state.approve(items["c2"])
        return await Runner.run(agent, state)

    asyncio.run(scenario())
    assert sent == [("dave", 700)]
    assert states(gate) == {"c1": CallState.AWAITING_APPROVAL, "c2": CallState.SUCCEEDED}
    assert_sound(gate, sent, approvals)


def test_agents_sdk_recorded_answers_carry_the_shown_hash_and_name_a_waiting_call(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, "c1"), ("bob", 10, "ran")])
    theirs = payer(gate, sent, [("dave", 600, "c1")], task="order-18")

    async def scenario() -> Any:
        await Runner.run(theirs, "pay")
        paused = await Runner.run(agent, "pay")
        (item,) = paused.interruptions
        shown = approval_request(gate, item, task_id=TASK)
        assert (shown["call_id"], shown["arguments"]) == ("c1", {"to": "carol", "amount": 500})
        with pytest.raises(AnswerMismatch):
            record_approval(gate, item, task_id=TASK, by="alice", args_hash="f" * 64)
        with pytest.raises(AnswerMismatch):
            record_rejection(gate, item, task_id=TASK, by="alice", args_hash="f" * 64)
        assert record_approval(gate, item, task_id=TASK, by="alice", args_hash=shown["args_hash"])
        # The same approval again (a retried request) is the one standing approval.
        assert record_approval(gate, item, task_id=TASK, by="alice", args_hash=shown["args_hash"])
        state = paused.to_state()
        state.approve(item)
        done = await Runner.run(agent, state)
        with pytest.raises(UnmatchedAnswer):  # it ran: too late to say no
            record_rejection(gate, item, task_id=TASK, by="bob")
        return done

    asyncio.run(scenario())
    assert sent == [("bob", 10), ("carol", 500)]
    assert states(gate) == {"c1": CallState.SUCCEEDED, "ran": CallState.SUCCEEDED}
    assert states(gate, "order-18") == {"c1": CallState.AWAITING_APPROVAL}
    assert [(a["call_id"], a["verdict"], a["decided_by"]) for a in approvals()] == [
        ("c1", "approved", "alice")]
    assert_sound(gate, sent, approvals, TASK, "order-18")


def test_agents_sdk_a_rejection_naming_no_waiting_call_is_refused(
    gate: Gate, approvals: Approvals
) -> None:
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, "c1")])
    elsewhere = payer(gate, sent, [("dave", 600, "theirs"), ("bob", 10, "ran")], task="order-18")

    async def scenario() -> None:
        await Runner.run(agent, "pay")
        (theirs,) = (await Runner.run(elsewhere, "pay")).interruptions
        with pytest.raises(UnmatchedAnswer):  # another task's call
            record_rejection(gate, theirs, task_id=TASK, by="bob")

    asyncio.run(scenario())
    assert approvals() == [] and sent == [("bob", 10)]
    assert states(gate) == {"c1": CallState.AWAITING_APPROVAL}
    assert states(gate, "order-18")["theirs"] is CallState.AWAITING_APPROVAL
    assert_sound(gate, sent, approvals, TASK, "order-18")


@pytest.mark.parametrize("call_id", HOSTILE, ids=HOSTILE_IDS)
def test_agents_sdk_hostile_call_ids_are_answered_by_id(
    gate: Gate, approvals: Approvals, call_id: str
) -> None:
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, call_id), ("dave", 600, "plain")])

    async def scenario() -> None:
        paused = await Runner.run(agent, "pay")
        items = {i.call_id: i for i in paused.interruptions}
        state = paused.to_state()
        state.approve(items[call_id])
        state.reject(items["plain"])
        assert record_rejection(gate, items["plain"], task_id=TASK, by="bob")
        await Runner.run(agent, state)

    asyncio.run(scenario())
    assert sent == [("carol", 500)]
    assert states(gate) == {call_id: CallState.SUCCEEDED, "plain": CallState.REJECTED}
    assert_sound(gate, sent, approvals)


def test_agents_sdk_one_approved_state_resumed_twice_at_once_pays_once(gate_on: Gate) -> None:
    gate, approvals = gate_on, lambda: ledger_answers.recorded(gate_on)
    sent: Sent = []
    agent = payer(gate, sent, [("carol", 500, "c1")])

    async def pause() -> str:
        paused = await Runner.run(agent, "pay")
        (item,) = paused.interruptions
        state = paused.to_state()
        state.approve(item)
        return state.to_string()

    saved = asyncio.run(pause())
    start = threading.Barrier(2)

    def resume() -> None:
        async def run() -> None:
            await Runner.run(agent, await RunState.from_string(agent, saved))

        start.wait(10)
        asyncio.run(run())

    racers = [threading.Thread(target=resume) for _ in range(2)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    assert not any(t.is_alive() for t in racers)
    assert sent == [("carol", 500)]
    assert states(gate) == {"c1": CallState.SUCCEEDED}
    assert_sound(gate, sent, approvals)
