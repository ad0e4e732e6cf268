"""Two workers racing to spend one grant never overspend it (issue 32): each covered
call spends the grant with one conditional update in its own transaction, so the
count holds whatever either worker read before."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from support.grants import grant_tools, write_policy

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Ledger, grants
from agent_gate.ledger.backend import writing

WORKERS = 2
CALLS_EACH = 6


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    return write_policy(tmp_path)


def _granted(url: str, policy: Path, tools: ToolRegistry) -> None:
    with Gate(tools, url, policy=policy) as g:
        g.execute("t", {"call_id": "first", "name": "send_email", "arguments": {"to": "x"}})
        g.approve("first", by="alice", task_id="t", grant="five-more")
        g.resume("t")


def test_two_workers_spend_a_grant_of_five_exactly_five_times(
    db_url: str, policy: Path
) -> None:
    ran: Counter[str] = Counter()
    lock = threading.Lock()
    tools = grant_tools(ran)
    _granted(db_url, policy, tools)
    start = threading.Barrier(WORKERS)
    states: list[CallState] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with Gate(tools, db_url, policy=policy) as g:  # its own engine and connections
                start.wait()
                for i in range(CALLS_EACH):
                    out = g.execute("t", {"call_id": f"w{n}-{i}", "name": "send_email",
                                          "arguments": {"to": f"w{n}-{i}"}})
                    with lock:
                        states.append(out.state)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Counter(states) == Counter({CallState.SUCCEEDED: 5,
                                       CallState.AWAITING_APPROVAL: WORKERS * CALLS_EACH - 5})
    with Ledger(db_url) as ledger:
        (grant,) = ledger.grants(task_id="t")
        assert (grant.used_calls, grant.status) == (5, "used up")
        covered = {e.call_id for e in ledger.audit("t")
                   if e.event == "allow" and (e.detail or {}).get("grant_id") == grant.id}
    assert len(covered) == 5
    assert sum(ran.values()) == 1 + 5  # the approved call, and the five it covered


def test_a_spend_judged_on_a_stale_read_does_not_match(db_url: str, policy: Path) -> None:
    """The update is the check: a worker that read the grant live before another spent
    its last call cannot spend it again."""
    ran: Counter[str] = Counter()
    tools = grant_tools(ran)
    _granted(db_url, policy, tools)
    with Ledger(db_url) as ledger:
        first = ledger.get("t", "first")
        with ledger.reading() as snapshot:
            (seen,) = snapshot.live_grants("t", "send_email", _hash(policy))
    with Gate(tools, db_url, policy=policy) as g:
        for i in range(5):
            out = g.execute("t", {"call_id": f"c{i}", "name": "send_email",
                                  "arguments": {"to": f"c{i}"}})
            assert out.state is CallState.SUCCEEDED
    assert seen.used_calls == 0  # what the stale read still says; the row says 5
    with Ledger(db_url) as ledger:
        with writing(ledger.engine) as txn:
            assert grants.spend(txn, seen.id, first.row_id) is False
        (after,) = ledger.grants(task_id="t")
        assert after.used_calls == 5


def _hash(policy: Path) -> str:
    from agent_gate.policy import Policy

    return Policy.load(policy).hash
