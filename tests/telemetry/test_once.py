"""Each committed transition of a call is reported once, from one place (issue 31).

The driver, the finisher and an operator's action all commit arrows; what a process
reports of them goes through ``CallTrace`` (or ``Observer.operator`` for a person's
move outside any run), one log record and one span event each. A run whose call was
judged in doubt by another worker while the tool ran, then settled by the tool's late
answer, is the case where two places used to report the same arrow.
"""

from __future__ import annotations

import collections
from pathlib import Path

from agent_gate import CallState, Gate, OutcomeUnknown, ToolRegistry
from agent_gate.ledger.states import Event

from .conftest import Otel
from .scenario import policy_file, registry


def transitions(otel: Otel) -> collections.Counter[tuple[str, str | None, str]]:
    """(call, from, to) of every record that reports an arrow this process made, counted."""
    counted: collections.Counter[tuple[str, str | None, str]] = collections.Counter()
    for record in otel.logs.records:
        if record.name != "agent_gate.gate" or not hasattr(record, "state"):
            continue
        if getattr(record, "replayed", False) or record.levelname == "DEBUG":
            continue  # found as another worker left it, or read back: not this arrow
        counted[(record.call_id, record.from_state, record.state)] += 1
    return counted


def test_every_arrow_of_the_common_paths_is_reported_once(tmp_path: Path, otel: Otel) -> None:
    tools = registry(otel.tracer_provider, "s")
    runs: list[int] = []

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="natural")
    def flaky() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise OutcomeUnknown("the remote end went away")
        return "done"

    with Gate(tools, f"sqlite:///{tmp_path / 'l.db'}", policy=policy_file(tmp_path),
              telemetry=otel.observer, create=True) as gate:
        gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": "x"}})
        gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": "x"}})
        gate.execute("t1", {"call_id": "p1", "name": "pay", "arguments": {"q": "1"}})
        gate.approve("p1", by="ana", task_id="t1")
        gate.resume("t1")
        gate.execute("t1", {"call_id": "p2", "name": "pay", "arguments": {"q": "2"}})
        gate.deny("p2", by="bob", task_id="t1")
        gate.execute("t1", {"call_id": "x1", "name": "explode", "arguments": {"q": "x"}})
    with Gate(tools, f"sqlite:///{tmp_path / 'm.db'}", telemetry=otel.observer,
              create=True) as gate:
        gate.execute("t2", {"call_id": "f1", "name": "flaky", "arguments": {}})
        gate.recover("t2")
    counted = transitions(otel)
    assert counted[("c1", None, "received")] == 1
    assert counted[("p2", "awaiting_approval", "rejected")] == 1
    assert counted[("f1", "executing", "in_doubt")] == 1
    # Claimed once per attempt: the first run went in doubt, the sweep retried it.
    assert counted.pop(("f1", "authorized", "executing")) == 2
    assert [key for key, n in counted.items() if n != 1] == []


def test_a_late_answer_to_a_call_judged_in_doubt_meanwhile_is_one_arrow(
    tmp_path: Path, otel: Otel
) -> None:
    tools = ToolRegistry()
    gate = Gate(tools, f"sqlite:///{tmp_path / 'l.db'}", telemetry=otel.observer, create=True)

    @tools.tool(schema={"type": "object"}, effect="write")
    def slow_write() -> str:
        # While the tool runs, another worker judges the call in doubt (its lease
        # ended): the commit of this run's outcome then finds the row moved on.
        rec = gate.ledger.get("t1", "c1")
        assert rec is not None and rec.state is CallState.EXECUTING
        assert gate.ledger.transition(rec, Event.LOSE, actor="sweeper").won
        return "written"

    with gate:
        outcome = gate.execute("t1", {"call_id": "c1", "name": "slow_write", "arguments": {}})
    assert outcome.state is CallState.SUCCEEDED
    settled = [(k, n) for k, n in transitions(otel).items() if k[2] == "succeeded"]
    assert settled == [(("c1", "in_doubt", "succeeded"), 1)]
    (late,) = [r for r in otel.logs.records if getattr(r, "late", False)]
    assert (late.from_state, late.state) == ("in_doubt", "succeeded")
    (span,) = otel.call_spans()
    assert [e.name for e in span.events] == ["received", "decided", "claimed", "finished"]
