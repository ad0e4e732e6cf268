"""Faults against PostgreSQL's fast write path: guessed row ids, folded intakes,
kept connections (``pg_fast``, ``fast.Folded``, ``spares``, ``pipeline``).

The path inserts a new call under a row id the sequence handed this process
earlier, folds its decision and claim into that one ``INSERT``, sends the whole
intake in one round trip on a connection kept between transactions, and replays a
transaction on a new connection only when nothing of it can have committed. Each
test here attacks one of those choices where it could break the ledger's promises:
two gates racing one call (both guessing ids), a session ended with the intake's
``COMMIT`` committed but unanswered, a session ended before that ``COMMIT`` was
sent, a transaction rolled back with its ``INSERT`` still deferred. Whatever
happens, a call runs at most once, its row and its trail agree (``verify_audit``
and ``agent-gate audit verify``), and the calls after the fault are recorded under
ids nobody else has, their trail gap-free.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ledger_backends import PgSchema
from sqlalchemy import exc, text
from support import WORKERS
from support.counting import counting_tools

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main as cli_main
from agent_gate.ledger import CallRecord, Event, Ledger, NewCall
from agent_gate.ledger.backend import pg_fast, spares
from agent_gate.ledger.backend import pg_pipeline as pipeline
from agent_gate.ledger.backend.pg_pipeline import PipelinedTxn
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import Ruling

pytestmark = pytest.mark.backends("postgresql")


def post(call_id: str, text_: str) -> dict[str, object]:
    return {"call_id": call_id, "name": "post", "arguments": {"text": text_}}


def terminate(pg: PgSchema, pid: int) -> None:
    """End one session and wait (bounded) until the server has let it go."""
    with pg.admin.connect() as conn:
        conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
        deadline = time.monotonic() + 20
        while conn.exec_driver_sql(
            f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}"
        ).scalar():
            assert time.monotonic() < deadline, "the terminated session never went away"
            time.sleep(0.01)


def row_committed(pg: PgSchema, task: str, call_id: str) -> bool:
    with pg.admin.connect() as conn:
        return bool(conn.execute(
            text(f"SELECT count(*) FROM {pg.name}.tool_calls "
                 "WHERE task_id = :t AND call_id = :c"),
            {"t": task, "c": call_id},
        ).scalar())


def check_ledger(url: str, pg: PgSchema) -> None:
    """The trail verifies (library and CLI), and every entry that names a call row
    names the row of the same task and call id; no call has two ``received``."""
    with Ledger(url) as ledger:
        report = ledger.verify_audit()
        assert report.ok, report
    result = CliRunner().invoke(cli_main, ["audit", "verify", "--db", url])
    assert result.exit_code == 0, result.output
    s = pg.name
    must_be_empty = {
        "entries naming another call's row": (
            f"SELECT e.id FROM {s}.audit_events e JOIN {s}.tool_calls c "
            "ON c.id = e.call_row_id WHERE c.task_id <> e.task_id OR c.call_id <> e.call_id"),
        "entries naming no row": (
            f"SELECT e.id FROM {s}.audit_events e WHERE e.call_row_id IS NOT NULL "
            f"AND NOT EXISTS (SELECT 1 FROM {s}.tool_calls c WHERE c.id = e.call_row_id)"),
        "calls received twice": (
            f"SELECT call_row_id FROM {s}.audit_events WHERE event = 'received' "
            "GROUP BY call_row_id HAVING count(*) > 1"),
        "chains with gaps": (
            f"SELECT task_id FROM {s}.audit_events GROUP BY task_id "
            "HAVING max(seq) <> count(*) OR min(seq) <> 1"),
    }
    with pg.admin.connect() as conn:
        for what, sql in must_be_empty.items():
            assert conn.execute(text(sql)).all() == [], what


@contextmanager
def on_commit(hook: object) -> Iterator[list[int]]:
    """Call ``hook(txn)`` before each pipelined COMMIT round trip is read
    (``PipelinedTxn._leave(committing=True)``: the COMMIT is already handed to libpq);
    yields the count of commits seen."""
    seen: list[int] = []
    real = PipelinedTxn._leave

    def leave(self: PipelinedTxn, *, committing: bool) -> None:
        if committing:
            seen.append(1)
            hook(self, len(seen))  # type: ignore[operator]
        real(self, committing=committing)

    PipelinedTxn._leave = leave  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        PipelinedTxn._leave = real  # type: ignore[method-assign]


def warm(gate: Gate, task: str, calls: int) -> None:
    """Run a few calls so that the engine holds spare ids and a kept connection
    that answered lately (the next intake is folded, guessed, one round trip)."""
    for n in range(calls):
        out = gate.execute(task, post(f"warm-{n}", f"{task}-warm-{n}"))
        assert out.state is CallState.SUCCEEDED
    assert pg_fast.spare_ids(gate.ledger.engine).ids
    assert len(spares.spares_of(gate.ledger.engine).write) == 1


Step = Callable[[str, Gate, int], None]


def race(a: Gate, b: Gate, rounds: int, *, before: Step | None = None,
         after: Step | None = None) -> list[list[Any]]:
    """Gates ``a`` and ``b`` in two threads send call ``c{n}`` of task ``shared`` at
    the same moment, ``rounds`` times (``before``/``after`` run in each thread around
    each race); each pair of outcomes has exactly one that was not replayed."""
    outcomes: dict[str, list[Any]] = {"a": [], "b": []}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def worker(name: str, gate: Gate) -> None:
        try:
            for n in range(rounds):
                if before is not None:
                    before(name, gate, n)
                barrier.wait(timeout=30)
                outcomes[name].append(gate.execute("shared", post(f"c{n}", f"c{n}")))
                if after is not None:
                    after(name, gate, n)
        except BaseException as error:  # reported below, with the barrier broken
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(name, gate))
               for name, gate in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    pairs = [[outcomes["a"][n], outcomes["b"][n]] for n in range(rounds)]
    for pair in pairs:
        assert sorted(o.replayed for o in pair) == [False, True]
    return pairs


@pytest.fixture
def guesses_failed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each failed insert the intake judged: True where a guessed id was taken."""
    judged: list[bool] = []
    real_guess_failed = pg_fast._guess_failed

    def guess_failed(error: exc.IntegrityError) -> bool:
        failed = real_guess_failed(error)
        judged.append(failed)
        return failed

    monkeypatch.setattr(pg_fast, "_guess_failed", guess_failed)
    return judged


