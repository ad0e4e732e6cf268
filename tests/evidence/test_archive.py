"""``agent-gate audit archive``: finished tasks exported into signed bundles, pruned from the
live ledger, and the ledger still proven whole, on both backends; a pruned call sent again
(through the ledger, or through Gate) is answered from its tombstone and never runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, delete, func, insert, select

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.models import (
    APPROVAL_DEADLINES,
    APPROVAL_GRANT_USES,
    APPROVAL_GRANTS,
    ARCHIVED_CALLS,
    AUDIT_EVENTS,
    AUDIT_PRUNED,
    TOOL_CALLS,
)

FUTURE = (datetime.now(UTC) + timedelta(days=1)).isoformat()
"""A cut after every call made in a test: every finished task is older than it."""


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def new_call(call_id: str, task: str) -> NewCall:
    return NewCall(task_id=task, call_id=call_id, idem_key=f"call:{call_id}", tool="tool",
                   effect="write", idempotency="none", args_hash="0" * 64, arguments={})


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "ledger.key"
    done = subprocess.run([sys.executable, "-m", "agent_gate", "audit", "keygen",
                           "ledger.example/agent-gate", "--out", str(path)],
                          capture_output=True, text=True, timeout=60, check=True)
    return path, done.stdout.strip()


def finish(ledger: Ledger, call_id: str, task: str) -> None:
    rec, _ = ledger.record(new_call(call_id, task))
    ledger.transition(rec, Event.REJECT, actor="test")


def engine_of(url: str) -> Any:
    return create_engine(url)


def count(url: str, table: Any, *where: Any) -> int:
    engine = engine_of(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table).where(*where))
                       .scalar() or 0)
    finally:
        engine.dispose()


def test_archive_prunes_finished_tasks_keeps_the_proof_and_never_reruns(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, vkey = keys
    with Ledger(db_url) as ledger:
        ledger.record(new_call("open0", task="busy"))  # never finished: stays live
        for i in range(6):
            finish(ledger, f"old{i}", task=f"done{i % 3}")
        finish(ledger, "busy-done", task="busy")
    early = cli("audit", "checkpoint", "--signing-key", key, "--db", db_url, "--json")
    assert early.exit_code == 0, early.output
    (tmp_path / "early.note").write_text(json.loads(early.output)["note"])
    out = tmp_path / "archive"
    done = cli("audit", "archive", "--before", FUTURE, "--out", out, "--batch", "2",
               "--signing-key", key, "--db", db_url, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["tasks"], report["calls"], len(report["batches"])) == (3, 6, 2)
    assert count(db_url, TOOL_CALLS) == 2  # only task "busy"'s calls are left
    assert count(db_url, TOOL_CALLS, TOOL_CALLS.c.task_id.like("done%")) == 0
    assert count(db_url, AUDIT_EVENTS, AUDIT_EVENTS.c.task_id.like("done%")) == 0
    assert count(db_url, AUDIT_PRUNED) == report["entries"] > 0
    for bundle in sorted((out / "tasks").iterdir()):
        offline = cli("audit", "verify", "--bundle", bundle, "--key", vkey)
        assert offline.exit_code == 0, offline.output
    full = cli("audit", "verify", "--db", db_url)
    assert full.exit_code == 0, full.output
    since = cli("audit", "verify", "--checkpoint", tmp_path / "early.note", "--key", vkey,
                "--db", db_url)
    assert since.exit_code == 0, since.output
    with Ledger(db_url) as ledger:
        rec, inserted = ledger.record(new_call("old4", task="done1"))
        assert (inserted, rec.state) == (False, CallState.REJECTED)
        by_key = NewCall(task_id="done2", call_id="another-id", idem_key="call:old5",
                         tool="tool", effect="write", idempotency="none",
                         args_hash="0" * 64, arguments={})
        rec, inserted = ledger.record(by_key)
        assert (inserted, rec.call_id) == (False, "old5")
        fresh, inserted = ledger.record(new_call("new-in-old-task", task="done0"))
        assert inserted and fresh.state is CallState.RECEIVED
    assert count(db_url, TOOL_CALLS, TOOL_CALLS.c.task_id.like("done%")) == 1
    again = cli("audit", "verify", "--db", db_url)  # a pruned task's chain goes on
    assert again.exit_code == 0, again.output
    busy = cli("audit", "export", "--task", "busy", "--out", tmp_path / "busy",
               "--signing-key", key, "--db", db_url)
    assert busy.exit_code == 0, busy.output
    assert cli("audit", "verify", "--bundle", tmp_path / "busy", "--key", vkey).exit_code == 0
    # Every live entry: pruned leaves lie between task "busy"'s first entries and the rest.
    gap = cli("audit", "export", "--out", tmp_path / "all", "--signing-key", key,
              "--db", db_url)
    assert gap.exit_code != 0 and "were archived" in gap.output, gap.output


def test_a_deletion_no_archive_record_covers_is_caught(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, _ = keys
    with Ledger(db_url) as ledger:
        for i in range(4):
            finish(ledger, f"old{i}", task=f"done{i % 2}")
    done = cli("audit", "archive", "--before", FUTURE, "--out", tmp_path / "a",
               "--signing-key", key, "--db", db_url, "--json")
    assert done.exit_code == 0, done.output
    batch = json.loads(done.output)["batches"][0]
    with Ledger(db_url) as ledger:
        finish(ledger, "later", task="victim")
    whole = cli("audit", "verify", "--db", db_url)
    assert whole.exit_code == 0, whole.output
    # An attacker deletes a live entry and passes it off as pruned by the existing batch,
    # hashes and leaf exactly right. A full verify reads no pruned row where an archive
    # kept subtrees and chain ends: the task's head still names the entry, which is gone.
    engine = engine_of(db_url)
    with engine.begin() as conn:
        row = conn.execute(select(AUDIT_EVENTS).where(AUDIT_EVENTS.c.task_id == "victim")
                           .order_by(AUDIT_EVENTS.c.id.desc()).limit(1)).mappings().one()
        from agent_gate.ledger.trail_tree import leaf_of

        conn.execute(insert(AUDIT_PRUNED).values(
            id=row["id"], task_id=row["task_id"], seq=row["seq"], prev_hash=row["prev_hash"],
            hash=row["hash"], leaf=leaf_of(row)[1].hex(), archive=batch))
        conn.execute(delete(AUDIT_EVENTS).where(AUDIT_EVENTS.c.id == row["id"]))
    engine.dispose()
    caught = cli("audit", "verify", "--db", db_url, "--json")
    assert caught.exit_code == 1, caught.output
    problem = json.loads(caught.output)["problem"]
    assert problem["kind"] == "deleted" and problem["task"] == "victim", problem


WORKER = textwrap.dedent("""
    import json, sys
    from agent_gate.ledger import Event, Ledger, NewCall
    url, rounds = sys.argv[1], int(sys.argv[2])
    def call(call_id, task):
        return NewCall(task_id=task, call_id=call_id, idem_key="call:" + call_id, tool="tool",
                       effect="write", idempotency="none", args_hash="0" * 64, arguments={})
    rerun, made = [], []
    with Ledger(url) as ledger:
        print("ready", flush=True)
        for r in range(rounds):
            for i in range(8):  # re-deliver every old call: must never be new again
                rec, inserted = ledger.record(call(f"old{i}", f"done{i % 4}"))
                if inserted:
                    rerun.append(f"old{i}")
            rec, inserted = ledger.record(call(f"new{r}", f"live{r % 3}"))
            ledger.transition(rec, Event.REJECT, actor="worker")
            made.append(f"new{r}")
    print(json.dumps({"rerun": rerun, "made": made}), flush=True)
