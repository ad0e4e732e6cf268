"""Per-task quotas: counted in the ledger, in the transaction that authorizes the call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from shared_fixtures import EXAMPLE_POLICY, effect_lines
from support import WORKERS
from waiting import start_together

from agent_gate import CallState, Gate, OutcomeUnknown, ToolRegistry
from agent_gate.policy import Policy, Principal

WORKER = WORKERS / "quota_worker.py"

QUOTA_POLICY = """\
version: 1
tools:
  refund:
    effect: write
    idempotency: key
    rules:
      - id: refund-up-to-500
        effect: allow
        when:
          - arg: amount
            number: {gt: 0, max: 500}
    limits:
      - id: refund-total
        sum: amount
        max: 1000
        reason: At most 1000 refunded per task.
      - id: refund-count
        max_calls: 20
"""


def refund(call_id: str, amount: float) -> dict[str, Any]:
    return {"call_id": call_id, "name": "refund",
            "arguments": {"order_id": "ORD-000001", "amount": amount}}


def test_sums_and_counts_are_charged_when_authorized_and_never_refunded(db_url: str) -> None:
    tools = ToolRegistry()
    ran: list[float] = []

    @tools.tool(schema={"type": "object", "properties": {"order_id": {"type": "string"},
                                                         "amount": {"type": "number"}}},
                effect="write", idempotency="none")
    def refund_tool(order_id: str, amount: float) -> str:
        ran.append(amount)
        if amount == 300:
            raise RuntimeError("downstream said no")
        if amount == 200:
            raise OutcomeUnknown("timed out after sending")
        return "ok"

    policy = Policy.from_text(QUOTA_POLICY.replace("  refund:", "  refund_tool:"))
    with Gate(tools, db_url, policy=policy) as gate:

        def call(call_id: str, amount: float) -> Any:
            return gate.execute("t", {"call_id": call_id, "name": "refund_tool",
                                      "arguments": {"order_id": "ORD-1", "amount": amount}})

        assert call("a", 400).state is CallState.SUCCEEDED
        assert call("b", 300).state is CallState.FAILED  # failed: still counts
        assert call("c", 200).state is CallState.IN_DOUBT  # in doubt: still counts
        assert call("d", 900).state is CallState.REJECTED  # denied by a rule: not counted
        over = call("e", 150)  # 900 used + 150 > 1000
        assert over.state is CallState.REJECTED and "refund-total" in (over.reason or "")
        assert call("f", 100).state is CallState.SUCCEEDED  # exactly 1000
        assert call("a", 400).replayed  # a replay is not charged again
        assert gate.ledger.usage("t") == {"refund_tool/calls": 4, "refund_tool/sum/amount": 1000}
        assert gate.execute("other", {"call_id": "a", "name": "refund_tool", "arguments": {
            "order_id": "ORD-1", "amount": 500}}).state is CallState.SUCCEEDED  # per task
        rec = gate.ledger.get("t", "e")
        assert rec is not None and rec.rule_ids == ("refund-total",)
        assert rec.policy_hash == policy.hash
    assert ran == [400, 300, 200, 100, 500]


def test_the_example_policy_asks_a_person_after_five_refunds(
    db_url: str, support_tools: ModuleType, effects_file: Path, seal_key_env: str
) -> None:
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="agent", roles={"support"})) as gate:
        states = [gate.execute("t", refund(f"r{i}", 10)).state for i in range(6)]
        assert states == [CallState.SUCCEEDED] * 5 + [CallState.AWAITING_APPROVAL]
        waiting = gate.ledger.get("t", "r5")
        assert waiting is not None and waiting.rule_ids == ("refund-count-per-task",)
        assert gate.ledger.usage("t") == {"refund/calls": 5, "refund/sum/amount": 50}
    assert len(effect_lines(effects_file)) == 5


@pytest.mark.slow
@pytest.mark.parametrize("workers", [4])
def test_quota_is_never_exceeded_by_racing_processes(
    db_url: str, support_tools: ModuleType, effects_file: Path, tmp_path: Path, workers: int
) -> None:
    policy_file = tmp_path / "quota.yaml"
    policy_file.write_text(QUOTA_POLICY, encoding="utf-8")
    Gate(support_tools.tools, db_url).close()  # create the schema before the race
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), db_url, str(policy_file), str(go), "shared",
             f"w{w}", "6", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for w in range(workers)
    ]
    start_together(go, procs)
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        outcomes += [json.loads(line) for line in out.splitlines()]
    states = Counter(o["state"] for o in outcomes)
    # 4 workers x 6 refunds of 100 against a 1000 budget: exactly 10 run, 14 are refused.
    assert states == {"succeeded": 10, "rejected": 14}
    assert len(effect_lines(effects_file)) == 10
    with Gate(support_tools.tools, db_url) as gate:
        assert gate.ledger.usage("shared") == {"refund/calls": 10, "refund/sum/amount": 1000}
        refused = [c for c in gate.ledger.calls("shared") if c.state is CallState.REJECTED]
        assert all(c.rule_ids == ("refund-total",) for c in refused)
        assert gate.ledger.verify_audit().ok
