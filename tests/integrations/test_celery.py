"""Real Celery workers on RabbitMQ and on Redis, SIGKILLed at each point of a gated
call; the message is delivered again to a new worker, which never pays twice: it finds
the call's outcome, or the call in doubt and does what the task's options say. The
payment is counted in an outbox file outside the ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from support import WORKERS
from support.engine_tools import POINTS
from support.kill_points import kill_at_mark
from waiting import wait_until

BROKERS = {
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//",
    "redis": "redis://127.0.0.1:6379/0",
}


class Workers:
    """Celery worker processes on one test's own queue, and the task sent to them."""

    def __init__(self, tmp_path: Path, broker: str, ledger: str) -> None:
        self.broker = broker
        self.queue = f"ag-test-{uuid.uuid4().hex[:12]}"
        self.marks = tmp_path / "marks"
        self.results = tmp_path / "results"
        self.marks.mkdir()
        self.results.mkdir()
        self.env = dict(os.environ, AG_BROKER=broker, AG_QUEUE=self.queue, AG_LEDGER=ledger,
                        AG_OUTBOX=str(tmp_path / "outbox"), AG_MARKS=str(self.marks),
                        AG_RESULTS=str(self.results))
        self.env.pop("AG_HANG", None)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = tmp_path
        self.sender = Celery("agent_gate_engines_sender", broker=broker)

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        n = len(self.procs) + 1
        with open(self.logs / f"worker-{n}.log", "wb") as log:  # the child keeps its copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "--workdir", str(WORKERS), "-A", "celery_app",
                 "worker", "--pool=solo", "--without-mingle", "--without-gossip",
                 "--without-heartbeat", "--loglevel=WARNING", "-n", f"{self.queue}-{n}@%h",
                 "-Q", self.queue],
                env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def send(self, order: str, tool: str = "send_payment", amount: int = 10) -> None:
        self.sender.send_task("engines.pay", args=[order, tool, amount], queue=self.queue)

    def kill_at(self, point: str, order: str, tool: str = "send_payment") -> None:
        proc = self.start(AG_HANG=point)
        self.send(order, tool)
        kill_at_mark(proc, self.marks, point, diagnose=lambda: self.log(len(self.procs)))

    def result(self, order: str) -> dict[str, Any]:
        path = self.results / f"{order}.json"

        def done() -> bool:
            for n, proc in enumerate(self.procs, 1):
                assert proc.poll() is None or proc.returncode == -signal.SIGKILL, self.log(n)
            return path.exists()

        try:
            wait_until(done, timeout=90, what=f"task {order} to finish")
        except AssertionError as e:
            logs = "\n".join(f"--- worker {n}\n{self.log(n)}"
                              for n in range(1, len(self.procs) + 1))
            raise AssertionError(f"{e}\nbroker: {self.broker_state()}\n{logs}") from None
        return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]

    def broker_state(self) -> dict[str, object]:
        """What the broker holds for this queue, so a timeout says where the message is."""
        if not self.broker.startswith("redis"):
            return {}
        with self.sender.connection_for_write() as conn:
            client = conn.default_channel.client
            return {"now": time.time(), "queued": client.llen(self.queue),
                    "unacked": client.zrange(f"{self.queue}.unacked_index", 0, -1,
                                             withscores=True),
                    "mutex_ttl": client.pttl(f"{self.queue}.unacked_mutex"),
                    "keys": sorted(k.decode() for k in client.keys(f"*{self.queue}*"))}

    def outbox(self) -> list[str]:
        path = Path(self.env["AG_OUTBOX"])
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def log(self, n: int) -> str:
        return (self.logs / f"worker-{n}.log").read_text(errors="replace")[-3000:]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        with self.sender.connection_for_write() as conn:
            channel = conn.default_channel
            channel.queue_delete(self.queue)
            if self.broker.startswith("redis"):
                client = channel.client
                client.delete(*(f"{self.queue}.{k}" for k in
                                ("unacked", "unacked_index", "unacked_mutex")))


