"""The SQLite fold under races, deaths and faults (``intake._free_id``, ``cas.Folded``).

On SQLite's fast path a call that is new is inserted once, already decided and
claimed, under an id chosen in the same ``BEGIN IMMEDIATE`` transaction (``max(id)
+ 1``), and a call seen before is read by the id that same statement found. The
at-most-once promise rests on that choice: these tests attack it with real
processes on one file (racing the same call id, the same dedupe key, the same id in
other tasks), with SIGKILL at each point of a call, and compare every row and audit
entry it leaves with the ones the unfolded path leaves (Core joined: a statement
listener, ``echo``) for the same calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import event, func, select
from support import WORKERS
from support.calls import call
from support.workers.fold_worker import CALLS, tools_for

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main as cli_main
from agent_gate.ledger import Ledger, NewCall
from agent_gate.ledger.backend import prepared
from agent_gate.ledger.models import TOOL_CALLS
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import CallRecord, Ruling
from agent_gate.ledger.states import Event
from agent_gate.policy import Policy

WORKER = WORKERS / "fold_worker.py"
ROOT = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------ helpers


def new_ledger(tmp_path: Path, name: str = "ledger.db") -> str:
    url = f"sqlite:///{tmp_path / name}"
    Ledger(url, create=True, storage="fast").close()
    return url


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env["AGENT_GATE_LEDGER_BACKEND"] = "fast"
    return env


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=worker_env(),
    )


def table(url: str, name: str) -> list[dict[str, Any]]:
    """Every row of ``name`` as the file holds it (stdlib sqlite3, not the ledger)."""
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(f"SELECT * FROM {name} ORDER BY 1")]
    finally:
        con.close()


def runs_of(runs: Path) -> list[tuple[str, ...]]:
    if not runs.exists():
        return []
    return [tuple(line.split()[:4]) for line in runs.read_text().splitlines()]


def cli_verify(url: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli_main, ["audit", "verify", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def consistent(url: str) -> None:
    """The ledger's own invariants, read from the file: ids unique, one row per
    (task, call id) and per (task, key), every audit entry's call row there, each
    call's state the newest transition of its trail, the chain verified."""
    calls = table(url, "tool_calls")
    events = table(url, "audit_events")
    ids = [c["id"] for c in calls]
    assert len(ids) == len(set(ids))
    assert len({(c["task_id"], c["call_id"]) for c in calls}) == len(calls)
    assert len({(c["task_id"], c["idem_key"]) for c in calls}) == len(calls)
    by_id = {c["id"]: c for c in calls}
    newest: dict[int, str] = {}
    for e in events:
        if e["call_row_id"] is None:
            continue
        row = by_id[e["call_row_id"]]  # no entry names a row that is not there
        assert (row["task_id"], row["call_id"]) == (e["task_id"], row["call_id"])
        if e["event"] == "received":
            assert e["call_id"] == row["call_id"]
        if e["to_state"] is not None and e["to_state"] != e["from_state"]:
            newest[e["call_row_id"]] = e["to_state"]
    assert {i: by_id[i]["state"] for i in newest} == newest
    assert set(newest) == set(by_id)  # every row has its "received"
    with Ledger(url) as ledger:
        assert ledger.verify_audit().ok
    assert cli_verify(url)["ok"] is True


# ------------------------------------------------------------------ 1. races


