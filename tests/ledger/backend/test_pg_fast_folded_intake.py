"""PostgreSQL's pipelined intake on the wire: the call's row inserted once, claimed.

The backend-neutral side (rows and trail equal to the Core reference's, with a
quota charge between the arrows) is ``tests/ledger/backend/test_fast_folded_intake.py``; here,
the statements each transaction sends and the spare row ids asked of the sequence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from noop_calls import noop_tools, on_tool_calls, run_calls

from agent_gate import Gate
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import _libpq as libpq
from agent_gate.ledger.backend import pg_fast

pytestmark = pytest.mark.backends("postgresql")


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


def test_the_intake_inserts_the_claimed_row_and_nothing_updates_it_before_the_outcome(
    db_url: str, sent: list[str]
) -> None:
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(db_url, storage="fast")) as gate:
        run_calls(gate, "t", 0, 3)  # the task row, prepared statements, the first spare ids
        for n in range(100, 100 + 2 * pg_fast.SPARE_BATCH):
            sent.clear()
            run_calls(gate, "t", n, 1)
            commits = [i for i, sql in enumerate(sent) if sql == "COMMIT"]
            assert len(commits) == 2, sent
            intake_txn, outcome_txn = sent[:commits[0]], sent[commits[0] + 1:commits[1]]
            assert [on_tool_calls(s) for s in intake_txn if on_tool_calls(s)] == ["INSERT"]
            assert [on_tool_calls(s) for s in outcome_txn if on_tool_calls(s)] == ["UPDATE"]
            # The row leaves the intake claimed: executing, with its lease.
            insert = next(s for s in intake_txn if on_tool_calls(s))
            assert "lease_expires_ms" in insert and "started_at" in insert
        rows = gate.ledger.calls("t")
    assert ran == [0, 1, 2, *range(100, 100 + 2 * pg_fast.SPARE_BATCH)]
    assert [r.call_id for r in rows] == [f"c{n}" for n in ran]  # in id order


def test_spare_row_ids_are_asked_for_once_per_batch(db_url: str, sent: list[str]) -> None:
    with Gate(noop_tools([]), Ledger(db_url, storage="fast")) as gate:
        run_calls(gate, "t", 0, 2)
        sent.clear()
        run_calls(gate, "t", 10, 2 * pg_fast.SPARE_BATCH)
    assert sum("nextval(" in sql for sql in sent) == 2