def test_two_gates_racing_each_call_with_guessed_ids_run_it_once(
    db_url: str, pg: PgSchema, guesses_failed: list[bool]
) -> None:
    """Two gates (two engines, each with its own spare ids and kept connection) send
    the same calls at the same moment: both insert under a guessed id, the second
    waits on the unique key and fails, and records the call anew. Every call runs
    once, has one row and one ``received``, and both gates go on working."""
    ran: list[str] = []
    rounds = 12

    def own_call(name: str, gate: Gate, n: int) -> None:
        # and one call of its own, so both keep using their spare ids
        own = gate.execute("shared", post(f"{name}{n}", f"{name}{n}"))
        assert own.state is CallState.SUCCEEDED and not own.replayed

    with Gate(counting_tools(ran), Ledger(db_url)) as a, \
            Gate(counting_tools(ran), Ledger(db_url)) as b:
        warm(a, "warm-a", 2)
        warm(b, "warm-b", 2)
        ran.clear()
        for pair in race(a, b, rounds, after=own_call):
            assert all(o.state in (CallState.SUCCEEDED, CallState.EXECUTING) for o in pair)
        # Both gates still record new calls on their kept connections afterwards.
        assert a.execute("shared", post("after-a", "after-a")).state is CallState.SUCCEEDED
        assert b.execute("shared", post("after-b", "after-b")).state is CallState.SUCCEEDED
    expected = [f"c{n}" for n in range(rounds)] + [f"{x}{n}" for x in "ab" for n in range(rounds)]
    assert sorted(ran) == sorted([*expected, "after-a", "after-b"])
    assert guesses_failed and all(guesses_failed)  # the race was on the guessed-id path
    check_ledger(db_url, pg)


