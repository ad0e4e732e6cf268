"""``GatedSteps`` in this process's own DBOS application: what a workflow names a call,
and what it refuses outside a workflow."""

from __future__ import annotations

import asyncio
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbos import DBOS, SetWorkflowID
from support.engine_tools import make_tools
from waiting import wait_until

from agent_gate import CallState, Gate, GateUsageError
from agent_gate.integrations.dbos import CallInDoubt, GatedSteps, wake
from agent_gate.integrations.engines import outcome_from, outcome_record

POLICY = Path(__file__).with_name("engines_policy.yaml")
LARGE = {"name": "send_payment", "arguments": {"to": "alice", "amount": 150}}


@pytest.fixture
def steps(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedSteps]:
    monkeypatch.setenv("AG_OUTBOX", str(tmp_path / "outbox"))
    gate = Gate(make_tools(), sqlite_url, policy=POLICY)
    DBOS(config={"name": "agent-gate-inprocess", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}"})
    try:
        yield GatedSteps(gate)
    finally:
        DBOS.destroy(destroy_registry=False)
        gate.close()


def test_a_call_is_named_by_its_own_id_or_its_step(steps: GatedSteps, tmp_path: Path) -> None:
    @DBOS.workflow(name="two_payments")
    def two_payments() -> list[str]:
        first = steps.execute({"name": "send_payment", "arguments": {"to": "a", "amount": 1}})
        second = steps.execute({"call_id": "model-call-7", "name": "send_payment",
                                "arguments": {"to": "b", "amount": 2}})
        return [first.call_id, second.call_id, first.task_id, second.state.value]

    DBOS.launch()
    with SetWorkflowID("wf-named"):
        assert two_payments() == ["dbos-step-1", "model-call-7", "wf-named", "succeeded"]
    with SetWorkflowID("wf-named"):  # the same workflow id again: DBOS's record answers
        assert two_payments()[:2] == ["dbos-step-1", "model-call-7"]
    assert len((tmp_path / "outbox").read_text().splitlines()) == 2
    assert [c.state for c in steps.gate.calls("wf-named")] == [CallState.SUCCEEDED] * 2


def test_outside_a_workflow_it_refuses(steps: GatedSteps) -> None:
    DBOS.launch()
    with pytest.raises(GateUsageError, match="inside a DBOS workflow"):
        steps.execute({"name": "send_payment", "arguments": {"to": "a", "amount": 1}})
    assert not os.path.exists(os.environ["AG_OUTBOX"])


def test_what_an_engine_stores_round_trips(steps: GatedSteps) -> None:
    error = pickle.loads(pickle.dumps(CallInDoubt("task-1", "call-1", "owner_dead")))
    assert (error.task_id, error.call_id, error.code) == ("task-1", "call-1", "owner_dead")
    assert str(error) == ("call call-1 of task task-1 is in doubt (owner_dead): "
                          "it may have run, so it is not sent again")
    outcome = steps.gate.execute("t", {"call_id": "c", "name": "send_payment",
                                       "arguments": {"to": "a", "amount": 3}})
    back = outcome_from(outcome_record(outcome))
    assert back == outcome and back.result == {"paid": 3, "to": "a"}


def _waiting(gate: Gate, task_id: str) -> str:
    def found() -> str | None:
        return next((o.call_id for o in gate.pending(task_id)), None)

    return wait_until(found, what="the call to wait for a person")


def test_an_async_workflow_is_woken_when_the_answer_is_in(
    steps: GatedSteps, tmp_path: Path
) -> None:
    """The waits are five minutes long: only ``wake`` lets the workflow see the approval
    within the test's deadline."""
    waiting = GatedSteps(steps.gate, poll_min=300, poll_max=300)

    @DBOS.workflow(name="apay")
    async def apay() -> dict[str, object]:
        return outcome_record(await waiting.aexecute(LARGE))

    DBOS.launch()

    async def scenario() -> dict[str, object]:
        with SetWorkflowID("wf-async"):
            handle = await DBOS.start_workflow_async(apay)
        call_id = await asyncio.to_thread(_waiting, steps.gate, "wf-async")
        await asyncio.to_thread(steps.gate.approve, call_id, by="alice", task_id="wf-async")
        await asyncio.to_thread(wake, "wf-async", call_id)
        return await asyncio.wait_for(handle.get_result(), timeout=60)

    record = asyncio.run(scenario())
    assert record["state"] == "succeeded" and record["call_id"] == "dbos-step-1"
    assert len((tmp_path / "outbox").read_text().splitlines()) == 1


def test_a_wait_with_a_timeout_returns_the_call_still_waiting(steps: GatedSteps) -> None:
    patient = GatedSteps(steps.gate, approval_timeout=0.3, poll_max=0.2)

    @DBOS.workflow(name="pay_or_give_up")
    def pay_or_give_up() -> str:
        return patient.execute(LARGE).state.value

    DBOS.launch()
    with SetWorkflowID("wf-timeout"):
        assert pay_or_give_up() == "awaiting_approval"
    assert not os.path.exists(os.environ["AG_OUTBOX"])
    with pytest.raises(GateUsageError, match="poll_min"):
        GatedSteps(steps.gate, poll_min=2, poll_max=1)
