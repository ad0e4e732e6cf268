"""A worker that died holding many calls, and the in-doubt sweep run by several
processes at once while other workers receive the same calls again.

The dead worker (SIGKILLed after it committed ``executing`` for 24 calls and before
running any) leaves them to the sweep: a call that is not retry-safe becomes
``in_doubt`` and is run by nobody; a retry-safe one is run again exactly once; one
with a reconcile hook is settled by it (once). Six sweepers and two workers
replaying the same calls race for every step; each step happens once, which the
audit trail and the side-effect file (outside the ledger) both show. Calls held by
a live worker are left alone; those of a worker on another host are judged by the
lease expiry alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import WORKERS
from support.calls import call
from support.race_tools import tools

from agent_gate import CallState, Gate
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.canonical import arguments_hash
from agent_gate.ledger.lease import Liveness, liveness, this_owner

WORKER = WORKERS / "race_worker.py"
SWEEPERS = 6
EXECUTORS = 2
TASK = "abandoned"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def claim_as(ledger: Ledger, task: str, c: dict[str, Any], owner: str, lease_ms: int) -> None:
    spec = tools.get(c["name"])
    assert spec is not None
    rec, _ = ledger.record(NewCall(
        task_id=task, call_id=c["call_id"], idem_key=f"call:{c['call_id']}", tool=c["name"],
        effect=spec.spec.effect.value, idempotency=spec.spec.idempotency.value,
        args_hash=arguments_hash(c["arguments"]), arguments=c["arguments"],
    ))
    rec = ledger.transition(rec, Event.ALLOW, code="allowed").record
    assert ledger.claim(rec, owner=owner, lease_ms=lease_ms).won


@pytest.mark.slow
def test_several_sweepers_settle_a_dead_workers_calls_once_each(
    db_url: str, tmp_path: Path, effects_file: Path
) -> None:
    abandoned = (
        [call(f"post-{i}", "post", id=f"post-{i}") for i in range(8)]
        + [call(f"put-{i}", "put", id=f"put-{i}") for i in range(8)]
        + [call(f"checked-{i}", "checked", id=f"checked-{i}") for i in range(8)]
    )
    workdir = tmp_path / "sweep"
    workdir.mkdir()
    (workdir / "calls.json").write_text(json.dumps([{"task": TASK, "call": c}
                                                    for c in abandoned]))
    # "Downstream" already has the writes of checked-0..3: their worker died after
    # the write and before reporting it; checked-4..7 died before writing.
    effects_file.write_text("".join(f"{TASK} checked-{i} checked attempt=1 pid=0\n"
                                    for i in range(4)))

    dead = subprocess.run([sys.executable, str(WORKER), "abandon", db_url, str(workdir)],
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode == -9, dead.stderr
    dead_owner = dead.stdout.strip()
    assert liveness(dead_owner) is Liveness.DEAD

    with Ledger(db_url) as ledger:
        # A live worker's calls (this process, long lease) and a worker on another
        # host whose lease ran out.
        for i in range(2):
            live, remote = f"live-{i}", f"remote-{i}"
            claim_as(ledger, "live", call(live, "post", id=live), this_owner(), 600_000)
            claim_as(ledger, "remote", call(remote, "post", id=remote), "far~away:42:1:n", -1)
        assert len(ledger.calls(states=[CallState.EXECUTING])) == len(abandoned) + 4

    procs = {f"s{i}": spawn("sweep", db_url, "-", str(workdir), f"s{i}")
             for i in range(SWEEPERS)}
    procs |= {f"e{i}": spawn("execute", db_url, "-", str(workdir), f"e{i}")
              for i in range(EXECUTORS)}
    (workdir / "go-sweep").touch()
    for name, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{name}: {err[-3000:]}"

    effects = Counter(" ".join(line.split(" ")[:2])
                      for line in effects_file.read_text(encoding="utf-8").splitlines())
    with Ledger(db_url) as ledger:
        calls = {(c.task_id, c.call_id): c for c in ledger.calls()}
        events: dict[int, Counter[str]] = defaultdict(Counter)
        for e in ledger.audit():
            if e.call_row_id is not None:
                events[e.call_row_id][e.event] += 1
        assert ledger.verify_audit().ok

    for i in range(8):
        post = calls[(TASK, f"post-{i}")]
        assert post.state is CallState.IN_DOUBT and post.reason_code == "owner_dead"
        assert (post.attempt, effects[f"{TASK} post-{i}"]) == (1, 0)  # nobody ran it
        assert events[post.row_id]["lose"] == 1 and events[post.row_id]["retry"] == 0

        put = calls[(TASK, f"put-{i}")]
        assert put.state is CallState.SUCCEEDED and put.attempt == 2
        assert effects[f"{TASK} put-{i}"] == 1  # run again once, by one process
        assert [events[put.row_id][e] for e in ("lose", "retry", "claim", "succeed")] == [
            1, 1, 2, 1]

        checked = calls[(TASK, f"checked-{i}")]
        assert checked.state is CallState.SUCCEEDED
        assert effects[f"{TASK} checked-{i}"] == 1
        if i < 4:  # the hook found the write: settled, not run
            assert checked.attempt == 1 and checked.reason_code == "reconciled"
            assert events[checked.row_id]["settle_succeeded"] == 1
        else:  # the hook found nothing: run once more
            assert checked.attempt == 2 and events[checked.row_id]["retry"] == 1
        assert events[checked.row_id]["lose"] == 1

    for i in range(2):
        live = calls[("live", f"live-{i}")]
        assert live.state is CallState.EXECUTING and live.lease_owner == this_owner()
        assert events[live.row_id]["lose"] == 0
        remote = calls[("remote", f"remote-{i}")]
        assert remote.state is CallState.IN_DOUBT and remote.reason_code == "lease_expired"
        assert events[remote.row_id]["lose"] == 1

    # Sweeping again changes nothing.
    with Gate(tools, db_url) as gate:
        again = gate.recover()
    assert {o.state for o in again} == {CallState.IN_DOUBT, CallState.EXECUTING}
    assert all(o.replayed for o in again)
