"""Compare-and-set transitions: one winner, losers see the current row, audit follows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import WORKERS

from agent_gate.ledger import CallState, Event, IllegalTransition, Ledger, NewCall, audit
from agent_gate.ledger.lease import Liveness, liveness, now_ms, this_owner
from agent_gate.ledger.txn import Txn
from agent_gate.privacy.results import StoredResult

WORKER = WORKERS / "ledger_worker.py"


def new_call(call_id: str = "c1", key: str | None = None, args_hash: str = "h1") -> NewCall:
    return NewCall(
        task_id="t", call_id=call_id, idem_key=key or f"call:{call_id}", tool="send",
        effect="write", idempotency="none", args_hash=args_hash, arguments={"to": "x"},
    )


@pytest.fixture
def ledger(db_url: str) -> Ledger:
    with Ledger(db_url) as ledger:
        yield ledger


def authorized(ledger: Ledger, call_id: str = "c1") -> None:
    rec, _ = ledger.record(new_call(call_id))
    assert ledger.transition(rec, Event.ALLOW).won


def test_record_once_then_return_the_existing_row(ledger: Ledger) -> None:
    rec, inserted = ledger.record(new_call())
    assert inserted and rec.state is CallState.RECEIVED and rec.version == 0
    assert rec.arguments == {"to": "x"}
    again, inserted_again = ledger.record(new_call())
    assert not inserted_again and again.row_id == rec.row_id
    events = [(a.event, a.call_id) for a in ledger.audit("t")]
    assert events == [("task_created", None), ("received", "c1")]


def test_same_key_under_a_new_call_id_returns_the_first_row(ledger: Ledger) -> None:
    first, _ = ledger.record(new_call("c1", key="dedupe:send:abc"))
    second, inserted = ledger.record(new_call("c2", key="dedupe:send:abc"))
    assert not inserted
    assert second.row_id == first.row_id and second.call_id == "c1"
    assert ledger.get("t", "c2") is None


def test_stale_transition_loses_and_returns_current_state(db_url: str) -> None:
    with Ledger(db_url) as a, Ledger(db_url) as b:
        rec, _ = a.record(new_call())
        stale = b.get("t", "c1")
        assert stale is not None
        won = a.transition(rec, Event.ALLOW, code="allowed")
        assert won.won and won.record.state is CallState.AUTHORIZED
        assert won.record.version == 1 and won.record.reason_code == "allowed"
        lost = b.transition(stale, Event.REJECT, code="late")
        assert not lost.won
        assert lost.record.state is CallState.AUTHORIZED and lost.record.version == 1
        # The loser wrote nothing, not even an audit event.
        assert [e.event for e in a.audit("t")] == ["task_created", "received", "allow"]


def test_illegal_transition_is_a_bug_not_a_race(ledger: Ledger) -> None:
    rec, _ = ledger.record(new_call())
    with pytest.raises(IllegalTransition):
        ledger.transition(rec, Event.SUCCEED)


def test_claim_renew_finish(ledger: Ledger) -> None:
    authorized(ledger)
    rec = ledger.get("t", "c1")
    assert rec is not None
    owner = this_owner()
    claimed = ledger.claim(rec, owner=owner, lease_ms=1_000)
    assert claimed.won
    c = claimed.record
    assert c.state is CallState.EXECUTING and c.attempt == 1 and c.lease_owner == owner
    assert c.lease_expires_ms is not None and c.started_at is not None
    before = c.lease_expires_ms
    assert ledger.renew(c, owner=owner, lease_ms=60_000)
    renewed = ledger.get_row(c.row_id)
    assert renewed is not None and renewed.version == c.version  # not a transition
    assert renewed.lease_expires_ms is not None and renewed.lease_expires_ms > before
    assert not ledger.renew(c, owner="someone-else", lease_ms=60_000)

    done = ledger.finish(c, Event.SUCCEED, actor=owner,
                         result=StoredResult.encode({"id": 7}, 1000))
    assert done.won
    r = done.record
    assert r.state is CallState.SUCCEEDED and r.result == {"id": 7} and not r.result_omitted
    assert r.lease_owner is None and r.lease_expires_ms is None and r.finished_at is not None
    # A renewal after the end cannot bring the lease back.
    assert not ledger.renew(c, owner=owner, lease_ms=60_000)


def test_large_results_keep_only_hash_and_size(ledger: Ledger) -> None:
    authorized(ledger)
    rec = ledger.get("t", "c1")
    assert rec is not None
    c = ledger.claim(rec, owner=this_owner(), lease_ms=1_000).record
    big = {"blob": "x" * 5000}
    stored = StoredResult.encode(big, max_bytes=100)
    r = ledger.finish(c, Event.SUCCEED, actor="me", result=stored).record
    assert r.result is None and r.result_omitted
    assert r.result_bytes == stored.size > 5000 and r.result_sha256 == stored.sha256


def test_lose_if_abandoned_never_steals_a_renewed_lease(ledger: Ledger) -> None:
    authorized(ledger)
    rec = ledger.get("t", "c1")
    assert rec is not None
    c = ledger.claim(rec, owner="host:1:0:x", lease_ms=-1).record  # already expired
    assert c.lease_expires_ms is not None and c.lease_expires_ms < now_ms()
    # The owner renews between the sweeper's read and its update.
    assert ledger.renew(c, owner="host:1:0:x", lease_ms=60_000)
    lost = ledger.lose_if_abandoned(c, actor="sweeper", expired_only=True,
                                    code="lease_expired", reason="r")
    assert not lost.won and lost.record.state is CallState.EXECUTING
    # Judged by liveness instead (same owner, dead process): it applies.
    gone = ledger.lose_if_abandoned(c, actor="sweeper", expired_only=False,
                                    code="owner_dead", reason="owner process is gone")
    assert gone.won and gone.record.state is CallState.IN_DOUBT
    assert gone.record.reason_code == "owner_dead" and gone.record.attempt == 1
    audit = [e for e in ledger.audit("t") if e.event == "lose"]
    assert audit[0].detail == {"version": gone.record.version, "code": "owner_dead",
                               "owner": "host:1:0:x", "attempt": 1}


@pytest.mark.slow
def test_racing_processes_claim_once(tmp_path: Path, db_url: str) -> None:
    with Ledger(db_url) as ledger:
        authorized(ledger, "race")
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(8)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "claim", db_url, str(go), "race", str(r)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in ready
    ]
    # Start the race only once every worker has read the row as authorized.
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in ready):
        assert time.monotonic() < deadline, "workers never became ready"
        assert all(p.poll() is None for p in procs), "a worker died before the race"
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sum(r["won"] for r in results) == 1
    # Every loser was told the state the winner left, not the one it had read.
    assert all(r["state"] == "executing" and r["attempt"] == 1 for r in results)
    with Ledger(db_url) as ledger:
        assert [e.event for e in ledger.audit("t")].count("claim") == 1


def test_task_terminal_is_recorded(ledger: Ledger) -> None:
    ledger.record_terminal("t", "incomplete", "max_output_tokens")
    task = ledger.task("t")
    assert task is not None
    assert (task.terminal, task.terminal_reason) == ("incomplete", "max_output_tokens")
    assert ledger.task("nope") is None


def test_liveness_of_owners() -> None:
    assert liveness(this_owner()) is Liveness.ALIVE
    proc = subprocess.Popen([sys.executable, "-c",
                             "from agent_gate.ledger.lease import this_owner; print(this_owner())"],
                            stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    assert liveness(out.strip()) is Liveness.DEAD  # exited and reaped
    assert liveness("other-host:1:0:abc") is Liveness.UNKNOWN
    mine = this_owner().rsplit(":", 1)[0]
    assert liveness(mine + ":not-my-nonce") is Liveness.DEAD  # an earlier process, same pid
    assert liveness(None) is Liveness.DEAD


def test_within_commits_with_the_transition_or_not_at_all(db_url: str) -> None:
    with Ledger(db_url) as a, Ledger(db_url) as b:
        rec, _ = a.record(new_call())
        stale = b.get("t", "c1")
        assert stale is not None
        calls: list[tuple[int, str]] = []

        def count(txn: Txn, row: Any) -> None:
            calls.append((row.version, row.state.value))
            audit.append(txn, task_id="t", event="quota")

        def refuse(conn: Any, row: Any) -> None:
            raise RuntimeError("quota exceeded")

        with pytest.raises(RuntimeError, match="quota exceeded"):
            a.transition(rec, Event.ALLOW, within=refuse)
        assert a.get("t", "c1").state is CallState.RECEIVED  # rolled back with it
        assert a.transition(rec, Event.ALLOW, within=count).won
        assert not b.transition(stale, Event.ALLOW, within=count).won  # not run for a loser
        assert calls == [(1, "authorized")]
        events = [e.event for e in a.audit("t")]
        assert events.count("quota") == 1 and events.count("allow") == 1
        # The claim takes the same hook (approvals are consumed by the winning claim).
        authorized = a.get("t", "c1")
        assert authorized is not None
        assert a.claim(authorized, owner="me", lease_ms=1000, within=count).won
        assert calls == [(1, "authorized"), (2, "executing")]
