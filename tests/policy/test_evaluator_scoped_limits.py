"""Limits beyond one task: per principal, over all tasks, in a sliding window; race-free."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy, Principal

POLICY = """\
version: 1
tools:
  pay:
    rules: [{id: pay-ok, effect: allow}]
    limits:
      - {id: pay-3-per-principal-per-hour, max_calls: 3, per: principal, window: 1h}
      - {id: pay-total-per-principal-per-day, sum: amount, max: 100, per: principal, window: 1d}
      - {id: pay-1000-a-day-for-everyone, max_calls: 1000, per: all, window: 1d}
"""
ANA = Principal(id="ana")
BOB = Principal(id="bob")


def test_keys_and_hash() -> None:
    policy = Policy.from_text(POLICY, source="p.yaml")
    assert [limit.key for limit in policy.limits("pay")] == [
        "pay/calls@principal/3600s", "pay/sum/amount@principal/86400s", "pay/calls@all/86400s"]
    plain = "version: 1\ntools:\n  t:\n    limits: [{id: x, max_calls: 1}]\n"
    explicit = plain.replace("max_calls: 1}", "max_calls: 1, per: task}")
    assert Policy.from_text(plain).hash == Policy.from_text(explicit).hash
    assert Policy.from_text(plain).limits("t")[0].key == "t/calls"


@pytest.mark.parametrize("window", ["1w", "0s", "h", "1.5h", "400d"])
def test_bad_windows(window: str) -> None:
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text(POLICY.replace("window: 1h", f"window: {window}"), source="p.yaml")
    assert info.value.problems[0].key == "tools.pay.limits[0].window"


ONE_DURATION = """\
version: 1
tools:
  pay:
    rules: [{id: pay-asks, effect: approve, approval: {timeout: "TIMEOUT"}}]
    limits: [{id: pay-hourly, max_calls: 3, window: "WINDOW"}]
"""


@pytest.mark.parametrize(("text", "accepted"), [
    ("90s", True), ("15m", True), ("1d", True), ("366d", True),
    ("\uff11h", False), ("\u0661h", False), ("0000000001h", False),
    ("367d", False), ("0m", False), ("1 h", False), ("+1h", False),
])
def test_a_window_and_an_approval_timeout_are_one_duration(text: str, accepted: bool) -> None:
    """A limit's window and an approval's timeout are one concept, written one way: a
    text accepted for one is accepted for the other. (The window once took any Unicode
    digit, so ``\uff11h`` loaded as an hour there and was refused as a timeout.)"""
    def loads(field: str) -> bool:
        written = ONE_DURATION.replace("TIMEOUT", "1h").replace("WINDOW", "1h")
        written = written.replace(f'{field}: "1h"', f'{field}: "{text}"')
        try:
            Policy.from_text(written, source="p.yaml")
        except PolicyLoadError:
            return False
        return True

    assert (loads("window"), loads("timeout")) == (accepted, accepted)


def _tools(ran: list[Any]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"amount": {"type": "number"}}},
                effect="write")
    def pay(amount: float) -> str:
        ran.append(amount)
        return "paid"

    return tools


def _pay(gate: Gate, task: str, call_id: str, amount: float, who: Principal) -> CallState:
    outcome = gate.execute(task, {"call_id": call_id, "name": "pay",
                                  "arguments": {"amount": amount}}, principal=who)
    return outcome.state


def test_counted_across_the_principals_tasks(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[Any] = []
    with Gate(_tools(ran), db_url, policy=tmp_path / "p.yaml") as gate:
        states = [_pay(gate, f"t{i}", "c1", 10, ANA) for i in range(4)]
        assert states == [CallState.SUCCEEDED] * 3 + [CallState.REJECTED]
        assert "pay-3-per-principal-per-hour" in (gate.ledger.get("t3", "c1").reason or "")
        # another principal has a budget of its own
        assert _pay(gate, "b1", "c1", 10, BOB) is CallState.SUCCEEDED
        # the running total: 70 more would take bob past 100 today
        assert _pay(gate, "b2", "c1", 95, BOB) is CallState.REJECTED
        assert "pay-total-per-principal-per-day" in (gate.ledger.get("b2", "c1").reason or "")
    # the window slides: charges older than an hour no longer count for the rate
    engine = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text(
            "UPDATE quota_charges SET at = :old WHERE counter = 'pay/calls@principal/3600s'"),
            {"old": "2020-01-01 00:00:00"})
    engine.dispose()
    with Gate(_tools(ran), db_url, policy=tmp_path / "p.yaml") as gate:
        assert _pay(gate, "t9", "c1", 10, ANA) is CallState.SUCCEEDED
    assert ran == [10, 10, 10, 10, 10]


@pytest.mark.slow
def test_eight_workers_racing_never_exceed_a_principals_limit(
    db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "p.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[Any] = []
    start = threading.Barrier(8)
    states: list[CallState] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        with Gate(_tools(ran), db_url, policy=tmp_path / "p.yaml") as gate:
            start.wait(timeout=60)
            for round_no in range(2):  # each worker's own tasks: no task lock is shared
                state = _pay(gate, f"w{index}-{round_no}", "c1", 1, ANA)
                with lock:
                    states.append(state)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert len(states) == 16
    assert states.count(CallState.SUCCEEDED) == 3
    assert states.count(CallState.REJECTED) == 13
    assert len(ran) == 3
