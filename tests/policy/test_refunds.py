"""Running totals count only calls that were authorized and not given back: a call
found ``not_applied`` (or rejected when its claim is re-checked) refunds its charges
in the transaction of that arrow, recorded in its audit entry, and ``audit verify``
still matches the stored charges to the trail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_gate import CallState, Gate, OutcomeUnknown, ToolRegistry
from agent_gate.policy import Principal

POLICY = """\
version: 1
tools:
  pay:
    rules: [{id: pay-ok, effect: allow}]
    limits:
      - {id: pay-total-per-task, sum: amount, max: 100}
      - {id: pay-total-per-principal, sum: amount, max: 100, per: principal, window: 1d}
"""
ANA = Principal(id="ana")


def _tools(ran: list[float], unsure: set[float]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"amount": {"type": "number"}}},
                effect="write")
    def pay(amount: float) -> str:
        if amount in unsure:
            unsure.discard(amount)
            raise OutcomeUnknown("the bank timed out")
        ran.append(amount)
        return "paid"

    return tools


def _pay(gate: Gate, call_id: str, amount: float) -> Any:
    return gate.execute("t", {"call_id": call_id, "name": "pay",
                              "arguments": {"amount": amount}}, principal=ANA)


def test_not_applied_refunds_the_running_totals(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[float] = []
    with Gate(_tools(ran, unsure={80}), db_url, policy=tmp_path / "p.yaml") as gate:
        assert _pay(gate, "c1", 80).state is CallState.IN_DOUBT  # charged: it may have paid
        assert _pay(gate, "c2", 30).state is CallState.REJECTED  # 80 + 30 > 100
        settled = gate.resolve("c1", as_="not_applied", task_id="t", by="ops")
        assert settled.state is CallState.AUTHORIZED
        # the 80 is given back, for the task and for the principal: 30 now fits
        assert _pay(gate, "c3", 30).state is CallState.SUCCEEDED
        assert ran == [30]
        # c1 sent again is re-checked when claimed: 30 + 80 > 100, rejected, not run
        again = _pay(gate, "c1", 80)
        assert again.state is CallState.REJECTED and ran == [30]
        assert "pay-total" in (again.reason or "")
        # the refund is in the trail, in the entry of the arrow that gave it back
        entries = gate.ledger.audit("t")
        refunds = [e for e in entries if "refunds" in (e.detail or {})]
        assert [(e.call_id, e.to_state) for e in refunds] == [("c1", "authorized")]
        assert refunds[0].detail["refunds"] == {
            "pay/sum/amount": "80", "pay/sum/amount@principal/86400s": "80"}
        assert gate.ledger.verify_audit().problem is None


def test_a_refunded_call_run_again_is_charged_again(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[float] = []
    with Gate(_tools(ran, unsure={80}), db_url, policy=tmp_path / "p.yaml") as gate:
        assert _pay(gate, "c1", 80).state is CallState.IN_DOUBT
        gate.resolve("c1", as_="not_applied", task_id="t", by="ops")
        assert _pay(gate, "c1", 80).state is CallState.SUCCEEDED  # fits: nothing else spent
        assert _pay(gate, "c2", 30).state is CallState.REJECTED  # the 80 counts again
        assert ran == [80]
        claims = [e for e in gate.ledger.audit("t")
                  if e.call_id == "c1" and e.to_state == "executing"]
        assert json.dumps(claims[-1].detail["charges"], sort_keys=True) == json.dumps(
            {"pay/sum/amount": "80", "pay/sum/amount@principal/86400s": "80"}, sort_keys=True)
        assert gate.ledger.verify_audit().problem is None
