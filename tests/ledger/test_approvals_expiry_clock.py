"""An approval's expiry is the database's clock plus its ttl, judged by that clock.

A worker's or an approver's clock that is off (a laptop, a VM after suspend) must
neither stretch an approval nor revive an expired one. The database's clock cannot
be moved from a test; the machine's clock, as Python reads it (``time.time_ns``),
is shifted instead, which is what a skewed host looks like to agent-gate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import EXAMPLE_POLICY, effect_lines
from sqlalchemy import create_engine, text

from agent_gate import CallState, Gate
from agent_gate.cli import main as cli
from agent_gate.gate import GateUsageError
from agent_gate.ledger.approvals import MAX_TTL_SECONDS
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")

DAY_NS = 86_400 * 10**9
REFUND = {"call_id": "r1", "name": "refund",
          "arguments": {"order_id": "ORD-123456", "amount": 400}}


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def skew_clock(monkeypatch: pytest.MonkeyPatch, offset_ns: int) -> None:
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + offset_ns)


@pytest.fixture
def waiting(db_url: str, support_tools: ModuleType, effects_file: Path) -> str:
    """A ledger whose refund ``r1`` of task ``t`` waits for approval."""
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        assert gate.execute("t", REFUND).state is CallState.AWAITING_APPROVAL
    return db_url


def _approvals(url: str) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT expires_ms FROM approvals")).scalars())
    finally:
        engine.dispose()


@pytest.mark.parametrize("given", ["0", "0s", "-5m", "-1", "inf", "nan", "1e400", "367d",
                                   "31622401"])
def test_expires_in_refuses_zero_negative_infinite_and_absurd(waiting: str, given: str) -> None:
    out = run("approve", "r1", "--by", "alice", "--expires-in", given, "--db", waiting)
    assert out.exit_code == 2, out.output
    assert "--expires-in" in out.output and "366d" in out.output
    assert _approvals(waiting) == []


def test_expires_in_accepts_366_days(waiting: str) -> None:
    out = run("approve", "r1", "--by", "alice", "--expires-in", "366d", "--db", waiting,
              "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["expires_at"] is not None


@pytest.mark.parametrize("ttl", [0, -1.0, float("inf"), float("-inf"), float("nan"),
                                 MAX_TTL_SECONDS + 1, True])
def test_gate_approve_refuses_the_same_ttls(
    waiting: str, support_tools: ModuleType, ttl: Any
) -> None:
    with (Gate(support_tools.tools, waiting, policy=EXAMPLE_POLICY) as gate,
          pytest.raises(GateUsageError, match=r"^ttl: expected")):
        gate.approve("r1", by="alice", ttl=ttl)
    assert _approvals(waiting) == []


def test_an_approvers_clock_ahead_does_not_stretch_the_approval(
    waiting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as skewed:
        skew_clock(skewed, 30 * DAY_NS)
        out = run("approve", "r1", "--by", "alice", "--expires-in", "1h", "--db", waiting,
                  "--json")
    assert out.exit_code == 0, out.output
    after_ms = time.time_ns() // 1_000_000  # the database runs on this machine's real clock
    (expires_ms,) = _approvals(waiting)
    assert after_ms < expires_ms <= after_ms + 3_600_000


def test_a_workers_clock_behind_does_not_revive_an_expired_approval(
    waiting: str, support_tools: ModuleType, effects_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run("approve", "r1", "--by", "alice", "--expires-in", "1m",
               "--db", waiting).exit_code == 0
    # Two minutes pass, as far as the database can tell.
    engine = create_engine(waiting)
    with engine.begin() as conn:
        conn.execute(text("UPDATE approvals SET expires_ms = expires_ms - 120000"))
    engine.dispose()
    with monkeypatch.context() as skewed:
        skew_clock(skewed, -DAY_NS)  # this worker's clock is a day behind
        out = run("resume", "t", "--tools", "support_tools", "--policy", str(EXAMPLE_POLICY),
                  "--db", waiting, "--json")
    assert out.exit_code == 5, out.output  # still awaiting approval
    assert effect_lines(effects_file) == []
    with Gate(support_tools.tools, waiting, policy=EXAMPLE_POLICY) as gate:
        rec = gate.ledger.get("t", "r1")
        assert rec is not None and rec.state is CallState.AWAITING_APPROVAL
        approval = gate.ledger.approval(rec)
        assert approval is not None and approval.expired() and not approval.consumed
        assert [b.reason for b in gate.blockers("t")] == [
            "the approval expired; approve it again"
        ]
