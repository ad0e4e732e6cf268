"""A call that runs at once is written once in its intake transaction.

Received, authorized and claimed in one transaction, the call's row used to be an
``INSERT`` and two compare-and-set ``UPDATE`` statements of the row just inserted:
three row versions, every index of ``tool_calls`` written three times. On the fast
backend the arrows are folded into the ``INSERT`` (``flows.Folded``); these tests
hold what is sent, and that the row and the trail are the ones the reference
backend (three statements through Core) leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Ledger, intake, libpq
from agent_gate.policy import Policy

pytestmark = pytest.mark.backends("postgresql")

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


def _tools(ran: list[int]) -> ToolRegistry:
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        ran.append(n)
        return {"ok": n}

    tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                   effect="write", idempotency="none")
    return tools


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the pipelined transactions send, whitespace squeezed."""
    log: list[str] = []
    send = libpq.Wire.send

    def spy(self: libpq.Wire, sql: str, args: Any, target: Any) -> None:
        log.append(" ".join(sql.split()))
        send(self, sql, args, target)

    monkeypatch.setattr(libpq.Wire, "send", spy)
    yield log


def _on_calls(sql: str) -> str | None:
    """What ``sql`` does to ``tool_calls``, if anything."""
    for kind in ("INSERT INTO tool_calls ", "UPDATE tool_calls "):
        if kind in sql:
            return kind.split()[0]
    return None


def _calls(gate: Gate, task: str, first: int, count: int) -> None:
    for n in range(first, first + count):
        out = gate.execute(task, {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}})
        assert out.state is CallState.SUCCEEDED and not out.replayed


def test_the_intake_inserts_the_claimed_row_and_nothing_updates_it_before_the_outcome(
    db_url: str, sent: list[str]
) -> None:
    ran: list[int] = []
    with Gate(_tools(ran), Ledger(db_url, storage="fast")) as gate:
        _calls(gate, "t", 0, 3)  # the task row, prepared statements, the first spare ids
        for n in range(100, 100 + 2 * intake.SPARE_BATCH):
            sent.clear()
            _calls(gate, "t", n, 1)
            commits = [i for i, sql in enumerate(sent) if sql == "COMMIT"]
            assert len(commits) == 2, sent
            intake_txn, outcome_txn = sent[:commits[0]], sent[commits[0] + 1:commits[1]]
            assert [_on_calls(s) for s in intake_txn if _on_calls(s)] == ["INSERT"]
            assert [_on_calls(s) for s in outcome_txn if _on_calls(s)] == ["UPDATE"]
            # The row leaves the intake claimed: executing, with its lease.
            insert = next(s for s in intake_txn if _on_calls(s))
            assert "lease_expires_ms" in insert and "started_at" in insert
        rows = gate.ledger.calls("t")
    assert ran == [0, 1, 2, *range(100, 100 + 2 * intake.SPARE_BATCH)]
    assert [r.call_id for r in rows] == [f"c{n}" for n in ran]  # in id order


def test_spare_row_ids_are_asked_for_once_per_batch(db_url: str, sent: list[str]) -> None:
    with Gate(_tools([]), Ledger(db_url, storage="fast")) as gate:
        _calls(gate, "t", 0, 2)
        sent.clear()
        _calls(gate, "t", 10, 2 * intake.SPARE_BATCH)
    assert sum("nextval(" in sql for sql in sent) == 2


_VOLATILE = {"row_id", "task_id", "lease_owner", "lease_expires_ms", "created_at",
             "updated_at", "started_at", "finished_at"}


def _trail(ledger: Ledger, task: str) -> list[tuple[Any, ...]]:
    return [
        (e.call_id, e.event, e.from_state, e.to_state,
         {k: v for k, v in (e.detail or {}).items() if k != "lease_owner"})
        for e in ledger.audit(task_id=task)
    ]


@pytest.mark.parametrize("policy", [None, QUOTA_POLICY], ids=["no-policy", "quota"])
def test_the_folded_row_and_trail_are_the_reference_backends(
    db_url: str, policy: str | None
) -> None:
    """The same calls through the plain Core backend (an insert and two updates,
    one statement at a time) and the fast one leave the same rows and the same
    trail, with a quota charge in between (the fold stops at it: the row must be
    in the table before the charge that refers to it)."""
    seen: dict[str, tuple[list[dict[str, Any]], list[tuple[Any, ...]]]] = {}
    for storage in ("core", "fast"):
        ran: list[int] = []
        rules = Policy.from_text(policy) if policy else None
        with Gate(_tools(ran), Ledger(db_url, storage=storage), policy=rules) as gate:
            task = f"t-{storage}"
            _calls(gate, task, 0, 5)
            rows = [{k: v for k, v in asdict(r).items() if k not in _VOLATILE}
                    for r in (gate.ledger.get(task, f"c{n}") for n in range(5))]
            if policy:
                assert gate.ledger.usage(task) == {"noop/sum/n": 10}
            assert gate.ledger.verify_audit().ok
            seen[storage] = (rows, _trail(gate.ledger, task))
        assert ran == [0, 1, 2, 3, 4]
    assert seen["fast"] == seen["core"]
    assert seen["fast"][0][0]["state"] is CallState.SUCCEEDED
