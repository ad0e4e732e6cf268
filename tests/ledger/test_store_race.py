"""Many workers, one ledger: exactly-once side effects, quotas, approvals and the audit
chain under real contention, with workers SIGKILLed in the middle.

Per round, 8 replay workers replay the same two transcripts into the same two
shared tasks at once (each in its own order), while 3 consumer workers run the
same transcript into tasks of their own. The transcripts ask for more than the
policy allows (12 transfers of 300 against a per-task sum of 1000; 8 posts against
a per-task count of 5), and each carries a call that needs a person's approval;
the test approves between the two phases of a round, and then the workers resume
or replay again, racing to use the approvals. An audit verifier runs throughout.

In one round a `hold_post` call (idempotency ``none``) holds its worker mid-tool and
that worker, whichever won the call, is SIGKILLed; in the last round a random
consumer is SIGKILLed at a random moment. Afterwards 4 processes sweep at once and
2 resume every task at once. Then, counting side effects in a file outside the
ledger: every call ran exactly once or not at all (in doubt: at most once, and only
calls the killed workers held), quotas were never exceeded, every approval was
consumed once by the one attempt that ran, and the audit chain verifies.

It runs on both backends: PostgreSQL is what many workers share; the embedded
SQLite default must keep the same promises when several processes share its file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from support import WORKERS
from support.race_tools import POLICY, POST_LIMIT, TRANSFER_LIMIT, tools

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger

WORKER = WORKERS / "race_worker.py"
AGENT_GATE = Path(sys.executable).with_name("agent-gate")

ROUNDS = 3
REPLAYERS = 8
CONSUMERS = 3
SHARED_TASKS = 2
KILL_MID_TOOL_ROUND = 1
RANDOM_KILL_ROUND = ROUNDS - 1
SWEEPERS = 4
RESUMERS = 2
TRANSFER_AMOUNT = 300
WAIT = 300.0



# ----------------------------------------------------------------- transcripts


def sse_transcript(path: Path, resp_id: str, calls: list[tuple[str, str, dict[str, Any]]]) -> str:
    """An OpenAI Responses stream whose function calls arrive in argument deltas."""
    out: list[str] = []
    items: list[dict[str, Any]] = []

    def emit(kind: str, **data: Any) -> None:
        body = {"type": kind, **data, "sequence_number": len(out)}
        out.append(f"event: {kind}\ndata: {json.dumps(body)}\n\n")

    emit("response.created", response={"id": resp_id, "object": "response",
                                       "status": "in_progress", "output": []})
    for i, (call_id, name, args) in enumerate(calls):
        item_id = f"fc_{resp_id}_{i}"
        arguments = json.dumps(args)
        item = {"id": item_id, "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": call_id, "name": name}
        emit("response.output_item.added", output_index=i, item=item)
        half = len(arguments) // 2
        for delta in (arguments[:half], arguments[half:]):
            emit("response.function_call_arguments.delta", item_id=item_id, output_index=i,
                 delta=delta)
        emit("response.function_call_arguments.done", item_id=item_id, output_index=i,
             arguments=arguments)
        done = {**item, "status": "completed", "arguments": arguments}
        items.append(done)
        emit("response.output_item.done", output_index=i, item=done)
    emit("response.completed", response={"id": resp_id, "object": "response",
                                         "status": "completed", "output": items})
    path.write_text("".join(out), encoding="utf-8")
    return str(path)


def calls_of(prefix: str, *, hold: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    calls: list[tuple[str, str, dict[str, Any]]] = [(f"{prefix}-look", "lookup", {"q": prefix})]
    calls += [(f"{prefix}-t{i}", "transfer", {"amount": TRANSFER_AMOUNT, "n": i})
              for i in range(6)]
    calls += [(f"{prefix}-p{i}", "post", {"n": i}) for i in range(4)]
    if hold:
        calls.append((f"{prefix}-hold", "hold_post", {"n": 0}))
    calls.append((f"{prefix}-ship", "ship", {"parcel": prefix}))
    return calls


def make_plan(workdir: Path) -> dict[str, Any]:
    a = sse_transcript(workdir / "a.sse", "resp_a", calls_of("a"))
    b = sse_transcript(workdir / "b.sse", "resp_b", calls_of("b"))
    a_hold = sse_transcript(workdir / "a_hold.sse", "resp_ah", calls_of("a", hold=True))
    rounds = []
    for r in range(ROUNDS):
        shared = [
            {"task": f"r{r}-s{j}",
             "transcripts": [a_hold if (r == KILL_MID_TOOL_ROUND and j == 0) else a, b]}
            for j in range(SHARED_TASKS)
        ]
        own = {f"c{i}": [{"task": f"r{r}-c{i}-{k}", "transcript": a} for k in range(2)]
               for i in range(CONSUMERS)}
        rounds.append({"shared": shared, "own": own})
    plan = {"rounds": rounds}
    (workdir / "plan.json").write_text(json.dumps(plan))
    return plan


# ------------------------------------------------------------------ processes


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_files(
    paths: list[Path], what: str, procs: dict[str, subprocess.Popen[str]]
) -> None:
    """Until every path exists (bounded), failing early if a process failed."""
    deadline = time.monotonic() + WAIT
    while not all(p.exists() for p in paths):
        for name, proc in procs.items():
            if proc.poll() not in (None, 0, -signal.SIGKILL):
                raise AssertionError(f"{name} failed: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def wait_for_glob(
    directory: Path, pattern: str, procs: dict[str, subprocess.Popen[str]]
) -> Path:
    deadline = time.monotonic() + WAIT
    while not (found := sorted(directory.glob(pattern))):
        for name, proc in procs.items():
            if proc.poll() not in (None, 0, -signal.SIGKILL):
                raise AssertionError(f"{name} failed: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {pattern}"
        time.sleep(0.02)
    return found[0]


def approve_all(url: str, policy: Path) -> int:
    """An operator approves everything waiting (the approval is bound to the call's
    arguments and the policy hash; the gate consumes it when it claims the call)."""
    granted = 0
    with Gate(tools, url, policy=policy) as gate:
        for rec in gate.ledger.calls(states=[CallState.AWAITING_APPROVAL]):
            _, new = gate.approve(rec.call_id, by="ops", task_id=rec.task_id)
            granted += new
    return granted


def effect_counts(path: Path) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], set[str]]]:
    counts: Counter[tuple[str, str]] = Counter()
    pids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in path.read_text(encoding="utf-8").splitlines():
        task, call_id, _tool, _attempt, pid = line.split(" ")
        counts[(task, call_id)] += 1
        pids[(task, call_id)].add(pid.removeprefix("pid="))
    return counts, pids


# ----------------------------------------------------------------------- test


@pytest.mark.slow
def test_racing_workers_and_killed_workers_run_every_effect_at_most_once(
    db_url: str, tmp_path: Path, effects_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("AG_RACE_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    print(f"race seed {seed} (AG_RACE_SEED={seed} reproduces the random kill)")
    workdir = tmp_path / "race"
    workdir.mkdir()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    hold = workdir / "hold"
    monkeypatch.setenv("AG_HOLD", str(hold))
    plan = make_plan(workdir)

    workers = {f"r{i}": spawn("work", db_url, str(policy), str(workdir), f"r{i}", "replay",
                              str(ROUNDS)) for i in range(REPLAYERS)}
    workers |= {f"c{i}": spawn("work", db_url, str(policy), str(workdir), f"c{i}", "consume",
                               str(ROUNDS)) for i in range(CONSUMERS)}
    verifier = spawn("verify", db_url, str(workdir))
    pid_of = {name: p.pid for name, p in workers.items()}
    killed: dict[str, int] = {}
    approved = 0
    started = time.monotonic()

    def progress(what: str) -> None:  # shown with the output of a failing run
        print(f"{time.monotonic() - started:7.1f}s {what}")

    try:
        # Start the race only when every worker is up, so that they really race.
        wait_for_files([workdir / f"ready-{n}" for n in workers], "workers ready", workers)
        for r in range(ROUNDS):
            if r == KILL_MID_TOOL_ROUND:
                hold.touch()
            progress(f"round {r}: go")
            (workdir / f"go-{r}-a").touch()
            if r == KILL_MID_TOOL_ROUND:
                running = wait_for_glob(workdir, "hold.running-*", workers)
                pid = int(running.name.rsplit("-", 1)[1])
                (victim,) = [n for n, p in pid_of.items() if p == pid]
                os.kill(pid, signal.SIGKILL)
                workers[victim].wait(timeout=60)
                killed[victim] = pid
                progress(f"round {r}: SIGKILLed {victim} inside hold_post")
                hold.unlink()
            if r == RANDOM_KILL_ROUND:
                victim = rng.choice(sorted(n for n in workers if n.startswith("c")))
                time.sleep(rng.uniform(0.0, 1.5))  # a kill at a random moment is the test
                os.kill(pid_of[victim], signal.SIGKILL)
                workers[victim].wait(timeout=60)
                killed[victim] = pid_of[victim]
                progress(f"round {r}: SIGKILLed {victim} at random")
            alive = [n for n in workers if n not in killed]
            wait_for_files([workdir / f"done-{r}-a-{n}" for n in alive],
                           f"round {r} phase a", workers)
            progress(f"round {r}: phase a done")
            approved += approve_all(db_url, policy)
            (workdir / f"go-{r}-b").touch()
            wait_for_files([workdir / f"done-{r}-b-{n}" for n in alive],
                           f"round {r} phase b", workers)
            progress(f"round {r}: phase b done")
        for name, p in workers.items():
            _, err = p.communicate(timeout=WAIT)
            assert p.returncode == (-signal.SIGKILL if name in killed else 0), err[-3000:]

        # Several sweepers at once, then several resumers at once.
        sweepers = {f"s{i}": spawn("sweep", db_url, str(policy), str(workdir), f"s{i}")
                    for i in range(SWEEPERS)}
        progress("sweep")
        (workdir / "go-sweep").touch()
        for name, p in sweepers.items():
            _, err = p.communicate(timeout=WAIT)
            assert p.returncode == 0, f"{name}: {err[-3000:]}"
        approved += approve_all(db_url, policy)  # what the random kill left unasked
        resumers = {f"m{i}": spawn("resume", db_url, str(policy), str(workdir), f"m{i}")
                    for i in range(RESUMERS)}
        progress("resume")
        (workdir / "go-resume").touch()
        for name, p in resumers.items():
            _, err = p.communicate(timeout=WAIT)
            assert p.returncode == 0, f"{name}: {err[-3000:]}"
        progress("done")
    finally:
        (workdir / "stop-verify").touch()
        hold.unlink(missing_ok=True)
        for p in workers.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)
    out, err = verifier.communicate(timeout=WAIT)
    assert verifier.returncode == 0, out + err[-3000:]
    verified = json.loads(out)
    assert verified["failure"] is None and verified["checks"] > 0

    check_ledger(db_url, plan, effects_file, killed, approved)


def check_ledger(
    url: str, plan: dict[str, Any], effects_file: Path, killed: dict[str, int], approved: int
) -> None:
    effects, effect_pids = effect_counts(effects_file)
    killed_pids = {str(p) for p in killed.values()}
    with Ledger(url) as ledger:
        calls = ledger.calls()
        audit = ledger.audit()
        report = ledger.verify_audit()
        with ledger.engine.connect() as conn:
            charges = conn.execute(text(
                "SELECT task_id, counter, amount FROM quota_charges")).all()
            approvals = conn.execute(text(
                "SELECT call_row_id, verdict, consumed_attempt FROM approvals")).all()
    assert report.ok, report.to_dict()
    cli = subprocess.run([str(AGENT_GATE), "audit", "verify", "--db", url],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr

    planned = {s["task"] for spec in plan["rounds"] for s in spec["shared"]} | {
        o["task"] for spec in plan["rounds"] for own in spec["own"].values() for o in own}
    by_row = {c.row_id: c for c in calls}
    claims: Counter[int] = Counter()
    loses: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in audit:
        if e.call_row_id is not None and e.event == "claim":
            claims[e.call_row_id] += 1
        if e.call_row_id is not None and e.event == "lose":
            loses[e.call_row_id].append(e.detail or {})

    in_doubt = []
    for c in calls:
        key = (c.task_id, c.call_id)
        n = effects[key]
        assert c.state in (CallState.SUCCEEDED, CallState.REJECTED, CallState.IN_DOUBT), (
            key, c.state, c.reason)
        assert claims[c.row_id] == c.attempt, (key, claims[c.row_id], c.attempt)
        if c.idempotency == "none":
            assert c.attempt <= 1 and n <= 1, (key, c.attempt, n)
        if c.state is CallState.SUCCEEDED:
            # It ran, at most once per attempt; a second attempt only for a retry-safe
            # tool whose first worker was killed.
            assert 1 <= n <= c.attempt, (key, n, c.attempt)
            if c.attempt > 1:
                assert c.idempotency == "natural" and loses[c.row_id], key
        elif c.state is CallState.REJECTED:
            assert n == 0 and c.attempt == 0, (key, n)
        else:
            in_doubt.append(c)
            assert n <= 1, key
            # Only a killed worker's in-flight call may be in doubt, and the sweep (or a
            # worker that found its owner dead) said so once.
            (lose,) = loses[c.row_id]
            assert lose.get("code") == "owner_dead", lose
            owner_pid = str(lose["owner"]).rsplit(":", 3)[1]
            assert owner_pid in killed_pids, (key, lose)
            assert effect_pids[key] <= killed_pids, key
        if n:  # the effect was produced by a process that claimed the call
            assert c.attempt >= 1, key

    hold_calls = [c for c in calls if c.tool == "hold_post"]
    assert len(hold_calls) == 1
    assert hold_calls[0].state is CallState.IN_DOUBT and effects[
        (hold_calls[0].task_id, hold_calls[0].call_id)] == 1
    # No effect without a ledger row, and no row for a task the plan does not have.
    assert set(effects) <= {(c.task_id, c.call_id) for c in calls}
    assert {c.task_id for c in calls} <= planned

    # Quotas: charged per task in the authorizing transaction, never exceeded.
    sums: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for task_id, counter, amount in charges:
        sums[(task_id, counter)] += Decimal(amount)
    for (task_id, counter), total in sums.items():
        limit = TRANSFER_LIMIT if "transfer" in counter else POST_LIMIT
        assert total <= limit, (task_id, counter, total)
    per_task: dict[str, Counter[str]] = defaultdict(Counter)
    for c in calls:
        if c.state is CallState.SUCCEEDED or c.attempt:
            per_task[c.task_id][c.tool] += 1
    for task_id, ran in per_task.items():
        assert ran["transfer"] * TRANSFER_AMOUNT <= TRANSFER_LIMIT, (task_id, ran)
        assert ran["post"] <= POST_LIMIT, (task_id, ran)
    # The shared tasks ask for 12 transfers and 8 posts: exactly the quota ran.
    for spec in plan["rounds"]:
        for s in spec["shared"]:
            ran = per_task[s["task"]]
            assert ran["transfer"] == TRANSFER_LIMIT // TRANSFER_AMOUNT, (s["task"], ran)
            assert ran["post"] == POST_LIMIT, (s["task"], ran)

    # Approvals: every one granted was consumed by exactly one attempt, the one that ran.
    assert approved == len(approvals) > 0
    for call_row_id, verdict, consumed_attempt in approvals:
        rec = by_row[call_row_id]
        assert verdict == "approved" and consumed_attempt == 1 == rec.attempt, (
            rec.task_id, rec.call_id, consumed_attempt)
        assert effects[(rec.task_id, rec.call_id)] <= 1
    ships = [c for c in calls if c.tool == "ship"]
    assert len({a[0] for a in approvals}) == len(approvals) == len(ships)
    assert all(c.state in (CallState.SUCCEEDED, CallState.IN_DOUBT) for c in ships)
    states = Counter(c.state.value for c in calls)
    print(f"{len(calls)} calls {dict(states)}; {sum(effects.values())} side effects; "
          f"{len(approvals)} approvals consumed; {report.entries} audit entries verified")
