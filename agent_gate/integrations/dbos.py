"""DBOS workflows behind a gate: each gated call is a DBOS step (``pip install
'agent-gate[engines]'``).

    steps = GatedSteps(gate)

    @DBOS.workflow()
    def refund(order: str) -> str:
        outcome = steps.execute({"name": "refund", "arguments": {"order": order}})
        return outcome.result

DBOS runs a step at least once: a workflow recovered after a crash runs again every
step that had not recorded its output. Inside the step the gate decides instead, keyed
by the workflow id (the gate's task id) and the call's identity (the model's
``call_id`` when the call carries one, else ``dbos-step-N`` after the step's DBOS
function id, which a recovered workflow gives the same call again):

- a call that finished returns its recorded outcome (DBOS replays the step's output;
  a crash between the gate's commit and DBOS's finds the outcome in the ledger);
- a call whose process died while its tool ran is *in doubt*: unless the tool's
  reconcile hook settles it or the tool is retry-safe, the step raises ``CallInDoubt``,
  which DBOS records as the step's error (never retried: the step is declared without
  retries) and a recovered workflow sees again; the workflow may catch it;
- a call the policy sends to a person suspends the workflow on ``DBOS.recv`` until
  a person answers (``agent-gate approve``/``deny``, the API, the inbox, ``Gate.approve``).

How the answer reaches the workflow: the ledger is where every one of those paths
writes it, so the workflow waits on ``DBOS.recv(answer_topic(call_id))`` for slices
that grow from ``poll_min`` to ``poll_max`` seconds and, after each, reads the answer
from the ledger in a step of its own (recorded, so a recovered workflow replays the
reads it made). No approval path needs to know DBOS, no relay thread can lose an
answer, and an application that answers in process can wake the workflow at once
with ``wake(workflow_id, call_id)`` (a message whose content is never trusted: the
ledger is read anyway). The waits, with their durations, are DBOS's own durable
sleeps: a recovered workflow waits only what was left.

Exactly once, for a tool declared ``transactional=True`` when DBOS has a datasource
on the ledger's own PostgreSQL database (``GatedSteps(gate, datasource=ds)``): its
call runs as that datasource's transaction (``SQLAlchemyDatasource.run_tx_step``),
which DBOS checks for a recorded output first and records its output in before it
commits. The gate writes the tool's writes and the call's outcome into that same
transaction (``joining``), so the tool's rows, the ledger's ``succeeded`` and DBOS's
record of the step commit together or not at all: a process killed before the commit
leaves none of them (the ledger holds the call ``executing`` under a dead owner, which
the gate knows it may run again: nothing was written), after it all three, and DBOS's
recovery replays the step without calling the gate. The transaction runs at READ
COMMITTED: the gate commits the call's claim on its own connection before the tool
runs, and a snapshot taken earlier would refuse the outcome's update. Other tools
keep the plain step.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS, SQLAlchemyDatasource

from agent_gate.errors import GateUsageError, NotAwaitingApproval
from agent_gate.gate import Gate, Outcome
from agent_gate.gate.transactional import joining
from agent_gate.gate.waiting import AnswerStatus
from agent_gate.integrations.engines import (
    CallInDoubt,
    CallLike,
    aexecute_when_free,
    call_mapping,
    execute_when_free,
    outcome_from,
    outcome_record,
)
from agent_gate.ledger.states import CallState

__all__ = ["POLL_MIN", "CallInDoubt", "GatedSteps", "answer_topic", "wake"]

POLL_MIN = 0.1
"""Seconds of the first wait for a person's answer by default; each next one doubles."""

_STEP_PREFIX = "dbos-step-"


def answer_topic(call_id: str) -> str:
    """The ``DBOS.recv`` topic a workflow waits on for the answer to ``call_id``."""
    return f"agent_gate.answer:{call_id}"


def wake(workflow_id: str, call_id: str) -> None:
    """Wake a workflow that waits for the answer to ``call_id`` (after the answer is
    in the ledger); it reads the answer from the ledger, never from this message."""
    DBOS.send(workflow_id, "answered", topic=answer_topic(call_id))


