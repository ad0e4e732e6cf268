"""A call that runs at once is written once in its intake transaction, on every backend.

Received, authorized and claimed in one transaction, the call's row used to be an
``INSERT`` and two compare-and-set ``UPDATE`` statements of the row just inserted:
three row versions, every index of ``tool_calls`` written three times, two statements
more than needed. On the fast backend the arrows are folded into the ``INSERT``
(``cas.Folded``; the id chosen beforehand: a spare id of PostgreSQL's sequence, or
SQLite's next one under the write lock). These tests hold what reaches the table,
and that the rows and the trail are the ones the reference backend (Core, one
statement per arrow) leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
from noop_calls import noop_tools, on_tool_calls, run_calls

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import prepared
from agent_gate.policy import Policy

QUOTA_POLICY = """\
version: 1
tools:
  noop:
    effect: write
    idempotency: none
    rules:
      - id: small
        effect: allow
        when:
          - arg: n
            number: {max: 1000}
    limits:
      - id: noop-total
        sum: n
        max: 100000
"""


@pytest.fixture
def on_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the fast backend's statements do to ``tool_calls``, in order."""
    log: list[str] = []
    run = prepared.Prepared.run

    def spy(self: prepared.Prepared, conn: Any, params: Any) -> Any:
        kind = on_tool_calls(self.sql)
        if kind is not None:
            log.append(kind)
        return run(self, conn, params)

    monkeypatch.setattr(prepared.Prepared, "run", spy)
    yield log


def test_a_call_that_runs_at_once_is_inserted_claimed_and_updated_once(
    db_url: str, on_calls: list[str]
) -> None:
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(db_url, storage="fast")) as gate:
        run_calls(gate, "t", 0, 3)  # the task row, prepared statements, spare ids
        for n in range(100, 120):
            on_calls.clear()
            run_calls(gate, "t", n, 1)
            assert on_calls == ["INSERT", "UPDATE"]  # the intake's, the outcome's
        executing = gate.ledger.get("t", "c119")
        rows = gate.ledger.calls("t")
    assert ran == [0, 1, 2, *range(100, 120)]
    assert [r.call_id for r in rows] == [f"c{n}" for n in ran]  # in id order
    assert executing is not None and executing.attempt == 1 and executing.started_at


def test_a_call_seen_again_is_not_inserted_again(db_url: str, on_calls: list[str]) -> None:
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(db_url, storage="fast")) as gate:
        run_calls(gate, "t", 0, 3)
        on_calls.clear()
        again = gate.execute("t", {"call_id": "c1", "name": "noop", "arguments": {"n": 1}})
        if db_url.startswith("sqlite"):
            # Found by the statement that would have chosen its id: no insert tried.
            assert on_calls == []
        other = gate.execute("t", {"call_id": "c9", "name": "noop", "arguments": {"n": 9}})
        assert gate.ledger.verify_audit().ok
    assert again.replayed and again.state is CallState.SUCCEEDED
    assert other.state is CallState.SUCCEEDED and not other.replayed
    assert ran == [0, 1, 2, 9]


_VOLATILE = {"row_id", "task_id", "lease_owner", "lease_expires_ms", "created_at",
             "updated_at", "started_at", "finished_at"}


def _trail(ledger: Ledger, task: str) -> list[tuple[Any, ...]]:
    return [
        (e.call_id, e.event, e.from_state, e.to_state, e.actor is None,
         {k: v for k, v in (e.detail or {}).items() if k != "lease_owner"})
        for e in ledger.audit(task_id=task)
    ]


@pytest.mark.parametrize("policy", [None, QUOTA_POLICY], ids=["no-policy", "quota"])
def test_the_folded_rows_and_trail_are_the_reference_backends(
    db_url: str, policy: str | None
) -> None:
    """The same calls through the Core backend (an insert and two updates, one
    statement at a time) and the fast one leave the same rows and the same trail,
    also with a quota charge between the arrows (the fold stops there: the row must
    be in the table before the charge that refers to it)."""
    seen: dict[str, tuple[list[dict[str, Any]], list[tuple[Any, ...]]]] = {}
    for storage in ("core", "fast"):
        ran: list[int] = []
        rules = Policy.from_text(policy) if policy else None
        with Gate(noop_tools(ran), Ledger(db_url, storage=storage), policy=rules) as gate:
            task = f"t-{storage}"
            run_calls(gate, task, 0, 5)
            rows = [{k: v for k, v in asdict(r).items() if k not in _VOLATILE}
                    for r in gate.ledger.calls(task)]
            if policy:
                assert gate.ledger.usage(task) == {"noop/sum/n": 10}
            assert gate.ledger.verify_audit().ok
            seen[storage] = (rows, _trail(gate.ledger, task))
        assert ran == [0, 1, 2, 3, 4]
    assert seen["fast"] == seen["core"]
    assert [r["state"] for r in seen["fast"][0]] == [CallState.SUCCEEDED] * 5
