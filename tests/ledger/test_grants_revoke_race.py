"""A grant revoked while covered calls are being decided, on PostgreSQL (issue 31): the
grant is spent at most as many times as it allows, and never once the revoke has
committed, whichever of the two reaches the task's lock first.

Why PostgreSQL: there a decision and a revoke are two real sessions that can be in
flight at once (SQLite has one writer). The interleavings are forced with a third
session's row lock on the grant, and each step is awaited by watching
``pg_stat_activity`` for the sessions that wait on a lock (bounded polls, no sleeps):
no hook in the code under test.

Two things hold the rule, each enough alone in these interleavings: the revoke takes
the task's lock a decision holds, and a spend's update re-checks ``revoked_at`` (read
again after the row lock it waited for). With neither, the call behind the revoke
runs on the revoked grant and the unforced race spends past the revoke (checked by
removing both: four of six fail).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ledger_backends import PgSchema
from sqlalchemy import Engine, create_engine, text
from waiting import wait_until

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger import Ledger

pytestmark = pytest.mark.backends("postgresql")

MAX_CALLS = 6
POLICY = f"""
version: 1
tools:
  send_email:
    effect: write
    rules:
      - id: mail-needs-a-person
        effect: approve
        approval:
          grants:
            - {{id: a-few-more, calls: {MAX_CALLS}}}
"""


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


class Sent:
    """The mails the tool sent, counted across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.to: Counter[str] = Counter()

    def tools(self) -> ToolRegistry:
        tools = ToolRegistry()

        def send_email(to: str) -> str:
            with self.lock:
                self.to[to] += 1
            return "sent"

        tools.register(send_email, effect="write")
        return tools


def granted(url: str, policy: Path, sent: Sent) -> int:
    """A first call approved with the grant (and run); the grant's id."""
    with Gate(sent.tools(), url, policy=policy) as g:
        g.execute("t", {"call_id": "first", "name": "send_email", "arguments": {"to": "first"}})
        g.approve("first", by="alice", task_id="t", grant="a-few-more")
        g.resume("t")
    with Ledger(url) as ledger:
        (grant,) = ledger.grants(task_id="t")
    return grant.id


def covered(url: str, grant_id: int) -> set[str]:
    """The calls the grant authorized, by their audit entries."""
    with Ledger(url) as ledger:
        return {e.call_id for e in ledger.audit("t")
                if e.event == "allow" and (e.detail or {}).get("grant_id") == grant_id
                and e.call_id is not None}


def used(url: str) -> int:
    with Ledger(url) as ledger:
        (grant,) = ledger.grants(task_id="t")
    return grant.used_calls


class Background:
    """One thread running ``fn``; its result or its exception, read when joined."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = fn()
            except BaseException as exc:  # re-raised in the test's thread by join()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the thread did not end"
        if self.error is not None:
            raise self.error
        return self.value


def lock_waiters(admin: Engine, schema: str) -> int:
    """How many of the test's sessions wait on a lock now."""
    with admin.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
            "AND wait_event_type = 'Lock'"), {"name": schema}).scalar_one())


