"""The OpenAI Agents SDK behind agent-gate: ``gate_tools`` around the agent's tools.

The tools stay the SDK's function tools; the gate takes each one's schema from the
SDK, decides each call under ``payments_policy.yaml`` and records it in the ledger.
The SDK's own ``ScriptedModel`` plays the model, so this runs offline in a few
seconds (``pip install 'agent-gate[openai-agents]'``):

1. one model turn asks for a payment of 40 and one of 500: the 40 runs, the 500
   surfaces as the SDK's interruption (``result.interruptions``);
2. ``state.approve(item)`` and running the state again records the one approval
   in the ledger and pays 500 once; the same saved state resumed a second time
   pays nothing more;
3. a payment to a blocked vendor never reaches the tool; the model reads why.

Run it: ``python examples/with_openai_agents.py [--db URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_gate import Gate, ToolRegistry
from agent_gate.integrations.openai_agents import gate_tools

POLICY = Path(__file__).resolve().parent / "payments_policy.yaml"
TASK = "openai-agents-example"
PAID: list[tuple[str, int]] = []


@function_tool
def send_payment(to: str, amount: int) -> str:
    """Pay a vendor from the company account."""
    PAID.append((to, amount))
    return f"paid {amount} to {to}"


def agent_asking(gate: Gate, *payments: tuple[str, int, str]) -> Agent[Any]:
    """An agent whose stand-in model asks for ``payments`` in one turn, then is done."""
    calls = [function_call("send_payment", {"to": to, "amount": amount}, call_id=call_id)
             for to, amount, call_id in payments]
    model = ScriptedModel([calls, *([[assistant_message("done")]] * 3)])
    return Agent(name="payer", model=model,
                 tools=gate_tools([send_payment], gate, task_id=TASK))


def outputs(result: Any) -> dict[str, str]:
    return {item.raw_item["call_id"]: str(item.output)
            for item in result.new_items if isinstance(item, ToolCallOutputItem)}


async def scenario(gate: Gate) -> None:
    agent = agent_asking(gate, ("acme", 40, "call-small"), ("globex", 500, "call-large"))
    paused = await Runner.run(agent, "pay acme and globex")
    (item,) = paused.interruptions
    print("1. paid so far:", PAID, "| waits:", item.call_id)
    state = paused.to_state()
    state.approve(item)
    saved = state.to_string()
    done = await Runner.run(agent, state)
    print("2. after approval:", outputs(done))
    await Runner.run(agent, await RunState.from_string(agent, saved))
    print("   the same saved state resumed again; paid:", PAID)
    blocked = await Runner.run(agent_asking(gate, ("shady-vendor", 10, "call-blocked")), "pay")
    print("3.", outputs(blocked))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    args = parser.parse_args(argv)
    db = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='agent-gate-oa-')) / 'ledger.db'}"
    set_tracing_disabled(True)  # offline: no trace exporter to send to
    PAID.clear()
    with Gate(ToolRegistry(), db, policy=POLICY, create=True) as gate:
        asyncio.run(scenario(gate))
        states = {o.call_id: o.state.value for o in gate.calls(TASK)}
        audit_ok = gate.ledger.verify_audit().ok
    print(f"payments made: {PAID}; ledger: {states}; audit chain verifies: {audit_ok}")
    return {"db": db, "paid": list(PAID), "states": states, "audit_ok": audit_ok}


if __name__ == "__main__":
    main()
