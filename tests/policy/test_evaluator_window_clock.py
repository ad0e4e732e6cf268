"""A sliding window is measured by the database's clock, as leases and approvals
are: a worker whose clock runs behind or ahead counts the same charges in it as
every other worker, and neither can pass the limit.

A worker's skewed clock cannot be made for real here (the host's clock is shared
by every process), so the test moves the clock the agent-gate modules read
(``datetime.now`` in every ``agent_gate`` module that imported ``datetime``): that
is every place a worker's clock can reach the ledger from."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.policy import Principal

POLICY = """\
version: 1
tools:
  pay:
    rules: [{id: pay-ok, effect: allow}]
    limits:
      - {id: two-an-hour, max_calls: 2, per: principal, window: 1h}
"""
ANA = Principal(id="ana")


@contextmanager
def worker_clock(monkeypatch: pytest.MonkeyPatch, skew: timedelta) -> Iterator[None]:
    """Every agent-gate module's ``datetime.now`` runs ``skew`` off the host's."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Any:
            return datetime.now(tz) + skew

    with monkeypatch.context() as patch:
        for name, module in list(sys.modules.items()):
            if name.startswith("agent_gate") and getattr(module, "datetime", None) is datetime:
                patch.setattr(module, "datetime", Skewed)
        yield


def _tools(ran: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                effect="write")
    def pay(n: int) -> str:
        ran.append(str(n))
        return "paid"

    return tools


def _pay(gate: Gate, task: str, n: int) -> CallState:
    return gate.execute(task, {"call_id": "c", "name": "pay", "arguments": {"n": n}},
                        principal=ANA).state


@pytest.mark.parametrize("skew_hours", [-2, 2])
def test_a_worker_with_a_skewed_clock_cannot_pass_a_windowed_limit(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skew_hours: int
) -> None:
    """Two calls of ana's two an hour, then a third: whichever of two workers (one
    with a clock two hours off) made which, the third is rejected."""
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[str] = []
    skew = timedelta(hours=skew_hours)
    # behind: the skewed worker's charges would look two hours old to a true clock;
    # ahead: the skewed worker's window would start after every true charge
    first, second = (skew, timedelta(0)) if skew_hours < 0 else (timedelta(0), skew)
    with worker_clock(monkeypatch, first), Gate(_tools(ran), db_url,
                                                policy=tmp_path / "p.yaml") as gate:
        assert _pay(gate, "t1", 1) is CallState.SUCCEEDED
        assert _pay(gate, "t2", 2) is CallState.SUCCEEDED
    with worker_clock(monkeypatch, second), Gate(_tools(ran), db_url,
                                                 policy=tmp_path / "p.yaml") as gate:
        third = gate.execute("t3", {"call_id": "c", "name": "pay", "arguments": {"n": 3}},
                             principal=ANA)
    assert third.state is CallState.REJECTED, third.reason
    assert "two-an-hour" in (third.reason or "")
    assert ran == ["1", "2"]
    # the charges carry the database's time, whatever the worker's clock said
    engine = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    age = ("extract(epoch FROM clock_timestamp() - at)" if engine.dialect.name == "postgresql"
           else "(julianday('now') - julianday(at)) * 86400")
    with engine.connect() as conn:
        ages = conn.execute(sqlalchemy.text(f"SELECT {age} FROM quota_charges")).scalars().all()
    engine.dispose()
    assert len(ages) == 2 and all(0 <= float(a) < 600 for a in ages), ages