def test_an_intake_committed_whose_answer_is_lost_is_never_run(
    db_url: str, pg: PgSchema
) -> None:
    """The folded intake (insert under a guessed id, decided and claimed in one row
    version) is committed by the server, and its session ends before the client
    reads the answer: the client cannot know, the call is ``executing`` under this
    worker's live lease, and the tool did not run. Executing it again must not run
    it (it is in progress, then in doubt), and the calls after it are recorded under
    fresh ids with a trail that verifies."""
    ran: list[str] = []
    with Gate(counting_tools(ran), Ledger(db_url)) as gate:
        warm(gate, "t", 2)
        guessed = pg_fast.spare_ids(gate.ledger.engine).ids[0]

        def hook(txn: PipelinedTxn, nth: int) -> None:
            if nth == 1:  # the intake's COMMIT: wait until the server committed it
                deadline = time.monotonic() + 20
                while not row_committed(pg, "t", "lost"):
                    assert time.monotonic() < deadline, "the intake never committed"
                    time.sleep(0.01)
                terminate(pg, txn.driver.info.backend_pid)

        with on_commit(hook) as commits, pytest.raises(exc.OperationalError):
            gate.execute("t", post("lost", "lost"))
        assert len(commits) == 1
        again = gate.execute("t", post("lost", "lost"))
        assert again.replayed and again.state is CallState.EXECUTING
        rec = gate.ledger.get("t", "lost")
        assert rec is not None and rec.state is CallState.EXECUTING and rec.attempt == 1
        assert rec.row_id == guessed and rec.version == 2  # folded: inserted claimed
        for n in range(20):  # the calls after it: fresh ids, one trail
            out = gate.execute("t", post(f"after-{n}", f"after-{n}"))
            assert out.state is CallState.SUCCEEDED and not out.replayed
        events = [e.event for e in gate.ledger.audit("t") if e.call_id == "lost"]
    assert "lost" not in ran
    assert events == ["received", "allow", "claim", "seen_again"]
    check_ledger(db_url, pg)


def test_an_intake_whose_session_ended_before_its_commit_left_nothing_and_runs_once(
    db_url: str, pg: PgSchema
) -> None:
    """The session ends after the folded intake's statements went out and before its
    COMMIT reached the server: nothing of it committed (the error still reaches the
    caller: the client cannot tell). The call is then executed again and runs once,
    under an id nobody holds, and the trail verifies."""
    ran: list[str] = []
    with Gate(counting_tools(ran), Ledger(db_url)) as gate:
        warm(gate, "t", 2)
        real = PipelinedTxn.commit
        ended: list[int] = []

        def commit(self: PipelinedTxn) -> None:
            if not ended:
                ended.append(self.driver.info.backend_pid)
                terminate(pg, ended[0])
            real(self)

        PipelinedTxn.commit = commit  # type: ignore[method-assign]
        try:
            with pytest.raises(exc.OperationalError):
                gate.execute("t", post("cut", "cut"))
        finally:
            PipelinedTxn.commit = real  # type: ignore[method-assign]
        assert not row_committed(pg, "t", "cut")
        out = gate.execute("t", post("cut", "cut"))
        assert out.state is CallState.SUCCEEDED and not out.replayed and out.attempt == 1
        for n in range(10):
            assert gate.execute("t", post(f"after-{n}", "x")).state is CallState.SUCCEEDED
    assert ran.count("cut") == 1
    check_ledger(db_url, pg)