@contextmanager
def grant_row_held(url: str, grant_id: int) -> Iterator[None]:
    """A third session holding the grant's row lock until the block ends: whoever
    updates the grant (a spend, a revoke) waits there, inside their transaction."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn, conn.begin() as txn:
            conn.execute(text("SELECT id FROM approval_grants WHERE id = :id FOR UPDATE"),
                         {"id": grant_id})
            yield
            txn.rollback()
    finally:
        engine.dispose()


def execute(url: str, policy: Path, sent: Sent, call_id: str) -> CallState:
    with Gate(sent.tools(), url, policy=policy) as g:
        out = g.execute("t", {"call_id": call_id, "name": "send_email",
                              "arguments": {"to": call_id}})
    return out.state


def revoke(url: str, grant_id: int) -> int:
    """Revoke the grant; how many calls it had covered when the revoke committed."""
    with Ledger(url) as ledger:
        return ledger.revoke_grant(grant_id, by="bob", reason="enough").used_calls


def test_a_call_deciding_when_the_revoke_comes_is_covered_and_none_after(
        db_url: str, pg: PgSchema, pg_admin: Engine, policy: Path) -> None:
    """The call holds the task's lock and waits to spend; the revoke waits for the
    task's lock behind it. The call spends (it was decided first), the revoke then
    commits with that count, and the next call is not covered."""
    sent = Sent()
    grant_id = granted(db_url, policy, sent)
    with grant_row_held(db_url, grant_id):
        call = Background(lambda: execute(db_url, policy, sent, "deciding"))
        wait_until(lambda: lock_waiters(pg_admin, pg.name) == 1,
                   what="the call's spend to wait on the grant's row")
        revoking = Background(lambda: revoke(db_url, grant_id))
        wait_until(lambda: lock_waiters(pg_admin, pg.name) == 2,
                   what="the revoke to wait on the task's lock")
    assert call.join() is CallState.SUCCEEDED
    assert revoking.join() == 1  # the count the revoke committed with
    assert execute(db_url, policy, sent, "after") is CallState.AWAITING_APPROVAL
    assert used(db_url) == 1
    assert covered(db_url, grant_id) == {"deciding"}
    assert sent.to == Counter({"first": 1, "deciding": 1})


def test_a_call_decided_behind_the_revoke_is_not_covered(
        db_url: str, pg: PgSchema, pg_admin: Engine, policy: Path) -> None:
    """The revoke holds the task's lock and waits to write; the call waits for the
    task's lock behind it, then reads the grant revoked and waits for a person."""
    sent = Sent()
    grant_id = granted(db_url, policy, sent)
    with grant_row_held(db_url, grant_id):
        revoking = Background(lambda: revoke(db_url, grant_id))
        wait_until(lambda: lock_waiters(pg_admin, pg.name) == 1,
                   what="the revoke to wait on the grant's row")
        call = Background(lambda: execute(db_url, policy, sent, "behind"))
        wait_until(lambda: lock_waiters(pg_admin, pg.name) == 2,
                   what="the call to wait on the task's lock")
    assert revoking.join() == 0
    assert call.join() is CallState.AWAITING_APPROVAL
    assert used(db_url) == 0 and covered(db_url, grant_id) == set()
    assert sent.to == Counter({"first": 1})


def test_two_workers_and_a_revoke_in_flight_never_spend_past_the_revoke(
        db_url: str, policy: Path) -> None:
    """Unforced: two workers decide covered calls as fast as they can while a third
    thread revokes once two were covered. The count the revoke committed with is the
    grant's last; every call decided after it waits for a person."""
    sent = Sent()
    grant_id = granted(db_url, policy, sent)
    revoked = threading.Event()
    states: dict[str, CallState] = {}
    after_revoke: list[str] = []

    def worker(n: int) -> None:
        with Gate(sent.tools(), db_url, policy=policy) as g:
            for i in range(500):  # bounded; ends 3 calls after the revoke
                done = revoked.is_set()
                call_id = f"w{n}-{i}"
                out = g.execute("t", {"call_id": call_id, "name": "send_email",
                                      "arguments": {"to": call_id}})
                states[call_id] = out.state
                if done:
                    after_revoke.append(call_id)
                    if sum(c.startswith(f"w{n}-") for c in after_revoke) == 3:
                        return
        raise AssertionError(f"worker {n}: no revoke within 500 calls")

    def revoker() -> int:
        wait_until(lambda: used(db_url) >= 2, what="two covered calls")
        at = revoke(db_url, grant_id)
        revoked.set()
        return at

    workers = [Background(lambda n=n: worker(n)) for n in range(2)]
    at_revoke = Background(revoker).join()
    for w in workers:
        w.join()
    final = used(db_url)
    assert 2 <= at_revoke <= MAX_CALLS
    assert final == at_revoke  # nothing spent once the revoke committed
    assert len(covered(db_url, grant_id)) == final
    assert [states[c] for c in after_revoke] == [CallState.AWAITING_APPROVAL] * 6
    assert Counter(states.values()) == Counter({
        CallState.SUCCEEDED: final, CallState.AWAITING_APPROVAL: len(states) - final})
    assert sum(sent.to.values()) == 1 + final
