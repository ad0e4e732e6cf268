"""The backtest counts limits beyond one task (``per: principal``, ``per: all``) and
windowed ones as the live gate does: over the principal's (or every) task, within
the window, from the calls that arrived before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy

from agent_gate import Gate, ToolRegistry
from agent_gate.gate.backtest import backtest
from agent_gate.policy import Policy, Principal, Verdict

LIVE = """\
version: 1
tools:
  pay:
    rules: [{id: pay-ok, effect: allow}]
"""
ANA = Principal(id="ana")
BOB = Principal(id="bob")


def _tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"amount": {"type": "number"}}},
                effect="write")
    def pay(amount: float) -> str:
        return "paid"

    return tools


def _ledger(db_url: str, tmp_path: Path) -> None:
    """Ana pays in tasks a1, a2, a3 (one call each), then bob in b1: all allowed live."""
    (tmp_path / "live.yaml").write_text(LIVE, encoding="utf-8")
    with Gate(_tools(), db_url, policy=tmp_path / "live.yaml") as gate:
        for task, who in (("a1", ANA), ("a2", ANA), ("b1", BOB), ("a3", ANA)):
            gate.execute(task, {"call_id": "c1", "name": "pay", "arguments": {"amount": 40}},
                         principal=who)


def _draft(limit: str) -> Policy:
    return Policy.from_text(LIVE + f"    limits:\n      - {limit}\n", source="draft.yaml")


def _changed(report: object) -> list[tuple[str, str, str]]:
    return sorted((c.call.task_id, c.before.value, c.after.value)
                  for c in report.changes)  # type: ignore[attr-defined]


def test_per_principal_and_per_all_count_across_tasks(db_url: str, tmp_path: Path) -> None:
    _ledger(db_url, tmp_path)
    per_principal = backtest(
        _draft("{id: two-per-principal, max_calls: 2, per: principal}"), db_url)
    # ana's third payment (in her third task) goes over; bob has a budget of his own
    assert _changed(per_principal) == [("a3", "allow", "deny")]
    assert per_principal.changes[0].after_rules == ("two-per-principal",)
    total = backtest(_draft("{id: eighty-per-principal, sum: amount, max: 100, "
                            "per: principal}"), db_url)
    assert _changed(total) == [("a3", "allow", "deny")]  # 40 + 40 + 40 > 100
    everyone = backtest(_draft("{id: three-in-all, max_calls: 3, per: all}"), db_url)
    assert _changed(everyone) == [("a3", "allow", "deny")]  # the 4th call of all, by arrival
    assert {c.after for c in everyone.changes} == {Verdict.DENY}


def test_a_window_counts_only_the_calls_within_it(db_url: str, tmp_path: Path) -> None:
    _ledger(db_url, tmp_path)
    engine = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:  # ana's first payment was two hours ago
        conn.execute(sqlalchemy.text("UPDATE tool_calls SET created_at = :at WHERE task_id = 'a1'"),
                     {"at": datetime.now(UTC) - timedelta(hours=2)})
    engine.dispose()
    hourly = _draft("{id: two-per-principal-an-hour, max_calls: 2, per: principal, window: 1h}")
    assert _changed(backtest(hourly, db_url)) == []
    daily = _draft("{id: two-per-principal-a-day, max_calls: 2, per: principal, window: 1d}")
    assert _changed(backtest(daily, db_url)) == [("a3", "allow", "deny")]
