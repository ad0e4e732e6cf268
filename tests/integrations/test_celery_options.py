"""What ``gated_task`` refuses before any worker runs: options that would lose a task
or leave an in-doubt call with nobody to ask. And a task run eagerly in this process
(Celery's ``apply``) still goes through the gate under its stable key."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery
from support.engine_tools import make_tools

from agent_gate import Gate, GateUsageError
from agent_gate.integrations.celery import TaskCalls, gated_task


@pytest.fixture
def app() -> Celery:
    return Celery("agent_gate_options_test", broker="memory://")


@pytest.mark.parametrize("late", ["acks_late", "reject_on_worker_lost"])
def test_a_gated_task_keeps_its_late_acknowledgement(app: Celery, late: str) -> None:
    with pytest.raises(GateUsageError, match=late):
        gated_task(app, gate=lambda: None, **{late: False})  # type: ignore[arg-type,return-value]


def test_reconcile_needs_a_function(app: Celery) -> None:
    with pytest.raises(GateUsageError, match="reconcile function"):
        gated_task(app, gate=lambda: None, on_in_doubt="reconcile")  # type: ignore[arg-type,return-value]


def test_the_same_key_sent_twice_pays_once(
    app: Celery, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sends of the same business operation (two Celery task ids, one key): one
    payment; the second task reads the first's outcome."""
    monkeypatch.setenv("AG_OUTBOX", str(tmp_path / "outbox"))
    with Gate(make_tools(), sqlite_url) as gate:

        @gated_task(app, gate=gate, key=lambda order: f"order-{order}")
        def pay(calls: TaskCalls, order: str) -> list[object]:
            outcome = calls.execute({"name": "send_payment",
                                     "arguments": {"to": "alice", "amount": 5}})
            return [outcome.task_id, outcome.call_id, outcome.state.value, outcome.replayed]

        first = pay.apply(args=["o9"]).get()
        second = pay.apply(args=["o9"]).get()
    assert first == ["order-o9", "call-1", "succeeded", False]
    assert second == ["order-o9", "call-1", "succeeded", True]
    assert len((tmp_path / "outbox").read_text().splitlines()) == 1


def test_on_waiting_return_hands_the_waiting_call_to_the_body(
    app: Celery, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AG_OUTBOX", str(tmp_path / "outbox"))
    policy = Path(__file__).with_name("engines_policy.yaml")
    with Gate(make_tools(), sqlite_url, policy=policy) as gate:

        @gated_task(app, gate=gate, on_waiting="return")
        def pay_large(calls: TaskCalls) -> list[object]:
            outcome = calls.execute({"name": "send_payment",
                                     "arguments": {"to": "alice", "amount": 150}})
            return [outcome.state.value, outcome.code]

        assert pay_large.apply(task_id="t-large").get() == ["awaiting_approval",
                                                            "awaiting_approval"]
        assert [o.call_id for o in gate.pending("t-large")] == ["call-1"]  # Celery's id
    assert not (tmp_path / "outbox").exists()
