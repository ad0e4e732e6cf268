"""Two synced commits a call: the decision and the claim commit with the insert, the
outcome in the second. Counted on the SQLite driver (its trace callback sees every
``COMMIT``), for each storage path, so a change that adds a commit fails here.

What the audit trail shows does not change: ``received``, the decision, ``claim``
and the outcome, each its own entry, in the order they happened.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import BACKENDS


class Commits:
    def __init__(self) -> None:
        self.count = 0

    def seen(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.count += 1


def counted(path: Path, storage: str) -> tuple[Ledger, Commits]:
    ledger = Ledger(f"sqlite:///{path}", create=True, storage=storage)
    commits = Commits()

    @event.listens_for(ledger.engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(commits.seen)

    ledger.engine.dispose()  # every connection from here on is traced
    return ledger, commits


def tools(ran: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(schema={"type": "object"}, effect="write")
    def write(**_: Any) -> str:
        ran.append("write")
        return "done"

    @registry.tool(schema={"type": "object"}, effect="write")
    async def awrite(**_: Any) -> str:
        ran.append("awrite")
        return "done"

    return registry


def events(ledger: Ledger, task: str, call_id: str) -> list[str]:
    return [a.event for a in ledger.audit(task) if a.call_id == call_id]


@pytest.mark.parametrize("storage", BACKENDS)
def test_a_call_that_runs_at_once_takes_two_commits(tmp_path: Path, storage: str) -> None:
    ledger, commits = counted(tmp_path / "l.db", storage)
    ran: list[str] = []
    with Gate(tools(ran), ledger) as gate:
        gate.execute("t", {"call_id": "warm", "name": "write", "arguments": {}})  # task row
        before = commits.count
        for i in range(5):
            done = gate.execute("t", {"call_id": f"c{i}", "name": "write", "arguments": {}})
            assert done.state is CallState.SUCCEEDED and not done.replayed
        assert (commits.count - before) / 5 == 2
        assert events(ledger, "t", "c0") == ["received", "allow", "claim", "succeed"]
        # Answered from the ledger: nothing runs, nothing more is claimed.
        again = gate.execute("t", {"call_id": "c0", "name": "write", "arguments": {}})
        assert again.replayed and ran.count("write") == 6


def test_the_async_entry_point_takes_two_commits_too(tmp_path: Path) -> None:
    ledger, commits = counted(tmp_path / "l.db", "fast")
    ran: list[str] = []

    async def main(gate: Gate) -> None:
        await gate.aexecute("t", {"call_id": "warm", "name": "awrite", "arguments": {}})
        before = commits.count
        done = await gate.aexecute("t", {"call_id": "a1", "name": "awrite", "arguments": {}})
        assert done.state is CallState.SUCCEEDED
        assert commits.count - before == 2

    with Gate(tools(ran), ledger) as gate:
        asyncio.run(main(gate))
    assert ran == ["awrite", "awrite"]


def test_a_decided_only_call_is_not_claimed(tmp_path: Path) -> None:
    """``Gate.decide`` asks before running: its call commits authorized, unclaimed, and
    the later ``execute`` claims and runs it."""
    ledger, _ = counted(tmp_path / "l.db", "fast")
    ran: list[str] = []
    with Gate(tools(ran), ledger) as gate:
        decided = gate.decide("t", {"call_id": "d1", "name": "write", "arguments": {}})
        assert decided.state is CallState.AUTHORIZED and ran == []
        done = gate.execute("t", {"call_id": "d1", "name": "write", "arguments": {}})
        assert done.state is CallState.SUCCEEDED and ran == ["write"]
    assert events(ledger, "t", "d1") == ["received", "allow", "seen_again", "claim", "succeed"]


def test_an_async_tool_under_a_running_loop_is_left_authorized(tmp_path: Path) -> None:
    """The sync entry point cannot await an async tool on a running loop: the call is
    decided, not claimed (so nothing is left executing without a runner)."""
    ledger, _ = counted(tmp_path / "l.db", "fast")
    ran: list[str] = []

    async def main(gate: Gate) -> None:
        with pytest.raises(Exception, match="use aexecute"):
            gate.execute("t", {"call_id": "x", "name": "awrite", "arguments": {}})

    with Gate(tools(ran), ledger) as gate:
        asyncio.run(main(gate))
        rec = gate.ledger.get("t", "x")
        assert rec is not None and rec.state is CallState.AUTHORIZED and ran == []
