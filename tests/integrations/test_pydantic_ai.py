"""pydantic-ai behind a gate, with pydantic-ai's own ``FunctionModel``: no network.

Side effects are counted in ``sent``, outside the ledger; the ledger is a real
SQLite file. What a user would check: a write runs once however often the run is
repeated or resumed, a denied call never reaches the tool and the model reads why
without the policy's text, an approval given the pydantic-ai way runs the call once
and is the one approval in the ledger, and the audit chain verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_gate import Gate
from agent_gate.integrations.pydantic_ai import GatedToolset
from agent_gate.ledger.states import CallState

TASK = "order-17"


def payments(sent: list[tuple[str, int]]) -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def send_payment(to: str, amount: int) -> str:
        """Pay someone."""
        sent.append((to, amount))
        return f"paid {amount} to {to}"

    return toolset


def one_call(to: str, amount: int, call_id: str = "call-1") -> FunctionModel:
    """A model that asks for one payment, then answers with what the tool said."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].content}")])
        args = {"to": to, "amount": amount}
        return ModelResponse(parts=[ToolCallPart("send_payment", args, tool_call_id=call_id)])

    return FunctionModel(respond)


def agent_for(gate: Gate, sent: list[tuple[str, int]], model: FunctionModel) -> Agent[None, Any]:
    gated = GatedToolset(payments(sent), gate, task_id=TASK)
    return Agent(model, toolsets=[gated], output_type=[str, DeferredToolRequests])


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def test_a_write_runs_once_across_a_repeated_run_and_a_rerun_of_its_history(
    gate: Gate,
) -> None:
    sent: list[tuple[str, int]] = []
    agent = agent_for(gate, sent, one_call("bob", 10))
    first = agent.run_sync("pay bob")
    assert first.output == "tool said: paid 10 to bob"
    again = agent.run_sync("pay bob")  # the same response (same call id) seen again
    assert again.output == "tool said: paid 10 to bob"
    # The process died after the tool ran, before the result reached the model: the
    # run is resumed from the history that ends with the model's tool call.
    history = first.all_messages()
    first_response = next(i for i, m in enumerate(history) if isinstance(m, ModelResponse))
    upto_call = history[: first_response + 1]
    resumed = agent.run_sync(message_history=upto_call)
    assert resumed.output == "tool said: paid 10 to bob"
    assert sent == [("bob", 10)]
    (outcome,) = gate.calls(TASK)
    assert (outcome.call_id, outcome.state, outcome.attempt) == ("call-1", CallState.SUCCEEDED, 1)
    assert gate.tools["send_payment"].spec.schema["required"] == ["to", "amount"]
    assert gate.ledger.verify_audit().ok


def test_a_denied_call_never_reaches_the_tool_and_the_model_reads_a_stable_reason(
    gate: Gate,
) -> None:
    sent: list[tuple[str, int]] = []
    result = agent_for(gate, sent, one_call("mallory", 5)).run_sync("pay mallory")
    assert sent == []
    (part,) = tool_returns(result.all_messages())
    assert part.outcome == "failed"
    text = str(part.content)
    assert '"reason_id": "policy_denied"' in text and '"executed": false' in text
    assert "SECRET-RULE-TEXT" not in text and "no-payments-to-mallory" not in text
    assert gate.calls(TASK)[0].state is CallState.REJECTED
    assert gate.ledger.verify_audit().ok


def test_an_approval_given_the_pydantic_ai_way_runs_the_call_once(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]], bound: Callable[..., bool]
) -> None:
    sent: list[tuple[str, int]] = []
    agent = agent_for(gate, sent, one_call("carol", 500))
    waiting = agent.run_sync("pay carol 500")
    assert isinstance(waiting.output, DeferredToolRequests)
    (asked,) = waiting.output.approvals
    assert asked.tool_call_id == "call-1"
    assert waiting.output.metadata["call-1"]["agent_gate"]["reason_id"] == "awaiting_approval"
    assert sent == [] and gate.calls(TASK)[0].state is CallState.AWAITING_APPROVAL

    answer = DeferredToolResults(approvals={"call-1": True},
                                 metadata={"call-1": {"approved_by": "alice"}})
    history = waiting.all_messages()
    done = agent.run_sync(message_history=history, deferred_tool_results=answer)
    assert done.output == "tool said: paid 500 to carol"
    # The same approval handed in again (a retried request) runs nothing more.
    again = agent.run_sync(message_history=history, deferred_tool_results=answer)
    assert again.output == "tool said: paid 500 to carol"
    assert sent == [("carol", 500)]

    (approval,) = approvals()
    assert approval["verdict"] == "approved" and approval["decided_by"] == "alice"
    assert approval["consumed"] and bound(TASK, approval)
    assert gate.calls(TASK)[0].state is CallState.SUCCEEDED
    assert gate.ledger.verify_audit().ok


def test_a_denial_given_the_pydantic_ai_way_is_recorded_and_runs_nothing(
    gate: Gate, approvals: Callable[[], list[dict[str, Any]]]
) -> None:
    sent: list[tuple[str, int]] = []
    gated = GatedToolset(payments(sent), gate, task_id=TASK)
    agent = Agent(one_call("carol", 500), toolsets=[gated], output_type=[str, DeferredToolRequests])
    waiting = agent.run_sync("pay carol 500")
    answer = DeferredToolResults(approvals={"call-1": ToolDenied("not today")})
    assert gated.record_denials(answer, by="bob") == 1
    done = agent.run_sync(message_history=waiting.all_messages(), deferred_tool_results=answer)
    assert done.output == "tool said: not today"
    assert sent == []
    assert gate.calls(TASK)[0].state is CallState.REJECTED
    assert [(a["verdict"], a["decided_by"]) for a in approvals()] == [("denied", "bob")]
    assert gate.ledger.verify_audit().ok


def test_an_approver_the_policy_refuses_leaves_the_call_waiting(
    tmp_path: Path, db_path: Path, approvals: Callable[[], list[dict[str, Any]]]
) -> None:
    policy = tmp_path / "policy.yaml"
    base = (Path(__file__).with_name("policy.yaml")).read_text(encoding="utf-8")
    policy.write_text(base + "approvers:\n  ids: [alice]\n", encoding="utf-8")
    from agent_gate import ToolRegistry

    sent: list[tuple[str, int]] = []
    with Gate(ToolRegistry(), f"sqlite:///{db_path}", policy=policy, create=True) as gate:
        agent = agent_for(gate, sent, one_call("carol", 500))
        waiting = agent.run_sync("pay carol 500")
        answer = DeferredToolResults(approvals={"call-1": True},
                                     metadata={"call-1": {"approved_by": "mallory"}})
        done = agent.run_sync(message_history=waiting.all_messages(),
                              deferred_tool_results=answer)
        assert '"reason_id": "approval_refused"' in done.output
        assert sent == [] and approvals() == []
        assert gate.calls(TASK)[0].state is CallState.AWAITING_APPROVAL
