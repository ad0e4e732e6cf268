"""Edit then approve through ``agent-gate mcp proxy`` (issue 32): a large payment waits;
a person lowers its amount (the policy marks ``cents`` editable, never the payee); the
client's same call, sent again, runs the edited payment once upstream, and the tool
result the client reads names the arguments it ran with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_harness import POLICY, Setup

from agent_gate import Gate, ToolRegistry
from agent_gate.ledger import Ledger

pytestmark = pytest.mark.slow  # the proxy and the upstream are two interpreters

SEND_PAYMENT = {"type": "object", "properties": {"to": {"type": "string"},
                                                 "cents": {"type": "integer"}},
                "required": ["to", "cents"]}
"""The upstream's schema of send_payment (tests/integrations/mcp_upstream.py)."""


def editable_policy(tmp: Path) -> Path:
    text = POLICY.read_text("utf-8")
    anchor = "      - id: large-payments-need-a-person\n        effect: approve\n"
    assert anchor in text
    path = tmp / "policy.yaml"
    path.write_text(text.replace(anchor, anchor + "        approval: {editable: [cents]}\n"))
    return path


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def test_an_edited_payment_runs_once_as_edited_and_the_client_is_told(tmp_path: Path) -> None:
    setup = Setup(tmp_path, policy=editable_policy(tmp_path))

    def edit(call_id: str) -> None:
        tools = ToolRegistry()
        tools.tool(name="send_payment", schema=SEND_PAYMENT, effect="write")(_send_payment)
        with Gate(tools, setup.db, policy=str(setup.policy)) as gate:
            rec = gate.ledger.get("pay", call_id)
            assert rec is not None
            gate.approve(call_id, by="ana", task_id="pay", args_hash=rec.args_hash,
                         edit={"cents": 1500})

    async def main() -> None:
        async with setup.proxy("--task", "pay", "--approval-wait", "0.2s") as client:
            first = await client.call_tool("send_payment", {"to": "eve", "cents": 2000})
            call_id = (first.meta or {})["agent-gate/call-id"]
            assert first.is_error and (first.meta or {})["agent-gate/state"] == "awaiting_approval"
            await anyio.to_thread.run_sync(lambda: edit(call_id))
            ran = await client.call_tool("send_payment", {"to": "eve", "cents": 2000})
            assert not ran.is_error, text(ran)
            assert "paid, 1 lines" in text(ran)
            note = (ran.meta or {})["agent-gate/edited"]
            assert note["fields"] == ["cents"]
            assert note["arguments"] == {"to": "eve", "cents": 1500}
            told = text(ran).split("agent-gate: ", 1)[1]
            assert json.loads(told)["arguments"] == {"to": "eve", "cents": 1500}

    anyio.run(main)
    assert setup.lines() == ["pay:eve:1500"]
    with Ledger(setup.db) as ledger:
        (rec,) = ledger.calls("pay")
        assert rec.state.value == "succeeded" and rec.edited == ("cents",)


def _send_payment(to: str, cents: int) -> str:
    raise AssertionError("the proxy runs it upstream; this registry lends its schema only")