@pytest.fixture(params=sorted(BROKERS))
def broker(request: pytest.FixtureRequest) -> str:
    return BROKERS[request.param]


@pytest.fixture
def workers(tmp_path: Path, broker: str, sqlite_url: str) -> Iterator[Workers]:
    w = Workers(tmp_path, broker, sqlite_url)
    try:
        yield w
    finally:
        w.close()


EXPECTED = {  # on_in_doubt="fail": the redelivered task's end, and payments made
    "before-call": ("succeeded", 1),
    "before-effect": ("in_doubt", 0),
    "after-effect": ("in_doubt", 1),
    "after-outcome": ("succeeded", 1),
    "after-step": ("succeeded", 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_worker_killed_at_each_point_never_pays_twice(workers: Workers, point: str) -> None:
    workers.kill_at(point, "o1")
    workers.start()
    result = workers.result("o1")
    state, writes = EXPECTED[point]
    if state == "in_doubt":
        assert result == {"failed": "CallInDoubt", "call_id": "call-1"}
    else:
        assert result["state"] == state and result["task_id"] == "order-o1"
        assert result["call_id"] == "call-1" and result["result"] == {"paid": 10, "to": "alice"}
        # Redelivered after the gate committed the outcome: read back, not run again.
        assert result["replayed"] is (point in ("after-outcome", "after-step"))
    assert len(workers.outbox()) == writes


def _cli(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "agent_gate", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _state(ledger: str, task_id: str) -> str | None:
    from agent_gate import Gate, ToolRegistry

    with Gate(ToolRegistry(), ledger) as gate:
        calls = gate.calls(task_id)
    return calls[0].state.value if calls else None


@pytest.mark.slow
def test_in_doubt_with_retry_waits_for_an_operator(workers: Workers) -> None:
    """``on_in_doubt="retry"``: the redelivered task retries while the call is in
    doubt; an operator finds the write never happened; the next retry makes it once."""
    workers.env["AG_ON_IN_DOUBT"] = "retry"
    workers.kill_at("before-effect", "o2")
    workers.start()
    wait_until(lambda: _state(workers.env["AG_LEDGER"], "order-o2") == "in_doubt",
               what="the redelivered task to find the call in doubt")
    assert not (workers.results / "o2.json").exists() and workers.outbox() == []
    _cli("resolve", "call-1", "--task", "order-o2", "--as", "not-applied", "--by", "ops",
         "--db", workers.env["AG_LEDGER"])
    result = workers.result("o2")
    assert result["state"] == "succeeded" and result["attempt"] == 2
    assert len(workers.outbox()) == 1


@pytest.mark.slow
@pytest.mark.parametrize(("point", "replayed"), [("before-effect", False),
                                                  ("after-effect", True)])
def test_in_doubt_with_reconcile_asks_the_task(
    workers: Workers, point: str, replayed: bool
) -> None:
    """``on_in_doubt="reconcile"``: the task's reconcile function looks the payment up;
    found, the call is settled as it (no second payment); not found, it is made once."""
    workers.env["AG_ON_IN_DOUBT"] = "reconcile"
    workers.kill_at(point, "o3")
    workers.start()
    result = workers.result("o3")
    assert result["state"] == "succeeded" and result["replayed"] is replayed
    # Found: settled as the reconcile function said, not run; not found: run again.
    assert (result["code"], result["attempt"]) == (("resolved", 1) if replayed else (None, 2))
    assert len(workers.outbox()) == 1


@pytest.mark.slow
def test_a_task_waiting_for_a_person_retries_until_the_cli_approves(workers: Workers) -> None:
    workers.start()
    workers.send("o4", amount=150)
    wait_until(lambda: _state(workers.env["AG_LEDGER"], "order-o4") == "awaiting_approval",
               what="the call to wait for a person")
    assert workers.outbox() == []
    _cli("approve", "call-1", "--task", "order-o4", "--by", "alice",
         "--db", workers.env["AG_LEDGER"])
    result = workers.result("o4")
    assert result["state"] == "succeeded" and result["result"] == {"paid": 150, "to": "alice"}
    assert len(workers.outbox()) == 1


@pytest.mark.slow
def test_redis_delivers_a_running_task_twice_and_the_second_waits(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Redis hands an unacknowledged message to another worker once its
    ``visibility_timeout`` passes, even while the first still runs it. The second
    delivery finds the call running under a live lease and waits; once the first
    worker dies mid-tool, the call is in doubt and the task fails: never two writes."""
    workers = Workers(tmp_path, BROKERS["redis"], sqlite_url)
    try:
        first = workers.start(AG_HANG="before-effect")
        workers.send("o5")
        wait_until(lambda: (workers.marks / "before-effect").exists(),
                   what="the first delivery to run the tool")
        workers.start()  # restores the message the first worker holds past its timeout

        def seen_again() -> bool:
            from agent_gate.ledger import Ledger

            with Ledger(sqlite_url) as ledger:
                return any(a.event == "seen_again" for a in ledger.audit("order-o5"))

        wait_until(seen_again, what="the second delivery to reach the gate")
        assert workers.outbox() == [] and _state(sqlite_url, "order-o5") == "executing"
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        assert workers.result("o5") == {"failed": "CallInDoubt", "call_id": "call-1"}
        assert workers.outbox() == []
    finally:
        workers.close()


@pytest.mark.slow
def test_redis_a_look_that_missed_a_dead_workers_message_is_made_again(
    tmp_path: Path, sqlite_url: str
) -> None:
    """A killed worker's message returns to the queue only when a live worker looks
    for it. The new worker's first look finds the look's mutex held (as when another
    worker is mid-look, or died in one); the message must still come back soon, not
    at kombu's next default look 100 s later (this timed out in CI)."""
    import redis

    workers = Workers(tmp_path, BROKERS["redis"], sqlite_url)
    client = redis.Redis.from_url(BROKERS["redis"])
    mutex = f"{workers.queue}.unacked_mutex"
    watching, tried = threading.Event(), threading.Event()

    def watch() -> None:
        """Its own client, read by this thread alone, until the new worker's try."""
        own = redis.Redis.from_url(BROKERS["redis"])
        try:
            with own.monitor() as monitor:
                watching.set()
                for command in monitor.listen():
                    if command["command"].startswith(f"SET {mutex} "):
                        tried.set()
                        return
        finally:
            own.close()

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        workers.kill_at("before-call", "o7")
        assert client.set(mutex, "someone-else", nx=True, px=120_000)
        watcher.start()
        wait_until(watching.is_set, what="Redis MONITOR to start")
        workers.start()
        wait_until(tried.is_set, what="the new worker's first look for unacked messages")
        watcher.join(timeout=30)
        client.delete(mutex)
        result = workers.result("o7")
        assert result["state"] == "succeeded" and result["replayed"] is False
        assert len(workers.outbox()) == 1
    finally:
        client.delete(mutex)
        client.close()
        workers.close()


@pytest.mark.slow
@pytest.mark.backends("postgresql")
@pytest.mark.parametrize(("point", "expected"), [
    ("after-effect", {"failed": "CallInDoubt", "call_id": "call-1"}),
    ("after-outcome", "succeeded"),
])
def test_a_redelivered_task_on_a_postgresql_ledger(
    tmp_path: Path, db_url: str, point: str, expected: object
) -> None:
    workers = Workers(tmp_path, BROKERS["rabbitmq"], db_url)
    try:
        workers.kill_at(point, "o6")
        workers.start()
        result = workers.result("o6")
        if isinstance(expected, dict):
            assert result == expected
        else:
            assert result["state"] == expected and result["replayed"] is True
        assert len(workers.outbox()) == 1  # paid before the kill, never again
    finally:
        workers.close()