def test_an_intake_rolled_back_with_its_insert_deferred_leaves_nothing_behind(
    db_url: str, pg: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision, taken inside the intake, raises what the gate does not catch (a
    ``BaseException``: an interrupt) while the call's guessed-id ``INSERT`` is still
    deferred: the transaction rolls back, nothing of the call is recorded, and the
    kept connection's next transaction carries nothing of it (the next calls are
    recorded once each, the same call id included, under ids of their own)."""
    from agent_gate.gate.decide import Decider

    ran: list[str] = []
    stop: list[bool] = [False]
    real = Decider.ruling_in

    class Interrupted(BaseException):
        pass

    def ruling_in(self: Decider, txn: object, rec: object, early: object) -> object:
        if stop[0]:
            stop[0] = False
            raise Interrupted
        return real(self, txn, rec, early)  # type: ignore[arg-type]

    monkeypatch.setattr(Decider, "ruling_in", ruling_in)
    with Gate(counting_tools(ran), Ledger(db_url)) as gate:
        warm(gate, "t", 2)
        kept = spares.spares_of(gate.ledger.engine).write[0]
        guessed = pg_fast.spare_ids(gate.ledger.engine).ids[0]
        stop[0] = True
        with pytest.raises(Interrupted):
            gate.execute("t", post("boom", "boom"))
        assert not row_committed(pg, "t", "boom")
        assert spares.spares_of(gate.ledger.engine).write == [kept]  # kept, and clean
        assert guessed not in pg_fast.spare_ids(gate.ledger.engine).ids  # never handed twice
        out = gate.execute("t", post("boom", "boom"))
        assert out.state is CallState.SUCCEEDED and not out.replayed
        for n in range(5):
            assert gate.execute("t", post(f"after-{n}", "x")).state is CallState.SUCCEEDED
        ids = [gate.ledger.get("t", c).row_id for c in ["boom", *(f"after-{n}" for n in range(5))]]  # type: ignore[union-attr]
    assert guessed not in ids
    assert ran.count("boom") == 1
    check_ledger(db_url, pg)


QUOTA_POLICY = """\
version: 1
tools:
  note:
    effect: write
    idempotency: none
    rules:
      - id: notes
        effect: allow
  post:
    effect: write
    idempotency: none
    rules:
      - id: posts
        effect: allow
    limits:
      - id: post-count
        max_calls: 100