""")


@pytest.mark.slow
def test_archive_under_a_concurrent_process_loses_nothing_and_reruns_nothing(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, vkey = keys
    with Ledger(db_url) as ledger:
        for i in range(8):
            finish(ledger, f"old{i}", task=f"done{i % 4}")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, db_url, "60"],
                              stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "ready"
    out = tmp_path / "archive"
    done = cli("audit", "archive", "--before", FUTURE, "--out", out, "--batch", "1",
               "--signing-key", key, "--db", db_url, "--json")
    assert done.exit_code == 0, done.output
    tail, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0
    seen = json.loads(tail.strip().splitlines()[-1])
    assert seen["rerun"] == []  # no old call was ever recorded anew
    report = json.loads(done.output)
    assert count(db_url, ARCHIVED_CALLS) == report["calls"]
    for prefix, made in (("old%", 8), ("new%", 60)):  # the worker's calls finish too
        archived = count(db_url, ARCHIVED_CALLS, ARCHIVED_CALLS.c.call_id.like(prefix))
        live = count(db_url, TOOL_CALLS, TOOL_CALLS.c.call_id.like(prefix))
        assert archived + live == made  # each call either live or archived, none lost
    assert count(db_url, ARCHIVED_CALLS, ARCHIVED_CALLS.c.call_id.like("old%")) == 8
    for bundle in sorted((out / "tasks").iterdir()):
        assert cli("audit", "verify", "--bundle", bundle, "--key", vkey).exit_code == 0
    full = cli("audit", "verify", "--db", db_url)
    assert full.exit_code == 0, full.output


def test_an_archived_call_sent_again_through_gate_never_runs_the_tool(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, _ = keys
    runs: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": False})
    def get_weather(city: str) -> dict[str, Any]:
        runs.append(city)
        return {"city": city}

    def stream() -> list[object]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "c1", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return [chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                       "function": {"name": "get_weather",
                                                    "arguments": '{"city": "Lisbon"}'}}]}),
                chunk({}, "tool_calls")]

    with Gate(tools, db_url) as gate:
        first = gate.run(stream(), task_id="t", provider="openai-chat")
        assert [o.state for o in first.outcomes] == [CallState.SUCCEEDED] and runs == ["Lisbon"]
    done = cli("audit", "archive", "--before", FUTURE, "--out", tmp_path / "a",
               "--signing-key", key, "--db", db_url, "--json")
    assert done.exit_code == 0 and json.loads(done.output)["calls"] == 1, done.output
    assert count(db_url, TOOL_CALLS) == 0
    with Gate(tools, db_url) as gate:
        again = gate.run(stream(), task_id="t", provider="openai-chat")
    assert runs == ["Lisbon"]  # not run a second time
    assert [o.state for o in again.outcomes] == [CallState.SUCCEEDED]
    assert count(db_url, TOOL_CALLS) == 0


GRANTS_AND_DEADLINES = """
version: 1
tools:
  tool:
    effect: write
    rules:
      - id: a-person-first
        effect: approve
        approval:
          timeout: 1h
          grants:
            - {id: two-more, calls: 2}
