"""Waiting in code for a person: ``Gate.pending``, ``Gate.wait``, ``Gate.await_decision``,
answered by a real second process (``agent-gate approve`` / ``deny``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from shared_fixtures import AGENT_GATE, EXAMPLE_POLICY, HERE, effect_lines

from agent_gate import CallState, Gate
from agent_gate.errors import NotAwaitingApproval
from agent_gate.gate import AnswerStatus
from agent_gate.gate.waiting import LISTEN_SLICE, POLL_MAX, POLL_MIN, _steps
from agent_gate.ledger import Ledger
from agent_gate.ledger.views.notify import Listener, payload
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")

MAIL = {"call_id": "m1", "name": "send_email",
        "arguments": {"to": "bob@gmail.com", "subject": "Invoice", "body": "Dear Bob"}}


def person(*args: str) -> subprocess.Popen[str]:
    """Another process answering, as an operator would: the console script."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([str(AGENT_GATE), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def gate_for(url: str, tools: ModuleType) -> Gate:
    return Gate(tools.tools, url, policy=EXAMPLE_POLICY,
                principal=Principal(id="u1", roles={"support"}))


def finished(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)


def test_wait_returns_when_another_process_approves(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate_for(db_url, support_tools) as gate:
        waiting = gate.execute("t", MAIL)
        assert waiting.state is CallState.AWAITING_APPROVAL
        gate.execute("t", {"call_id": "w1", "name": "get_weather", "arguments": {"city": "Oslo"}})
        assert [(o.task_id, o.call_id) for o in gate.pending()] == [("t", "m1")]
        assert gate.pending("other") == []
        nobody = gate.wait(waiting, timeout=0)
        assert nobody.status is AnswerStatus.WAITING and not nobody.decided
        approver = person("approve", "m1", "--by", "alice", "--reason", "ok", "--db", db_url)
        try:
            answer = gate.wait("m1", task_id="t", timeout=120)
        finally:
            finished(approver)
        assert answer.status is AnswerStatus.APPROVED and answer.approval is not None
        assert answer.approval.decided_by == "alice"
        assert answer.outcome.state is CallState.AWAITING_APPROVAL  # approved, not yet run
        ran = gate.execute("t", MAIL)  # the agent loop carries on: runs it once
        assert ran.state is CallState.SUCCEEDED
        assert gate.wait("m1", timeout=0).status is AnswerStatus.APPROVED  # used, still so
        assert gate.pending() == []
        with pytest.raises(NotAwaitingApproval, match="'w1' of task 't' is succeeded"):
            gate.wait("w1", timeout=0)
    assert effect_lines(effects_file).count("t send_email bob@gmail.com Invoice") == 1


def test_await_decision_returns_when_another_process_denies(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    async def scenario(gate: Gate) -> Any:
        outcome = await gate.aexecute("t", MAIL)
        assert outcome.state is CallState.AWAITING_APPROVAL
        assert (await gate.await_decision(outcome, timeout=0)).status is AnswerStatus.WAITING
        denier = person("deny", "m1", "--by", "bob", "--reason", "no", "--db", db_url)
        try:
            return await gate.await_decision(outcome, timeout=120)
        finally:
            await asyncio.to_thread(finished, denier)

    with gate_for(db_url, support_tools) as gate:
        answer = asyncio.run(scenario(gate))
        assert answer.status is AnswerStatus.DENIED
        assert answer.outcome.state is CallState.REJECTED
        assert answer.approval is not None and answer.approval.decided_by == "bob"
        assert answer.to_dict()["status"] == "denied"
    assert effect_lines(effects_file) == []


@pytest.mark.backends("postgresql")
def test_an_answer_notifies_listeners_when_it_commits(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with gate_for(db_url, support_tools) as gate:
        gate.execute("t", MAIL)
    ledger = Ledger(db_url)
    listener = Listener.open(ledger.engine)
    assert listener is not None
    try:
        assert listener.wait(0.0) is False  # nothing said yet
        finished(person("approve", "m1", "--by", "alice", "--db", db_url))
        assert listener.wait(120.0, payload("t", "m1")) is True
    finally:
        listener.close()
        ledger.close()


def test_sqlite_backs_off_and_postgresql_listens_in_slices() -> None:
    waiting: Any = object()

    def pauses(notified: bool, n: int) -> list[float]:
        from agent_gate.gate.waiting import Answer

        steps = _steps(waiting, None, notified=notified)
        assert next(steps) is None
        answer = Answer(AnswerStatus.WAITING, waiting, None)
        got = []
        for _ in range(n):
            got.append(steps.send(answer))
            assert steps.send(None) is None
        return got

    polled = pauses(False, 8)
    assert polled[0] == POLL_MIN and polled[-1] == POLL_MAX
    assert all(b == min(a * 2, POLL_MAX) for a, b in pairwise(polled))
    assert pauses(True, 3) == [LISTEN_SLICE] * 3


def test_an_answer_is_read_with_the_row_it_answers(
    db_url: str, support_tools: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A denial committed (by another connection) right after the call's row was
    read: the answer read must be from the same moment as the row, never "denied"
    beside a call still awaiting approval (its rejection is in the same commit)."""
    from agent_gate.ledger.txn import Txn

    with gate_for(db_url, support_tools) as gate, Ledger(db_url) as other:
        waiting = gate.execute("t", MAIL)
        assert waiting.state is CallState.AWAITING_APPROVAL
        real_read_call = Txn.read_call
        denied: list[bool] = []

        def read_call_then_deny(txn: Txn, **where: Any) -> Any:
            row = real_read_call(txn, **where)
            if not denied and row is not None and row.call_id == "m1":
                denied.append(True)
                other.deny(other.get("t", "m1"), by="bob", reason="no")  # commits now
            return row

        monkeypatch.setattr(Txn, "read_call", read_call_then_deny)
        first = gate.wait(waiting, timeout=0)
        monkeypatch.setattr(Txn, "read_call", real_read_call)
        assert denied
        assert (first.status, first.outcome.state) == (
            AnswerStatus.WAITING, CallState.AWAITING_APPROVAL)
        then = gate.wait(waiting, timeout=0)
        assert (then.status, then.outcome.state) == (AnswerStatus.DENIED, CallState.REJECTED)