"""


def test_two_gates_racing_a_call_whose_decision_reads_quotas_run_it_once(
    db_url: str, pg: PgSchema, guesses_failed: list[bool]
) -> None:
    """With a quota the decision reads the task's usage through Core while the
    call's guessed-id ``INSERT`` is still deferred: the pipeline is left (the
    ``INSERT`` goes out first) and the loser of the race finds the unique key taken
    right there, inside Core's ``begin``. It must still record the call anew (seen,
    not run), charge nothing twice, and leave both gates working."""
    from agent_gate.policy import Policy

    ran: list[str] = []
    rounds = 8
    policy = Policy.from_text(QUOTA_POLICY)
    noted: list[str] = []

    def tools() -> ToolRegistry:
        registry = counting_tools(ran)

        @registry.tool(schema={"type": "object"}, effect="write", idempotency="none",
                       name="note")
        def note(text: str) -> None:
            noted.append(text)

        return registry

    def spare_ids_first(name: str, gate: Gate, n: int) -> None:
        # A call with no quota first: it leaves the engine spare ids (a call whose
        # decision went through Core asks for none).
        for m in range(2):
            own = gate.execute(f"own-{name}", {
                "call_id": f"n{n}-{m}", "name": "note", "arguments": {"text": f"{name}{n}-{m}"}})
            assert own.state is CallState.SUCCEEDED
        assert pg_fast.spare_ids(gate.ledger.engine).ids

    with Gate(tools(), Ledger(db_url), policy=policy) as a, \
            Gate(tools(), Ledger(db_url), policy=policy) as b:
        race(a, b, rounds, before=spare_ids_first)
        assert a.ledger.usage("shared") == {"post/calls": rounds}
        assert a.execute("shared", post("after-a", "after-a")).state is CallState.SUCCEEDED
        assert b.execute("shared", post("after-b", "after-b")).state is CallState.SUCCEEDED
    assert sorted(ran) == sorted([*(f"c{n}" for n in range(rounds)), "after-a", "after-b"])
    assert guesses_failed and all(guesses_failed)
    check_ledger(db_url, pg)


def _new(call_id: str) -> NewCall:
    return NewCall(
        task_id="t", call_id=call_id, idem_key=f"call:{call_id}", tool="post",
        effect="write", idempotency="none", args_hash="0" * 64, arguments={"text": call_id},
    )


def test_a_guess_that_fails_where_core_joins_leaves_the_kept_connection_usable(
    db_url: str, pg: PgSchema
) -> None:
    """``Ledger.record`` with a ``decide`` that reads the task's quota usage first
    (what its docstring's ``lock`` is for): the usage read is a Core statement, so
    the pipeline is left inside Core's ``begin``, and the call's guessed-id
    ``INSERT`` (deferred until then) is answered there. A call recorded before
    fails that ``INSERT``: the error is raised from inside Core's ``begin``, and the
    intake records the call anew, as it should. The connection kept for the next
    transaction must work as any other: before the fix it was the one that failed,
    its SQLAlchemy ``Connection`` left believing it was still beginning (its
    ``begin`` never finished), so it never began a Core transaction again, the
    pipeline was never left, and the next decision that read its usage waited for
    ever for an answer its pipeline never asked for (the server session stuck
    mid-transaction, the calling thread hung)."""
    asked: list[str] = []

    def decide(txn: LedgerTxn, rec: CallRecord) -> Ruling | None:
        asked.append(rec.call_id)
        txn.usage(rec.task_id, ["post/calls"])
        return Ruling(Event.ALLOW, charges={"post/calls": Decimal(1)})

    with Ledger(db_url) as other:  # another worker: the ledger below never saw c0
        rec, inserted = other.record(_new("c0"))
        assert inserted and rec.state is CallState.RECEIVED
    with Ledger(db_url) as ledger:
        # Recorded without a decision: the engine asks for spare ids (an intake
        # that Core joined asks for none), and the next intake guesses (a call this
        # ledger recorded itself would be read, not guessed: ``intake.record``).
        for n in range(1, 3):
            rec, inserted = ledger.record(_new(f"c{n}"))
            assert inserted and rec.state is CallState.RECEIVED
        assert pg_fast.spare_ids(ledger.engine).ids
        kept = spares.spares_of(ledger.engine).write
        assert len(kept) == 1
        again, inserted = ledger.record(_new("c0"), decide=decide, lock=True)
        assert not inserted and again.call_id == "c0"
        assert again.state is CallState.RECEIVED  # the decision rolled back with the guess
        # Every connection kept for the next transaction still begins one when Core
        # runs a statement on it (checked here: the next intake would otherwise
        # wait for ever for an answer its pipeline never asks for).
        for conn in spares.spares_of(ledger.engine).write:
            conn.execute(text("SELECT 1"))
            assert conn.in_transaction(), "a kept connection no longer begins transactions"
            conn.rollback()
        for n in range(3, 6):
            rec, inserted = ledger.record(_new(f"c{n}"), decide=decide, lock=True)
            assert inserted and rec.state is CallState.AUTHORIZED
        assert asked == ["c0", "c3", "c4", "c5"]  # c0's decision went with its guess
        assert ledger.usage("t") == {"post/calls": 3}
    check_ledger(db_url, pg)


def test_a_tasks_calls_are_listed_in_the_order_two_gates_recorded_them(
    db_url: str, pg: PgSchema
) -> None:
    """Two gates on one task, each holding spare ids (the first asked for its batch
    first): gate B records a call, then gate A records another. ``calls`` promises
    a task's calls oldest first; with the plain sequence the two would be listed in
    the order they were recorded."""
    ran: list[str] = []
    with Gate(counting_tools(ran), Ledger(db_url)) as a, \
            Gate(counting_tools(ran), Ledger(db_url)) as b:
        warm(a, "warm-a", 2)
        warm(b, "warm-b", 2)
        assert b.execute("shared", post("first", "first")).state is CallState.SUCCEEDED
        assert a.execute("shared", post("second", "second")).state is CallState.SUCCEEDED
        listed = [rec.call_id for rec in a.ledger.calls("shared")]
    assert listed == ["first", "second"]


@pytest.mark.parametrize("silent", [False, True], ids=["seen", "silent"])
def test_sessions_ended_under_threads_sharing_one_gate_never_run_a_call_twice(
    db_url: str, pg: PgSchema, monkeypatch: pytest.MonkeyPatch, silent: bool
) -> None:
    """Four threads share one gate (its spare ids, its kept connections) and run
    calls of one task, some call ids sent by two threads at once; every seventh tool
    run ends every server session of the ledger, so sessions die at whatever point
    the other threads' transactions are (idle, kept, mid-pipeline, at a COMMIT).
    A call whose outcome the caller did not get is executed again afterwards.
    Whatever happened: no call ran twice, each has one row and one ``received``,
    and every task's trail is gap-free and verifies.

    ``silent``: the ended sessions look alive to the checkout's socket check and
    every connection counts as idle (``PROBE_AFTER_IDLE_S`` 0 s), as for sessions
    dropped by a partition: transactions are found out at their first round trip
    (without their COMMIT) and replayed on new connections (a new pool) while the
    other threads go on."""
    replays: list[bool] = []
    if silent:
        monkeypatch.setattr(pipeline, "alive", lambda _driver: True)
        monkeypatch.setattr(pipeline, "PROBE_AFTER_IDLE_S", 0.0)
        real_replay = PipelinedTxn._replay

        def replay(self: PipelinedTxn, error: Exception) -> None:
            replays.append(True)
            real_replay(self, error)

        monkeypatch.setattr(PipelinedTxn, "_replay", replay)
    ran: list[str] = []
    lock = threading.Lock()
    threads_n, per_thread = 4, 15

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none", name="post")
    def post_tool(text: str) -> dict[str, str]:
        with lock:
            ran.append(text)
            kill = len(ran) % 7 == 0
        if kill:
            pg.terminate_sessions()
        return {"posted": text}

    failed: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    with Gate(tools, Ledger(db_url)) as gate:
        barrier = threading.Barrier(threads_n)

        def worker(t: int) -> None:
            try:
                barrier.wait(timeout=30)
                for n in range(per_thread):
                    # pairs of threads share every third call id
                    call = f"s{t // 2}-{n}" if n % 3 == 0 else f"t{t}-{n}"
                    try:
                        gate.execute("task", post(call, call))
                    except exc.OperationalError:
                        with lock:
                            failed.append((call, call))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
        assert not errors, errors
        for call, text_ in failed:  # the caller retries what it did not hear back about
            for _ in range(5):  # its own tool run may end the sessions again
                try:
                    again = gate.execute("task", post(call, text_))
                except exc.OperationalError:
                    continue
                assert again.state in (CallState.SUCCEEDED, CallState.EXECUTING), again
                break
            else:
                pytest.fail(f"{call} could not be executed again")
    counts: dict[str, int] = {}
    for text_ in ran:
        counts[text_] = counts.get(text_, 0) + 1
    assert {k: v for k, v in counts.items() if v > 1} == {}
    assert bool(replays) is silent
    check_ledger(db_url, pg)


FAST_WORKER = WORKERS / "fast_path_worker.py"


def run_fast_worker(url: str, mode: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, str(FAST_WORKER), url, "task", "call", mode],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
    lines = proc.stdout.splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else {}


@pytest.mark.slow
@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not_committed"])
def test_a_worker_killed_at_its_folded_intakes_commit_never_has_its_call_run_twice(
    db_url: str, pg: PgSchema, effects_file: Path, committed: bool
) -> None:
    """A worker process is SIGKILLed at the COMMIT of a call's folded intake (the row
    inserted under a spare id, decided and claimed in one row version): after the
    server committed it, or before the COMMIT left. Committed, the row must carry
    a real claim (this worker as owner, a lease): the next worker finds the owner
    dead and leaves the call in doubt, never running it. Not committed, nothing of
    it exists and the next worker runs it once."""
    code, _ = run_fast_worker(db_url, "sigkill_committed" if committed else
                              "sigkill_before_commit")
    assert code == -signal.SIGKILL
    assert row_committed(pg, "task", "call") is committed
    code, out = run_fast_worker(db_url, "normal")
    assert code == 0
    if committed:
        assert (out["state"], out["code"]) == ("in_doubt", "owner_dead"), out
        assert "hello" not in effects_file.read_text(encoding="utf-8").splitlines()
    else:
        assert out["state"] == "succeeded" and out["attempt"] == 1 and not out["replayed"]
        assert effects_file.read_text(encoding="utf-8").splitlines().count("hello") == 1
    check_ledger(db_url, pg)


def test_a_decision_that_fails_in_a_folded_intake_leaves_the_call_received(
    db_url: str, pg: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision taken inside the intake raises an ordinary error (a broken
    policy): the gate commits the call as ``received`` (its guessed-id ``INSERT``
    carrying no arrow) and raises after the commit. The row and its trail agree,
    and executing the call again decides and runs it once."""
    from agent_gate.gate.decide import Decider

    ran: list[str] = []
    broken: list[bool] = [False]
    real = Decider.ruling_in

    def ruling_in(self: Decider, txn: object, rec: object, early: object) -> object:
        if broken[0]:
            broken[0] = False
            raise RuntimeError("the policy could not be evaluated")
        return real(self, txn, rec, early)  # type: ignore[arg-type]

    monkeypatch.setattr(Decider, "ruling_in", ruling_in)
    with Gate(counting_tools(ran), Ledger(db_url)) as gate:
        warm(gate, "t", 2)
        guessed = pg_fast.spare_ids(gate.ledger.engine).ids[0]
        broken[0] = True
        with pytest.raises(RuntimeError, match="could not be evaluated"):
            gate.execute("t", post("odd", "odd"))
        rec = gate.ledger.get("t", "odd")
        assert rec is not None and rec.state is CallState.RECEIVED
        assert (rec.row_id, rec.version) == (guessed, 0)
        assert gate.ledger.verify_audit().ok
        out = gate.execute("t", post("odd", "odd"))
        assert out.state is CallState.SUCCEEDED
        assert gate.execute("t", post("next", "next")).state is CallState.SUCCEEDED
    assert ran.count("odd") == 1
    check_ledger(db_url, pg)


class _EmptiedInBetween(list):  # type: ignore[type-arg]
    """A list of idle connections that another thread empties between a check that
    it holds one and the ``pop``: the interleaving a free-threaded interpreter (or a
    switch between two bytecodes) allows, which no timing can make happen on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def __bool__(self) -> bool:
        self.asked += 1
        return self.asked == 1 or len(self) > 0


def test_a_kept_connection_taken_by_another_thread_in_between_is_not_an_error(
    db_url: str, pg: PgSchema
) -> None:
    ran: list[str] = []
    with Gate(counting_tools(ran), Ledger(db_url)) as gate:
        warm(gate, "emptied", 2)
        kept = spares.spares_of(gate.ledger.engine)
        for conn in kept.write:
            conn.close()
        kept.write = _EmptiedInBetween()  # a new connection is opened instead
        assert gate.execute("emptied", post("p", "p")).state is CallState.SUCCEEDED
        kept.write = _EmptiedInBetween()
        kept.close()  # closing them all: the list found empty is simply done
    assert ran == ["emptied-warm-0", "emptied-warm-1", "p"]