@pytest.mark.parametrize("workers", [4])
def test_processes_racing_the_same_calls_run_each_once(tmp_path: Path, workers: int) -> None:
    """Several processes, each its own gate on one file, execute the same calls at
    once (the same (task, call id) everywhere, the same call ids in other tasks,
    one dedupe key under several call ids): each call runs exactly once, one row
    each, and every other answer is a replay of it."""
    url = new_ledger(tmp_path)
    go, runs = tmp_path / "go", tmp_path / "runs"
    procs = [worker("race", url, str(go), str(runs), "fwd" if i % 2 else "rev")
             for i in range(workers)]
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))

    ran = runs_of(runs)
    # noop c0..c5 in t1 and in t2, and pay once per task for order o1 (t1 and t3).
    expected_noops = {("noop", t, f"c{n}", str(n)) for t in ("t1", "t2") for n in range(6)}
    assert Counter(r for r in ran if r[0] == "noop") == Counter(expected_noops)
    pays = [r for r in ran if r[0] == "pay"]
    assert sorted(r[1] for r in pays) == ["t1", "t3"]

    calls = table(url, "tool_calls")
    assert len(calls) == 12 + 2  # the pay call ids after the first share its row
    assert {c["state"] for c in calls} == {"succeeded"}
    assert [c["id"] for c in calls] == list(range(1, len(calls) + 1))
    for task, call_id, out in (x for result in results for x in result):
        # Done, or seen while another worker ran it (never run a second time).
        assert out["state"] == "succeeded" or (
            out["state"] == "executing" and out["replayed"] and out["code"] == "in_progress"
        ), (task, call_id, out)
    # Per (task, call id): exactly one worker ran it (replayed False) unless it is a
    # pay whose key another call id of its task holds.
    fresh = Counter((task, call_id) for result in results for task, call_id, out in result
                    if not out["replayed"])
    assert all(n == 1 for n in fresh.values()), fresh
    assert sum(fresh.values()) == len(calls)
    consistent(url)


def test_threads_of_one_gate_racing_the_same_calls_run_each_once(tmp_path: Path) -> None:
    """The same race inside one process: threads share the gate's engine (and its
    kept connections), each transaction its own connection and its own ``Open``."""
    url = new_ledger(tmp_path)
    runs = tmp_path / "runs"
    start = threading.Barrier(4)
    errors: list[BaseException] = []
    with Gate(tools_for(runs), Ledger(url, storage="fast")) as gate:

        def race(order: int) -> None:
            try:
                start.wait(timeout=30)
                for task, c in (CALLS if order % 2 else CALLS[::-1]):
                    gate.execute(task, c)
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=race, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert errors == []
    ran = runs_of(runs)
    assert len(ran) == len(set(ran)) == 12 + 2
    assert [c["id"] for c in table(url, "tool_calls")] == list(range(1, 15))
    consistent(url)


def test_forked_children_of_one_gate_racing_the_same_calls_run_each_once(
    tmp_path: Path,
) -> None:
    """``multiprocessing`` with fork: the gate opened (and used) in the parent, its
    children race the calls through their copies of it. A child must not use the
    parent's kept connections (``spares``: per process); ids stay unique."""
    import multiprocessing

    url = new_ledger(tmp_path)
    runs = tmp_path / "runs"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(4)
    with Gate(tools_for(runs), Ledger(url, storage="fast")) as gate:
        gate.execute("t0", {"call_id": "warm", "name": "noop", "arguments": {"n": 0}})

        def race(order: int) -> None:
            start.wait(timeout=30)
            for task, c in (CALLS if order % 2 else CALLS[::-1]):
                gate.execute(task, c)

        children = [ctx.Process(target=race, args=(i,)) for i in range(4)]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=120)
        assert [child.exitcode for child in children] == [0, 0, 0, 0]
    ran = runs_of(runs)
    assert len(ran) == len(set(ran)) == 1 + 12 + 2
    assert [c["id"] for c in table(url, "tool_calls")] == list(range(1, 16))
    consistent(url)


# ------------------------------------------------------------------ 2. SIGKILL


def kill_then_restart(tmp_path: Path, point: str) -> tuple[str, Path, dict[str, Any]]:
    url = new_ledger(tmp_path)
    runs = tmp_path / "runs"
    # A call before, so that the dead one's id is not the first.
    again = worker("again", url, str(runs), "t", "before")
    assert again.wait(timeout=60) == 0
    dying = worker("die", url, str(runs), point, "t", "c1")
    dying.communicate(timeout=60)
    assert dying.returncode == -signal.SIGKILL
    restarted = worker("again", url, str(runs), "t", "c1")
    out, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    return url, runs, json.loads(out)


@pytest.mark.slow
def test_killed_inside_the_tool_the_call_is_in_doubt_never_run_again(tmp_path: Path) -> None:
    url, runs, out = kill_then_restart(tmp_path, "tool")
    assert runs_of(runs) == [("noop", "t", "before", "1"), ("noop", "t", "c1", "1")]
    assert out["state"] == "in_doubt"
    rows = {c["call_id"]: c for c in table(url, "tool_calls")}
    assert rows["c1"]["state"] == "in_doubt" and rows["c1"]["attempt"] == 1
    consistent(url)


