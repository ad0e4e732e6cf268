"""pydantic-ai behind agent-gate: ``GatedToolset`` around the agent's toolset.

The agent's tools stay pydantic-ai tools; the gate takes each one's schema from
pydantic-ai, and every call the model makes goes through the policy
(``payments_policy.yaml``) and the ledger. A ``FunctionModel`` plays the model, so
this runs offline in about a second (``pip install 'agent-gate[pydantic-ai]'``):

1. a payment of 40 runs; the same run repeated is answered from the ledger;
2. a payment of 500 waits: the run ends with pydantic-ai's ``DeferredToolRequests``;
   approving it the pydantic-ai way (``DeferredToolResults``) records the approval
   in the ledger and pays once;
3. a payment to a blocked vendor never reaches the tool; the model reads why.

Run it: ``python examples/with_pydantic_ai.py [--db URL]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, FunctionToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_gate import Gate, ToolRegistry
from agent_gate.integrations.pydantic_ai import GatedToolset

POLICY = Path(__file__).resolve().parent / "payments_policy.yaml"
TASK = "pydantic-ai-example"
PAID: list[tuple[str, int]] = []

toolset: FunctionToolset[Any] = FunctionToolset()


@toolset.tool_plain
def send_payment(to: str, amount: int) -> str:
    """Pay a vendor from the company account."""
    PAID.append((to, amount))
    return f"paid {amount} to {to}"


def model_paying(to: str, amount: int, call_id: str) -> FunctionModel:
    """Stands in for an LLM: asks for one payment, then reports what the tool said."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].content}")])
        call = ToolCallPart("send_payment", {"to": to, "amount": amount}, tool_call_id=call_id)
        return ModelResponse(parts=[call])

    return FunctionModel(respond)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    db = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='agent-gate-pai-')) / 'ledger.db'}"
    PAID.clear()
    with Gate(ToolRegistry(), db, policy=POLICY, create=True) as gate:
        gated = GatedToolset(toolset, gate, task_id=TASK)

        def agent(model: FunctionModel) -> Agent[None, str | DeferredToolRequests]:
            return Agent(model, toolsets=[gated], output_type=[str, DeferredToolRequests])

        small = agent(model_paying("acme", 40, "call-small"))
        print("1.", small.run_sync("pay acme 40").output)
        print("   again:", small.run_sync("pay acme 40").output, "(from the ledger)")

        large = agent(model_paying("globex", 500, "call-large"))
        waiting = large.run_sync("pay globex 500")
        assert isinstance(waiting.output, DeferredToolRequests)
        print("2. waits for approval:", [c.tool_call_id for c in waiting.output.approvals])
        answer = DeferredToolResults(approvals={"call-large": True},
                                     metadata={"call-large": {"approved_by": "alice"}})
        done = large.run_sync(message_history=waiting.all_messages(),
                              deferred_tool_results=answer)
        print("   approved by alice:", done.output)

        blocked = agent(model_paying("shady-vendor", 10, "call-blocked"))
        print("3.", blocked.run_sync("pay shady-vendor 10").output)

        states = {o.call_id: o.state.value for o in gate.calls(TASK)}
        audit_ok = gate.ledger.verify_audit().ok
    print(f"payments made: {PAID}; ledger: {states}; audit chain verifies: {audit_ok}")
    return {"db": db, "paid": list(PAID), "states": states, "audit_ok": audit_ok}


if __name__ == "__main__":
    main()
