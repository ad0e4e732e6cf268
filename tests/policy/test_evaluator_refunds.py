"""Running totals count only calls that were authorized and not given back: a call
found ``not_applied`` (or rejected when its claim is re-checked) refunds its charges
in the transaction of that arrow, recorded in its audit entry, and ``audit verify``
still matches the stored charges to the trail."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

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


@pytest.mark.slow
def test_refunds_racing_new_calls_never_exceed_a_principals_limit(
    db_url: str, tmp_path: Path
) -> None:
    """Three in-doubt calls hold ana's budget of three; eight workers race: three find
    their call not applied (a refund) and send it again, five send new calls in their
    own tasks. Every freed slot is taken exactly once: three succeed, never more."""
    policy = "version: 1\ntools:\n  pay:\n    rules: [{id: pay-ok, effect: allow}]\n" \
             "    limits: [{id: three-per-principal, max_calls: 3, per: principal}]\n"
    (tmp_path / "p.yaml").write_text(policy, encoding="utf-8")
    ran: list[float] = []
    with Gate(_tools(ran, unsure={1, 2, 3}), db_url, policy=tmp_path / "p.yaml") as gate:
        for i in (1, 2, 3):
            assert gate.execute(f"d{i}", {"call_id": "c", "name": "pay", "arguments": {
                "amount": i}}, principal=ANA).state is CallState.IN_DOUBT
    start = threading.Barrier(8)
    states: list[CallState] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        with Gate(_tools(ran, unsure=set()), db_url, policy=tmp_path / "p.yaml") as gate:
            start.wait(timeout=60)
            if index < 3:
                task, amount = f"d{index + 1}", index + 1
                gate.resolve("c", as_="not_applied", task_id=task, by="ops")
            else:
                task, amount = f"n{index}", 10 + index
            state = gate.execute(task, {"call_id": "c", "name": "pay",
                                        "arguments": {"amount": amount}}, principal=ANA).state
            with lock:
                states.append(state)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(s.value for s in states) == ["rejected"] * 5 + ["succeeded"] * 3
    assert len(ran) == 3
    with Gate(ToolRegistry(), db_url) as gate:
        assert gate.ledger.verify_audit().problem is None


@pytest.mark.slow
def test_slots_freed_by_refunds_are_taken_exactly_once_by_racing_new_calls(
    db_url: str, tmp_path: Path
) -> None:
    """Three in-doubt calls hold ana's budget of three. Three operators find them not
    applied (each refund frees a slot) while five workers keep sending new calls in
    tasks of their own, each until it ran one or was refused after every refund had
    committed (a refused one tries again once another refund committed, racing the
    other callers for it). The three freed slots are taken exactly once: three new
    calls run, never four. Sent again, the refunded calls find the slots taken (their claim's
    re-check is charged under the same lock) and run nowhere."""
    policy = "version: 1\ntools:\n  pay:\n    rules: [{id: pay-ok, effect: allow}]\n" \
             "    limits: [{id: three-per-principal, max_calls: 3, per: principal}]\n"
    (tmp_path / "p.yaml").write_text(policy, encoding="utf-8")
    ran: list[float] = []
    with Gate(_tools(ran, unsure={1, 2, 3}), db_url, policy=tmp_path / "p.yaml") as gate:
        for i in (1, 2, 3):
            assert gate.execute(f"d{i}", {"call_id": "c", "name": "pay", "arguments": {
                "amount": i}}, principal=ANA).state is CallState.IN_DOUBT
    ran.clear()
    start = threading.Barrier(8)
    lock = threading.Lock()
    refunds = threading.Condition(lock)
    refunded: list[str] = []
    succeeded: list[str] = []
    errors: list[BaseException] = []

    def operator(index: int) -> None:
        with Gate(_tools(ran, unsure=set()), db_url, policy=tmp_path / "p.yaml") as gate:
            start.wait(timeout=60)
            settled = gate.resolve("c", as_="not_applied", task_id=f"d{index + 1}", by="ops")
            assert settled.state is CallState.AUTHORIZED
            with refunds:
                refunded.append(f"d{index + 1}")
                refunds.notify_all()

    def caller(index: int) -> None:
        with Gate(_tools(ran, unsure=set()), db_url, policy=tmp_path / "p.yaml") as gate:
            start.wait(timeout=60)
            for n in range(8):
                with lock:
                    seen = len(refunded)
                state = gate.execute(f"n{index}", {"call_id": f"c{n}", "name": "pay",
                                                   "arguments": {"amount": 100 + index}},
                                     principal=ANA).state
                if state is CallState.SUCCEEDED:
                    with lock:
                        succeeded.append(f"n{index}/c{n}")
                    return
                assert state is CallState.REJECTED, state
                if seen == 3:  # refused with every slot freed: all are taken
                    return
                with refunds:  # refused: try again once another slot was freed
                    assert refunds.wait_for(lambda seen=seen: len(refunded) > seen, timeout=120)
            raise AssertionError("a caller was refused more often than slots were freed")

    def guarded(work: Any, index: int) -> None:
        try:
            work(index)
        except BaseException as error:  # reported below, the barrier broken
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=guarded, args=(operator, i)) for i in range(3)]
    threads += [threading.Thread(target=guarded, args=(caller, i)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    assert len(succeeded) == 3, succeeded
    assert sorted(ran) == sorted(100 + int(name[1]) for name in succeeded)

    def send_again(index: int) -> None:
        with Gate(_tools(ran, unsure=set()), db_url, policy=tmp_path / "p.yaml") as gate:
            again = gate.execute(f"d{index + 1}", {"call_id": "c", "name": "pay",
                                                   "arguments": {"amount": index + 1}},
                                 principal=ANA)
            assert again.state is CallState.REJECTED, again.state
            assert "three-per-principal" in (again.reason or "")

    again = [threading.Thread(target=guarded, args=(send_again, i)) for i in range(3)]
    for thread in again:
        thread.start()
    for thread in again:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(ran) == 3
    with Gate(ToolRegistry(), db_url) as gate:
        assert gate.ledger.verify_audit().problem is None
        held = sum(gate.ledger.usage(task).get("pay/calls@principal", 0)
                   for task in ("d1", "d2", "d3", "n0", "n1", "n2", "n3", "n4"))
    assert held == 3