@pytest.mark.slow
def test_killed_after_the_tool_returned_the_call_is_in_doubt(tmp_path: Path) -> None:
    url, runs, out = kill_then_restart(tmp_path, "outcome")
    assert runs_of(runs) == [("noop", "t", "before", "1"), ("noop", "t", "c1", "1")]
    assert out["state"] == "in_doubt"
    consistent(url)


@pytest.mark.slow
def test_killed_inside_the_intake_nothing_of_it_stays(tmp_path: Path) -> None:
    """Killed with the folded ``INSERT`` sent and not committed (write lock held):
    the call was never recorded, so the restarted worker records and runs it once,
    under the id the dead transaction had chosen."""
    url, runs, out = kill_then_restart(tmp_path, "intake")
    assert out == {"state": "succeeded", "replayed": False, "code": None,
                   "duplicate_of": None}
    assert runs_of(runs) == [("noop", "t", "before", "1"), ("noop", "t", "c1", "1")]
    assert [(c["id"], c["call_id"]) for c in table(url, "tool_calls")] == [
        (1, "before"), (2, "c1")]
    consistent(url)


@pytest.mark.slow
def test_racing_workers_one_dies_in_the_tool_none_runs_it_again(tmp_path: Path) -> None:
    """Three processes race one call; the one that claims it dies inside the tool.
    The others saw it executing (or, after the death, in doubt) and ran nothing."""
    url = new_ledger(tmp_path)
    go, runs = tmp_path / "go", tmp_path / "runs"
    procs = [worker("die", url, str(runs), "tool", "t", "c1", str(go)) for _ in range(3)]
    go.touch()
    answers = [(p.returncode, out) for p in procs
               for out, _err in [p.communicate(timeout=120)]]
    assert sorted(code for code, _ in answers) == [-signal.SIGKILL, 0, 0]
    for code, out in answers:
        if code == 0:
            # Seen running, or seen after the death: never run again.
            assert json.loads(out)["state"] in ("executing", "in_doubt")
    assert runs_of(runs) == [("noop", "t", "c1", "1")]
    restarted = worker("again", url, str(runs), "t", "c1")
    out, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    assert json.loads(out)["state"] == "in_doubt"
    assert runs_of(runs) == [("noop", "t", "c1", "1")]
    consistent(url)


@pytest.mark.slow
def test_workers_dying_with_the_write_lock_leave_nothing(tmp_path: Path) -> None:
    """Three processes race one new call and each dies holding the write lock, its
    folded ``INSERT`` sent: every waiting one gets the lock in turn and finds the
    call new (nothing of the dead transactions stays); then it runs once."""
    url = new_ledger(tmp_path)
    go, runs = tmp_path / "go", tmp_path / "runs"
    procs = [worker("die", url, str(runs), "intake", "t", "c1", str(go)) for _ in range(3)]
    go.touch()
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == -signal.SIGKILL
    assert table(url, "tool_calls") == [] and runs_of(runs) == []
    restarted = worker("again", url, str(runs), "t", "c1")
    out, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    assert json.loads(out)["state"] == "succeeded"
    assert runs_of(runs) == [("noop", "t", "c1", "1")]
    consistent(url)


# ------------------------------------------------------------------ 3. fold vs Core joined

POLICY = """\
version: 1
tools:
  noop:
    effect: write
    idempotency: none
    rules:
      - {id: unlucky, effect: deny, when: [{arg: n, equals: 13}]}
      - {id: big, effect: approve, when: [{arg: n, number: {min: 100}}]}
      - {id: small, effect: allow, when: [{arg: n, number: {max: 99}}]}
    limits:
      - {id: noop-total, sum: n, max: 100000}
  anoop:
    effect: write
    idempotency: none
    rules:
      - {id: any-anoop, effect: allow}
  boom:
    effect: write
    idempotency: none
    rules:
      - {id: any, effect: allow}
  pay:
    effect: write
    idempotency: none
    rules:
      - {id: any-pay, effect: allow}
"""


