"""The backtest counts only the calls whose charges the live gate still holds: a call
found not applied (its in-doubt write settled ``not_applied`` by a person or a
reconcile hook) was refunded, and until it runs again it counts toward no limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate import CallState, Gate, OutcomeUnknown, ToolRegistry
from agent_gate.cli import main
from agent_gate.policy import Principal

LIVE = """\
version: 1
tools:
  pay:
    rules: [{id: pay-ok, effect: allow}]
"""
ANA = Principal(id="ana")


def _tools(unsure: set[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"ref": {"type": "string"}}},
                effect="write")
    def pay(ref: str) -> str:
        if ref in unsure:
            raise OutcomeUnknown("the bank timed out")
        return "paid"

    return tools


def _pay(gate: Gate, task: str, call_id: str) -> CallState:
    return gate.execute(task, {"call_id": call_id, "name": "pay",
                               "arguments": {"ref": call_id}}, principal=ANA).state


@pytest.mark.parametrize("limit", [
    "{id: one-per-task, max_calls: 1}",
    "{id: one-per-principal, max_calls: 1, per: principal}",
    "{id: one-an-hour, max_calls: 1, per: principal, window: 1h}",
])
def test_a_call_found_not_applied_counts_toward_no_limit(
    db_url: str, tmp_path: Path, limit: str
) -> None:
    """Task t: c1's write is in doubt, a person finds it not applied (refunded, left
    ``authorized``), then c2 succeeds. Under a draft allowing one pay, c2 is still
    allowed: c1 holds no charge. Then c3, allowed live, is the one the draft denies."""
    (tmp_path / "live.yaml").write_text(LIVE, encoding="utf-8")
    (tmp_path / "draft.yaml").write_text(LIVE + f"    limits:\n      - {limit}\n",
                                         encoding="utf-8")
    with Gate(_tools({"c1"}), db_url, policy=tmp_path / "live.yaml") as gate:
        assert _pay(gate, "t", "c1") is CallState.IN_DOUBT
        settled = gate.resolve("c1", as_="not_applied", task_id="t", by="ops")
        assert settled.state is CallState.AUTHORIZED
        assert _pay(gate, "t", "c2") is CallState.SUCCEEDED
        assert _pay(gate, "t", "c3") is CallState.SUCCEEDED
    result = CliRunner().invoke(main, ["policy", "backtest", str(tmp_path / "draft.yaml"),
                                       "--db", db_url, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["judged"] == 3
    moved = [(c["call_id"], t["before"], t["after"])
             for t in report["transitions"] for c in t["calls"]]
    assert moved == [("c3", "allow", "deny")]
