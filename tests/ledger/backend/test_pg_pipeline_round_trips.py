"""Network round trips per gate call on PostgreSQL, counted through a proxy.

A call that runs at once and succeeds is recorded, decided and claimed in one
transaction and finished in a second; on the fast backend each transaction is
pipelined (``agent_gate.ledger.backend.pg_pipeline``), so the count is what the code waits
for, not how many statements it sends. Counts are exact, unlike timings: the
proxy (``tests/benchmarks/netproxy.py``) counts a client burst answered by the
server as one round trip.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_backends import PgSchema
from noop_calls import noop_tools, run_calls
from sqlalchemy.engine import make_url

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from netproxy import Proxy

pytestmark = pytest.mark.backends("postgresql")

MAX_ROUND_TRIPS_PER_CALL = 2
"""The common path's bound: one per transaction, its COMMIT included (it was 18: a
pre-ping, BEGIN, each statement and COMMIT one by one, in both transactions; then
4, the audit heads read before each COMMIT)."""


@pytest.fixture
def proxied(db_url: str) -> Iterator[tuple[Proxy, str]]:
    """The test's ledger URL, through a counting proxy."""
    url = make_url(db_url)
    with Proxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False
        )


def per_call(gate: Gate, proxy: Proxy, first: int, calls: int) -> float:
    proxy.reset()
    run_calls(gate, "task", first, calls)
    return proxy.round_trips() / calls


def test_a_call_that_runs_at_once_takes_a_bounded_number_of_round_trips(
    pg: PgSchema, proxied: tuple[Proxy, str]
) -> None:
    proxy, url = proxied
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(url, storage="fast")) as gate:
        per_call(gate, proxy, 0, 3)  # the task row, the pool's connection, prepared statements
        trips = per_call(gate, proxy, 100, 10)
    assert ran == [0, 1, 2, *range(100, 110)]
    assert trips <= MAX_ROUND_TRIPS_PER_CALL, f"{trips} round trips per call"


MAX_ROUND_TRIPS_PER_REPLAY = 3
"""A call seen again that this ledger recorded (a replayed stream, a reconnect): its row
read, the read's COMMIT, the ``seen_again`` entry. It was 6.4: the backend's guess (a
new row, its arrows folded in) failed on the stored row, was rolled back, and the
call was inserted again only to conflict before it was read."""


def test_a_replayed_call_takes_a_bounded_number_of_round_trips(
    pg: PgSchema, proxied: tuple[Proxy, str]
) -> None:
    proxy, url = proxied
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(url, storage="fast")) as gate:
        run_calls(gate, "task", 0, 13)
        proxy.reset()
        for n in range(3, 13):
            out = gate.execute("task", {"call_id": f"c{n}", "name": "noop",
                                        "arguments": {"n": n}})
            assert out.replayed and out.result == {"ok": n}
        trips = proxy.round_trips() / 10
    assert ran == list(range(13))  # each ran once: the replays answered from the ledger
    assert trips <= MAX_ROUND_TRIPS_PER_REPLAY, f"{trips} round trips per replay"


def test_a_connection_that_sat_idle_answers_before_its_commit_is_sent(
    pg: PgSchema, proxied: tuple[Proxy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pipeline.PROBE_AFTER_IDLE_S`` set to 0 s: every connection counts as idle,
    so each transaction's statements are answered before its COMMIT is sent (one
    round trip more per transaction): found dead there, nothing of it could have
    committed and it may be sent again."""
    from agent_gate.ledger.backend import pg_pipeline as pipeline

    proxy, url = proxied
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(url, storage="fast")) as gate:
        per_call(gate, proxy, 0, 3)
        monkeypatch.setattr(pipeline, "PROBE_AFTER_IDLE_S", 0.0)
        trips = per_call(gate, proxy, 100, 5)
    assert trips == 2 * MAX_ROUND_TRIPS_PER_CALL


def test_the_core_backend_is_counted_too_and_takes_more(
    pg: PgSchema, proxied: tuple[Proxy, str]
) -> None:
    """The reference path keeps its plain transactions (a pre-ping, BEGIN, one
    statement at a time): the proxy sees each of them, so the bound above is the
    fast path's doing, not the proxy's blindness."""
    proxy, url = proxied
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(url, storage="core")) as gate:
        per_call(gate, proxy, 0, 3)
        trips = per_call(gate, proxy, 100, 5)
    assert trips >= 3 * MAX_ROUND_TRIPS_PER_CALL


def test_a_replay_on_the_guessed_id_path_is_recorded_anew_and_not_run_again(
    pg: PgSchema, proxied: tuple[Proxy, str]
) -> None:
    """A new call is inserted under an id the sequence handed out in the previous
    call's transaction, without waiting for the insert. A call recorded before
    fails that insert (and everything sent after it, the COMMIT included), and is
    recorded the usual way: replayed, its tool not run again, the trail intact."""
    from agent_gate.ledger.backend import pg_fast

    proxy, url = proxied
    ran: list[int] = []
    with Gate(noop_tools(ran), Ledger(url, storage="fast")) as gate:
        per_call(gate, proxy, 0, 2)
        spare = pg_fast.spare_ids(gate.ledger.engine)
        # The first call asked for a batch of ids, the second was inserted under one.
        assert len(spare.ids) == pg_fast.SPARE_BATCH - 1
        again = gate.execute("task", {"call_id": "c1", "name": "noop", "arguments": {"n": 1}})
        assert again.state is CallState.SUCCEEDED and again.replayed
        fresh = gate.execute("task", {"call_id": "c9", "name": "noop", "arguments": {"n": 9}})
        assert fresh.state is CallState.SUCCEEDED and not fresh.replayed
        listed = [o.call_id for o in gate.calls("task")]
        events = [e.event for e in gate.ledger.audit("task") if e.call_id == "c1"]
        assert gate.ledger.verify_audit().ok
    assert ran == [0, 1, 9]
    assert listed == ["c0", "c1", "c9"]  # in the order they were recorded
    assert events == ["received", "allow", "claim", "succeed", "seen_again"]