def gate_tools(ran: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        ran.append(f"noop {n}")
        return {"ok": n}

    def boom(n: int) -> None:
        ran.append(f"boom {n}")
        raise RuntimeError("the tool failed")

    def pay(order: str, amount: int) -> str:
        ran.append(f"pay {order}")
        return "paid"

    async def anoop(n: int) -> dict[str, Any]:
        ran.append(f"anoop {n}")
        return {"ok": n}

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    tools.register(noop, schema=schema, effect="write", idempotency="none")
    tools.register(anoop, schema=schema, effect="write", idempotency="none")
    tools.register(boom, schema=schema, effect="write", idempotency="none")
    tools.register(pay, schema={"type": "object", "properties": {
        "order": {"type": "string"}, "amount": {"type": "integer"}}},
        effect="write", idempotency="none", dedupe=["order"])
    return tools


SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("t", call("c1", "noop", n=1)),                  # new: runs at once (folded)
    ("t", call("c1", "noop", n=1)),                  # repeat of a finished call
    ("t", call("c1", "noop", n=2)),                  # conflicting arguments
    ("t", call("c2", "noop", n=13)),                 # denied by policy
    ("t", call("c3", "noop", n=500)),                # awaiting approval
    ("t", call("c4", "boom", n=4)),          # the tool raises
    ("t", call("p1", "pay", order="o1", amount=1)),
    ("t", call("p2", "pay", order="o1", amount=1)),  # same dedupe key, other call id
    ("t", call("p3", "pay", order="o1", amount=2)),  # same key, other arguments
    ("u", call("c1", "noop", n=1)),                  # the same call id in another task
    ("t", call("c3", "noop", n=500)),                # still waiting
    ("t", call("c2", "noop", n=13)),                 # a repeat of a rejected call
    ("t", call("c4", "boom", n=4)),          # a repeat of a failed call
    ("t", call("c5", "noop", n=5)),
    ("t", call("c7", "nope", n=1)),          # a tool the gate does not have
    ("t", call("c8", "noop", n="eight")),            # arguments the schema refuses
    ("t", {"call_id": "c9", "name": "noop", "arguments": "{not json"}),
    ("t", call("c8", "noop", n="eight")),
]

VOLATILE_CALL = {"created_at", "updated_at", "started_at", "finished_at",
                 "lease_expires_ms"}
VOLATILE_EVENT = {"at", "hash", "prev_hash"}


def run_script(url: str, how: str) -> tuple[list[Any], dict[str, list[dict[str, Any]]]]:
    """Run ``SCRIPT`` through a gate on ``url`` with ``how`` watching its engine;
    the outcomes and the file's rows."""
    ran: list[str] = []
    statements: list[str] = []
    with Gate(gate_tools(ran), Ledger(url, storage="fast"),
              policy=Policy.from_text(POLICY)) as gate:
        engine = gate.ledger.engine
        if how == "listener":
            @event.listens_for(engine, "before_cursor_execute")
            def _seen(_c: Any, _cur: Any, sql: str, *_a: Any) -> None:
                statements.append(sql)
        elif how == "echo":
            engine.echo = True
        outs = []
        for task, c in SCRIPT:
            out = gate.execute(task, c)
            outs.append((out.state.value, out.replayed, out.code, out.reason,
                         out.duplicate_of, out.result if out.state is CallState.SUCCEEDED
                         else None))
        gate.approve("c3", by="alice", task_id="t")
        resumed = gate.execute("t", call("c3", "noop", n=500))
        outs.append((resumed.state.value, resumed.replayed, resumed.code))
        denied = gate.decide("t", call("c6", "noop", n=13))
        outs.append((denied.state.value, denied.code))
        # An async tool under a running loop: decided in the intake, claimed after.
        for c in (call("a1", "anoop", n=1), call("a1", "anoop", n=1)):
            out = asyncio.run(gate.aexecute("t", c))
            outs.append((out.state.value, out.replayed))
        outs.append(tuple(ran))
    if how == "listener":
        inserts = [s for s in statements if s.startswith("INSERT INTO tool_calls")]
        assert inserts and all("ON CONFLICT" in s for s in inserts)  # never folded
    rows = {
        name: table(url, name)
        for name in ("tasks", "tool_calls", "audit_events", "audit_heads", "approvals",
                     "quota_charges")
    }
    return outs, rows


