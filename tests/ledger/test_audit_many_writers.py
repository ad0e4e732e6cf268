"""Many writers on one PostgreSQL ledger: each task's chain stays one chain, writers
of different tasks never wait for each other, and checkpoints taken meanwhile bind
consistent heads. Real server, real processes and threads."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter

import pytest
import support
from sqlalchemy import Engine, text
from waiting import wait_until

from agent_gate.ledger import Ledger, audit, backend
from agent_gate.ledger.backend import begin_write
from agent_gate.ledger.checkpoints import Checkpoint, take
from agent_gate.ledger.views import outbox
from agent_gate.ledger.views.pages import AuditQuery, settled

pytestmark = pytest.mark.backends("postgresql")

WORKER = support.WORKERS / "audit_append_worker.py"
WORKERS = 4
ROUNDS = 12


@pytest.mark.slow
def test_processes_appending_to_their_own_and_a_shared_task_leave_every_chain_whole(
    db_url: str,
) -> None:
    procs = [subprocess.Popen([sys.executable, str(WORKER), db_url, f"w{n}", str(ROUNDS)],
                              stderr=subprocess.PIPE, text=True) for n in range(WORKERS)]
    taken: list[Checkpoint] = []
    with Ledger(db_url) as ledger:
        # Checkpoints taken while the workers append, by two takers racing for each
        # position (the loser takes the next one): each binds one snapshot of heads.
        rival: list[Checkpoint] = []
        failed: list[BaseException] = []

        def take_while_running() -> None:
            try:
                while any(p.poll() is None for p in procs):
                    rival.append(take(ledger.engine))
            except BaseException as error:  # reported by the test, not lost in a thread
                failed.append(error)

        second = threading.Thread(target=take_while_running)
        second.start()
        while any(p.poll() is None for p in procs):
            taken.append(take(ledger.engine))
        second.join()
        assert failed == []
        errors = [p.stderr.read() if p.stderr else "" for p in procs]
        assert [p.returncode for p in procs] == [0] * WORKERS, errors
        taken.append(take(ledger.engine))
        report = ledger.verify_audit(anchor=(taken[0].id, taken[0].hash))
        assert report.ok, report.to_dict()
        entries = ledger.audit()
    # The Merkle trees of the checkpoints taken while writers committed out of id order
    # were recomputed by verify above; the last one, with the writers gone, holds them all.
    assert taken[-1].tree_size == len(entries)
    per_task = Counter(e.task_id for e in entries)
    # Own task: task_created + (received + allow) per round; shared: one per round each.
    assert per_task == {**{f"own-w{n}": 1 + 2 * ROUNDS for n in range(WORKERS)},
                        "shared": 1 + WORKERS * ROUNDS}
    shared = [e.task_seq for e in entries if e.task_id == "shared"]
    assert shared == list(range(1, 2 + WORKERS * ROUNDS))
    # Checkpoints only move forward (one repeats when no head moved), without gaps.
    for seen in (taken, rival):
        ids = [c.id for c in seen]
        assert ids == sorted(ids)
    assert sorted({c.id for c in taken + rival}) == list(range(1, taken[-1].id + 1))


def test_threads_appending_to_one_task_take_turns_on_its_head(db_url: str) -> None:
    threads = 6
    with Ledger(db_url) as ledger:
        def work(n: int) -> None:
            for i in range(10):
                ledger.record_terminal("one", "completed", reason=f"{n}-{i}")

        running = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for t in running:
            t.start()
        for t in running:
            t.join()
        report = ledger.verify_audit()
        assert report.ok, report.to_dict()
        assert [e.task_seq for e in ledger.audit(task_id="one")] == list(range(1, 2 + 60))


def _waiting_on_a_lock(admin: Engine, application: str) -> int:
    with admin.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
            "AND wait_event_type = 'Lock'"), {"name": application}).scalar_one())


def test_an_append_locks_only_its_own_task(db_url: str, pg_admin: Engine) -> None:
    """While a transaction holds task x's head, a writer of task y commits, and a
    second writer of x waits for it (and then links after its entry)."""
    application = db_url.rsplit("application_name=", 1)[1].split("&")[0]
    with Ledger(db_url) as ledger:
        ledger.ensure_task("x")
        ledger.ensure_task("y")
        done: list[str] = []

        def other(task: str) -> None:
            ledger.record_terminal(task, "completed")
            done.append(task)

        with begin_write(ledger.engine) as conn:
            audit.append(backend.on(conn), task_id="x", event="held")  # links now: holds x's head
            y = threading.Thread(target=other, args=("y",))
            y.start()
            y.join()  # never waits on x's head: it has finished with x still held
            assert done == ["y"]
            x = threading.Thread(target=other, args=("x",))
            x.start()
            wait_until(lambda: _waiting_on_a_lock(pg_admin, application) == 1,
                       what="the second writer of x to wait on x's head")
            assert done == ["y"]
        x.join()
        assert done == ["y", "x"]
        assert [e.event for e in ledger.audit(task_id="x")] == [
            "task_created", "held", "response_ended"]
        assert ledger.verify_audit().ok


def test_readers_going_forward_never_pass_an_entry_still_to_commit(db_url: str) -> None:
    """Ids are drawn at INSERT, so with one chain per task a later id can commit first.
    ``pages.settled`` bounds a forward reader (follow, webhooks) below any entry a
    transaction still holds, so nothing is skipped."""
    with Ledger(db_url) as ledger:
        ledger.ensure_task("x")
        ledger.ensure_task("y")
        before = ledger.audit_page(AuditQuery(newest=True, limit=1))[-1].seq
        with begin_write(ledger.engine) as conn:
            audit.append(backend.on(conn), task_id="x", event="held")  # id before+1, not committed
            other = threading.Thread(target=ledger.record_terminal, args=("y", "completed"))
            other.start()
            other.join()  # id before+2, committed
            unbounded = ledger.audit_page(AuditQuery(after=before))
            assert [e.seq for e in unbounded] == [before + 2]  # the hazard
            bound = settled(ledger.engine)
            assert bound == 0  # a transaction that drew an id is still open
            assert ledger.audit_page(AuditQuery(after=before, upto=bound)) == []
            # The webhooks' outbox reads the same way: its cursor stays where it was.
            assert outbox.notices_after(ledger.engine, before) == ([], before)
        bound = settled(ledger.engine)
        assert bound == before + 2
        page = ledger.audit_page(AuditQuery(after=before, upto=bound))
        assert [(e.seq, e.task_id) for e in page] == [(before + 1, "x"), (before + 2, "y")]
        assert outbox.notices_after(ledger.engine, before)[1] == before + 2
