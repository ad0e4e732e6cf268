"""``GatedSteps`` in this process's own DBOS application: what a workflow names a call,
and what it refuses outside a workflow."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbos import DBOS, SetWorkflowID
from support.engine_tools import make_tools

from agent_gate import CallState, Gate, GateUsageError
from agent_gate.integrations.dbos import CallInDoubt, GatedSteps
from agent_gate.integrations.engines import outcome_from, outcome_record


@pytest.fixture
def steps(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedSteps]:
    monkeypatch.setenv("AG_OUTBOX", str(tmp_path / "outbox"))
    gate = Gate(make_tools(), sqlite_url)
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