def stable(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    skip = {
        "tasks": {"created_at", "updated_at"},
        "tool_calls": VOLATILE_CALL,
        "audit_events": VOLATILE_EVENT,
        "audit_heads": {"hash"},
        "approvals": {"created_at", "expires_at", "expires_ms", "decided_at", "at",
                      "consumed_at"},
        "quota_charges": {"at", "created_at"},
    }
    out = {}
    for name, got in rows.items():
        drop = skip.get(name, set())
        out[name] = [{k: (_timeless(v) if k == "detail" else v)
                      for k, v in r.items() if k not in drop} for r in got]
    return out


def _timeless(detail: str | None) -> Any:
    """An audit detail without the clock readings in it (an approval's expiry)."""
    if detail is None:
        return None
    return {k: v for k, v in json.loads(detail).items() if k != "expires_ms"}


@pytest.fixture
def inserts_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ``INSERT INTO tool_calls`` statements the fast path runs (spied, not changed)."""
    seen: list[str] = []
    run = prepared.Prepared.run

    def spy(self: prepared.Prepared, conn: Any, params: Any) -> Any:
        if self.sql.startswith("INSERT INTO tool_calls"):
            seen.append(self.sql)
        return run(self, conn, params)

    monkeypatch.setattr(prepared.Prepared, "run", spy)
    yield seen


@pytest.mark.slow
@pytest.mark.parametrize("how", ["listener", "echo"])
def test_the_fold_leaves_what_core_joined_leaves(
    tmp_path: Path, how: str, inserts_seen: list[str]
) -> None:
    folded_url = new_ledger(tmp_path, "folded.db")
    outs, rows = run_script(folded_url, "plain")
    assert inserts_seen and not any("ON CONFLICT" in s for s in inserts_seen)  # folded
    other_url = new_ledger(tmp_path, "joined.db")
    other_outs, other_rows = run_script(other_url, how)
    assert other_outs == outs
    a, b = stable(rows), stable(other_rows)
    for name in a:
        assert a[name] == b[name], name
    consistent(folded_url)
    consistent(other_url)
    states = {(c["task_id"], c["call_id"]): c["state"] for c in rows["tool_calls"]}
    assert states == {
        ("t", "c1"): "succeeded", ("t", "c2"): "rejected", ("t", "c3"): "succeeded",
        ("t", "c4"): "failed", ("t", "p1"): "succeeded", ("u", "c1"): "succeeded",
        ("t", "c5"): "succeeded", ("t", "c6"): "rejected", ("t", "c7"): "rejected",
        ("t", "c8"): "rejected", ("t", "c9"): "rejected", ("t", "a1"): "succeeded",
    }


# ------------------------------------------------------------------ 4. decide faults


class PolicyBroke(Exception):
    pass


def new_call(task: str, call_id: str, key: str | None = None) -> NewCall:
    return NewCall(task, call_id, key or f"call:{call_id}", "tool", "write", "none", "h",
                   {"n": 1})


def test_a_decide_that_raises_commits_nothing_on_the_fold(tmp_path: Path) -> None:
    """``decide`` raising inside the folded intake (the ``INSERT`` deferred, the
    task row new): nothing of the transaction stays, and the call is recorded
    afresh, under the id the failed one would have taken."""
    url = new_ledger(tmp_path)
    with Ledger(url, storage="fast") as ledger:
        ledger.record(new_call("t", "before"))

        def broken(_txn: LedgerTxn, _rec: CallRecord) -> Ruling | None:
            raise PolicyBroke

        for task in ("t", "new-task"):
            with pytest.raises(PolicyBroke):
                ledger.record(new_call(task, "c1"), decide=broken)
            assert ledger.get(task, "c1") is None
        assert [e.event for e in ledger.audit()] == ["task_created", "received"]

        rec, inserted = ledger.record(new_call("new-task", "c1"), decide=lambda *_: None)
        assert inserted and rec.row_id == 2 and rec.state is CallState.RECEIVED
        assert ledger.task("new-task") is not None
    consistent(url)


@pytest.mark.parametrize("how", ["plain", "listener"])
def test_a_policy_that_raises_leaves_the_call_received_on_both_paths(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's decision raising (a policy bug) inside the intake: the call still
    commits as ``received`` (nothing recorded is lost), the error reaches the
    caller, and the next ``execute`` decides and runs it once: folded or not."""
    from agent_gate.gate.decide import Decider

    ruling_in = Decider.ruling_in
    broke: list[str] = []

    def once_broken(self: Decider, txn: LedgerTxn, rec: CallRecord, early: Any) -> Any:
        if rec.call_id == "c2" and not broke:
            broke.append(rec.call_id)
            raise PolicyBroke("the policy failed")
        return ruling_in(self, txn, rec, early)

    monkeypatch.setattr(Decider, "ruling_in", once_broken)
    url = new_ledger(tmp_path)
    ran: list[str] = []
    with Gate(gate_tools(ran), Ledger(url, storage="fast"),
              policy=Policy.from_text(POLICY)) as gate:
        if how == "listener":
            event.listen(gate.ledger.engine, "before_cursor_execute", lambda *_a: None)
        gate.execute("t", call("c1", "noop", n=1))
        with pytest.raises(PolicyBroke):
            gate.execute("t", call("c2", "noop", n=2))
        rec = gate.ledger.get("t", "c2")
        assert rec is not None and rec.state is CallState.RECEIVED and rec.version == 0
        out = gate.execute("t", call("c2", "noop", n=2))
        assert out.state is CallState.SUCCEEDED
    assert ran == ["noop 1", "noop 2"]
    trail = [(e["event"], e["to_state"]) for e in table(url, "audit_events")
             if e["call_id"] == "c2"]
    assert trail[0] == ("received", "received")
    assert [t for t in trail if t[0] == "received"] == [("received", "received")]
    consistent(url)


def test_a_decide_that_reads_after_the_deferred_insert_sees_it(tmp_path: Path) -> None:
    """A decision that reads inside the transaction (quota usage, the task's context)
    runs after the deferred ``INSERT`` went out: the row it decides is in the table,
    and the ruling it returns applies to it by compare-and-set, not folded."""
    url = new_ledger(tmp_path)
    seen: list[Any] = []
    with Ledger(url, storage="fast") as ledger:
        ledger.record(new_call("t", "before"))

        def reading(txn: LedgerTxn, rec: CallRecord) -> Ruling | None:
            seen.append(txn.usage("t", ["x"]))
            seen.append(txn.task_context("t"))
            return Ruling(Event.ALLOW, claim=("me", 60_000))

        rec, inserted = ledger.record(new_call("t", "c1"), decide=reading)
        assert inserted and rec.state is CallState.EXECUTING and rec.version == 2
        assert rec.lease_owner == "me" and rec.attempt == 1
    trail = [(e["call_id"], e["event"], e["from_state"], e["to_state"])
             for e in table(url, "audit_events")]
    assert trail[-3:] == [("c1", "received", None, "received"),
                          ("c1", "allow", "received", "authorized"),
                          ("c1", "claim", "authorized", "executing")]
    consistent(url)


def test_core_joining_inside_the_decision_sends_the_deferred_insert_first(
    tmp_path: Path,
) -> None:
    """A Core statement inside the folded intake (Core adopts the driver's
    transaction: ``dialect._on_begin``) runs after the deferred ``INSERT``: it sees
    the row, the ruling applies to it by compare-and-set, and the transaction
    commits through Core with everything in it."""
    url = new_ledger(tmp_path)
    counted: list[int] = []
    with Ledger(url, storage="fast") as ledger:
        ledger.record(new_call("t", "before"))

        def core_reading(txn: LedgerTxn, rec: CallRecord) -> Ruling | None:
            conn = txn._txn.conn  # a decision made with Core statements (an extension)
            counted.append(conn.execute(
                select(func.count()).select_from(TOOL_CALLS)
                .where(TOOL_CALLS.c.call_id == rec.call_id)
            ).scalar_one())
            assert conn.in_transaction()
            return Ruling(Event.ALLOW, claim=("me", 60_000))

        rec, inserted = ledger.record(new_call("t", "c1"), decide=core_reading)
        assert inserted and rec.state is CallState.EXECUTING and rec.version == 2
        assert ledger.get("t", "c1") == rec
    assert counted == [1]
    consistent(url)


def test_a_seen_call_by_its_key_is_the_keys_row(tmp_path: Path) -> None:
    """A new call id whose dedupe key another call of the task holds: the fold's
    one statement finds the holder (by key), inserts nothing, decides nothing."""
    url = new_ledger(tmp_path)
    decided: list[int] = []

    def decide(_txn: LedgerTxn, rec: CallRecord) -> Ruling | None:
        decided.append(rec.row_id)
        return None

    with Ledger(url, storage="fast") as ledger:
        first, _ = ledger.record(new_call("t", "a", "dedupe:k"), decide=decide)
        other, _ = ledger.record(new_call("u", "z", "dedupe:k"), decide=decide)
        again, inserted = ledger.record(new_call("t", "b", "dedupe:k"), decide=decide)
        # The call id wins over the key: "a" under another key is still "a".
        by_id, by_id_inserted = ledger.record(new_call("t", "a", "dedupe:other"),
                                              decide=decide)
    assert not inserted and again == first
    assert not by_id_inserted and by_id == first
    assert other.row_id != first.row_id
    assert decided == [first.row_id, other.row_id]
    consistent(url)


# ------------------------------------------------------------------ 5. max id reuse


def test_the_fold_chooses_the_id_sqlite_would(tmp_path: Path) -> None:
    """After a rolled-back intake and after rows of other tasks, the folded insert's
    id is the one SQLite gives an unfolded insert in the same ledger state (the
    largest plus one): both paths leave the same ids, so no id another row or an
    audit entry holds is ever taken."""
    ids: dict[str, list[int]] = {}
    for how in ("plain", "listener"):
        url = new_ledger(tmp_path, f"{how}.db")
        with Ledger(url, storage="fast") as ledger:
            if how == "listener":
                event.listen(ledger.engine, "before_cursor_execute", lambda *_a: None)

            def broken(_txn: LedgerTxn, _rec: CallRecord) -> Ruling | None:
                raise PolicyBroke

            got = []
            for n in range(3):
                got.append(ledger.record(new_call("t", f"c{n}"),
                                         decide=lambda *_: None)[0].row_id)
                with pytest.raises(PolicyBroke):
                    ledger.record(new_call("t", f"x{n}"), decide=broken)
                got.append(ledger.record(new_call(f"u{n}", "c0"),
                                         decide=lambda *_: None)[0].row_id)
            ids[how] = got
        consistent(url)
    assert ids["plain"] == ids["listener"] == [1, 2, 3, 4, 5, 6]


def test_kept_connections_and_an_old_reader_never_make_the_fold_guess_a_stale_id(
    tmp_path: Path,
) -> None:
    """Two gates on one file take turns, each on the connections it keeps between
    transactions, while a third connection holds a read snapshot from before any
    of their calls (WAL: it keeps seeing an empty table, and no checkpoint can pass
    it). Each folded intake reads the newest ``max(id)`` under its ``BEGIN
    IMMEDIATE``, never a snapshot a kept connection or a reader saw: ids follow
    each other, and the old reader still sees its old snapshot."""
    url = new_ledger(tmp_path)
    reader = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
    ran: list[str] = []
    try:
        with Gate(gate_tools(ran), Ledger(url, storage="fast")) as one, \
                Gate(gate_tools(ran), Ledger(url, storage="fast")) as two:
            for n in range(10):
                gate = one if n % 2 else two
                out = gate.execute("t", call(f"c{n}", "noop", n=n))
                assert out.state is CallState.SUCCEEDED and not out.replayed
                assert gate.ledger.get("t", f"c{n}").row_id == n + 1
                # The other gate sees the call as done (its kept connection is not
                # stuck in an older snapshot).
                assert (two if n % 2 else one).execute("t", call(f"c{n}", "noop", n=n)).replayed
        assert reader.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
    finally:
        reader.execute("COMMIT")
        reader.close()
    assert ran == [f"noop {n}" for n in range(10)]
    consistent(url)


# ------------------------------------------------------------------ SQLite before 3.35


def test_without_returning_the_intake_sends_no_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.35 has no ``RETURNING``: SQLAlchemy's dialect then says so
    (``insert_returning``/``update_returning`` False) and the ledger reads rows back
    instead (``dialect.insert_returning``, ``cas.compare_and_set``). The folded
    ``INSERT`` (``cas.Folded.send``) always asked for ``RETURNING``, a syntax error
    on such a SQLite: every call that ran at once failed. Here the dialect's flags
    are set as that SQLite sets them, and no statement may ask for ``RETURNING``."""
    sent: list[str] = []
    run = prepared.Prepared.run

    def spy(self: prepared.Prepared, conn: Any, params: Any) -> Any:
        sent.append(self.sql)
        return run(self, conn, params)

    monkeypatch.setattr(prepared.Prepared, "run", spy)
    url = new_ledger(tmp_path)
    ran: list[str] = []
    with Gate(gate_tools(ran), Ledger(url, storage="fast"),
              policy=Policy.from_text(POLICY)) as gate:
        for flag in ("insert_returning", "update_returning", "delete_returning"):
            monkeypatch.setattr(gate.ledger.engine.dialect, flag, False)
        first = gate.execute("t", call("c1", "noop", n=1))
        again = gate.execute("t", call("c1", "noop", n=1))
        waiting = gate.execute("t", call("c2", "noop", n=500))
    assert [s for s in sent if "RETURNING" in s] == []
    assert first.state is CallState.SUCCEEDED and not first.replayed
    assert again.replayed and waiting.state is CallState.AWAITING_APPROVAL
    assert ran == ["noop 1"]
    consistent(url)


# ------------------------------------------------------------------ a call row deleted


def _ledger_with_a_deleted_call(tmp_path: Path) -> tuple[str, list[str]]:
    """Three calls run; then an outsider deletes the newest call's row (the sqlite3
    shell enforces no foreign keys unless told to, so the trail's references do not
    stop it)."""
    url = new_ledger(tmp_path)
    ran: list[str] = []
    with Gate(gate_tools(ran), Ledger(url, storage="fast")) as gate:
        for n in range(3):
            gate.execute("t", call(f"c{n}", "noop", n=n))
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    con.execute("DELETE FROM tool_calls WHERE call_id = 'c2'")
    con.commit()
    con.close()
    return url, ran


def test_verify_names_a_deleted_call_row(tmp_path: Path) -> None:
    """A call whose row is gone runs again when it is sent again (nothing says it
    ran): ``audit verify`` must say the row its trail recorded was deleted."""
    url, _ = _ledger_with_a_deleted_call(tmp_path)
    with Ledger(url) as ledger:
        report = ledger.verify_audit()
    assert report.problem is not None and report.problem.kind == "call_deleted"
    assert "c2" in report.problem.message
    assert cli_verify_fails(url)


def test_verify_names_a_deleted_call_rows_id_taken_again(tmp_path: Path) -> None:
    """The largest id deleted, the next call takes it (the fold's ``max(id) + 1``,
    as SQLite's own rowid choice would): the trail of that id then starts with
    another call's ``received``. Both paths choose the same id; verify must still
    say that a recorded call's row was deleted."""
    url, ran = _ledger_with_a_deleted_call(tmp_path)
    with Gate(gate_tools(ran), Ledger(url, storage="fast")) as gate:
        gate.execute("t", call("c9", "noop", n=9))
        assert gate.ledger.get("t", "c9").row_id == 3  # the deleted row's id
        report = gate.ledger.verify_audit()
    assert report.problem is not None and report.problem.kind == "call_deleted"
    assert "c2" in report.problem.message and "c9" in report.problem.message


def cli_verify_fails(url: str) -> bool:
    result = CliRunner().invoke(cli_main, ["audit", "verify", "--db", url, "--json"])
    return result.exit_code != 0 and json.loads(result.output)["ok"] is False