"""


def test_archive_prunes_a_task_whose_calls_had_a_grant_and_a_deadline(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    """A finished task whose approval gave a grant (spent by later calls) and armed a
    deadline is archived whole: the rows that name its calls and approvals go first,
    so no foreign key holds the batch back, and its calls are never run again."""
    key, _ = keys
    policy = tmp_path / "policy.yaml"
    policy.write_text(GRANTS_AND_DEADLINES)
    runs: list[str] = []
    tools = ToolRegistry()

    @tools.tool(effect="write", idempotency="none")
    def tool(n: int) -> int:
        runs.append(f"n{n}")
        return n

    def call(g: Gate, n: int) -> CallState:
        return g.execute("granted", {"call_id": f"g{n}", "name": "tool",
                                     "arguments": {"n": n}}).state

    with Gate(tools, db_url, policy=policy) as g:
        assert call(g, 1) is CallState.AWAITING_APPROVAL
        g.approve("g1", by="alice", task_id="granted", grant="two-more")
        assert [o.state for o in g.resume("granted")] == [CallState.SUCCEEDED]
        assert [call(g, n) for n in (2, 3)] == [CallState.SUCCEEDED] * 2
    assert runs == ["n1", "n2", "n3"]
    assert count(db_url, APPROVAL_GRANTS) == 1 and count(db_url, APPROVAL_DEADLINES) == 1
    done = cli("audit", "archive", "--before", FUTURE, "--out", tmp_path / "archive",
               "--signing-key", key, "--db", db_url, "--json")
    assert done.exit_code == 0, done.output
    for table in (APPROVAL_GRANTS, APPROVAL_GRANT_USES, APPROVAL_DEADLINES, TOOL_CALLS):
        assert count(db_url, table) == 0, table.name
    with Gate(tools, db_url, policy=policy) as g:
        call(g, 2)  # sent again after the archive: answered from its tombstone
    assert runs == ["n1", "n2", "n3"]