class GatedSteps:
    """Runs calls through ``gate`` as DBOS steps of the workflow that calls ``execute``.

    ``approval_timeout``: seconds a workflow waits for a person before ``execute``
    returns the call still ``awaiting_approval`` (None: as long as it takes).
    ``poll_min``, ``poll_max``: the first and the longest single wait before the
    ledger is read again (each wait doubles; ``wake`` ends one at once).
    ``patience``: seconds to wait for a call another live worker runs (the same step
    running twice, in two processes) before its ``in_progress`` outcome is returned.
    ``datasource``: a DBOS datasource on the ledger's own database; a transactional
    tool's call then runs as its transaction, committed with DBOS's record of it.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        approval_timeout: float | None = None,
        poll_min: float = POLL_MIN,
        poll_max: float = 10.0,
        patience: float | None = None,
        datasource: SQLAlchemyDatasource | None = None,
    ) -> None:
        if not 0 < poll_min <= poll_max:
            raise GateUsageError("waits must be positive, and poll_min at most poll_max")
        self.gate = gate
        self.approval_timeout = approval_timeout
        self.poll_min = poll_min
        self.poll_max = poll_max
        self.patience = patience if patience is not None else 2 * gate.lease_ms / 1000
        if datasource is not None:
            _same_database(gate, datasource)
        self.datasource = datasource

    def execute(self, call: CallLike, *, task_id: str | None = None) -> Outcome:
        """Run ``call`` at most once for this workflow (``task_id``: another task than
        the workflow's id), waiting for a person if the policy asks for one.

        ``CallInDoubt`` when the call may have run and nobody can say (recorded by
        DBOS as the step's error: a recovered workflow raises it again).
        """
        task = _task(task_id)
        record = self._step(task, dict(call), None)
        call_id = record["call_id"]
        waited, pause = 0.0, self.poll_min
        while record["state"] == CallState.AWAITING_APPROVAL.value:
            if self.approval_timeout is not None and waited >= self.approval_timeout:
                break
            wait = pause if self.approval_timeout is None else min(
                pause, self.approval_timeout - waited)
            DBOS.recv(answer_topic(call_id), timeout_seconds=wait)
            waited, pause = waited + wait, min(pause * 2, self.poll_max)
            if _answered_step(self, task, call_id):
                record = self._step(task, dict(call), call_id)
        return outcome_from(record)

    def _step(self, task: str, call: dict[str, Any], call_id: str | None) -> dict[str, Any]:
        """The call's step: the datasource's transaction for a transactional tool
        when there is a datasource, else the plain step."""
        tool = self.gate.tools.get(str(call.get("name")))
        if self.datasource is None or tool is None or not tool.spec.transactional:
            return _execute_step(self, task, call, call_id)
        return self.datasource.run_tx_step(
            {"name": "agent_gate.transact", "isolation_level": "READ COMMITTED"},
            _transact, self, self.datasource, task, call, call_id,
        )

    async def aexecute(self, call: CallLike, *, task_id: str | None = None) -> Outcome:
        """``execute`` for async workflows: async steps, ``DBOS.recv_async``."""
        task = _task(task_id)
        record = await _aexecute_step(self, task, dict(call), None)
        call_id = record["call_id"]
        waited, pause = 0.0, self.poll_min
        while record["state"] == CallState.AWAITING_APPROVAL.value:
            if self.approval_timeout is not None and waited >= self.approval_timeout:
                break
            wait = pause if self.approval_timeout is None else min(
                pause, self.approval_timeout - waited)
            await DBOS.recv_async(answer_topic(call_id), timeout_seconds=wait)
            waited, pause = waited + wait, min(pause * 2, self.poll_max)
            if await _aanswered_step(self, task, call_id):
                record = await _aexecute_step(self, task, dict(call), call_id)
        return outcome_from(record)

    def answered(self, task_id: str, call_id: str) -> bool:
        """Has a person answered ``call_id`` (or does it no longer wait)?"""
        try:
            answer = self.gate.wait(call_id, task_id=task_id, timeout=0)
        except NotAwaitingApproval:
            return True  # settled otherwise meanwhile: the next execute reports it
        return answer.status is not AnswerStatus.WAITING


def _same_database(gate: Gate, datasource: SQLAlchemyDatasource) -> None:
    """A datasource elsewhere would commit the tool's writes apart from the ledger's
    outcome: refused, naming neither URL (they may hold passwords)."""
    ours, theirs = (
        (url.get_backend_name(), url.host, url.port or 5432, url.database)
        for url in (gate.ledger.engine.url, datasource.engine.url)
    )
    if ours[0] != "postgresql" or ours != theirs:
        raise GateUsageError(
            "GatedSteps: the datasource must be on the ledger's own PostgreSQL database "
            "(same host, port and database)"
        )


def _task(task_id: str | None) -> str:
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise GateUsageError("GatedSteps.execute runs inside a DBOS workflow")
    return task_id or workflow_id


def _identity(call_id: str | None) -> str:
    """The id the first step gave the call, else this step's (``call_mapping`` keeps a
    call's own id over either)."""
    return call_id or f"{_STEP_PREFIX}{DBOS.step_id}"


@DBOS.step(name="agent_gate.execute")
def _execute_step(
    steps: GatedSteps, task_id: str, call: dict[str, Any], call_id: str | None
) -> dict[str, Any]:
    named = call_mapping(call, _identity(call_id))
    return outcome_record(execute_when_free(steps.gate, task_id, named, patience=steps.patience))


@DBOS.step(name="agent_gate.aexecute")
async def _aexecute_step(
    steps: GatedSteps, task_id: str, call: dict[str, Any], call_id: str | None
) -> dict[str, Any]:
    named = call_mapping(call, _identity(call_id))
    outcome = await aexecute_when_free(steps.gate, task_id, named, patience=steps.patience)
    return outcome_record(outcome)


def _transact(
    steps: GatedSteps, datasource: SQLAlchemyDatasource, task_id: str,
    call: dict[str, Any], call_id: str | None,
) -> dict[str, Any]:
    """The body of the datasource transaction: the gate's outcome and the tool's
    writes go into it (DBOS then records this return value in it and commits)."""
    named = call_mapping(call, _identity(call_id))
    with joining(datasource.sql_session().connection()):
        outcome = execute_when_free(steps.gate, task_id, named, patience=steps.patience)
    return outcome_record(outcome)


@DBOS.step(name="agent_gate.answered")
def _answered_step(steps: GatedSteps, task_id: str, call_id: str) -> bool:
    return steps.answered(task_id, call_id)


@DBOS.step(name="agent_gate.aanswered")
async def _aanswered_step(steps: GatedSteps, task_id: str, call_id: str) -> bool:
    return await asyncio.to_thread(steps.answered, task_id, call_id)
