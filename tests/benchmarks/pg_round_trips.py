"""Round trips and calls/s per gate call on PostgreSQL, against the two-commit floor.

    python tests/benchmarks/run.py --only pg_round_trips [--quick]
    python tests/benchmarks/pg_round_trips.py [--quick]     # this section alone

On one machine a database answers in microseconds; deployed, it is a network away,
and a call costs about what it waits for. So both candidates talk to PostgreSQL
through ``netproxy`` (which counts round trips) and are measured twice: with no
added delay, and with ``DELAY_MS`` added to each direction (a database a short
network hop away). Durability is the server's default: fsync and
synchronous_commit on.

* ``agent-gate``: ``Gate.execute`` of a no-op tool on a known task (recorded,
  decided and claimed in one commit, the outcome in a second), fast backend.
* ``floor``: raw psycopg doing the two commits any at-most-once runner needs:
  the intent row's ``INSERT`` committed before the tool runs, the outcome's
  ``UPDATE`` committed after it (autocommit: one round trip each, nothing else).

Each candidate's calls are checked to run the tool exactly once. Round trips are
counted (exact); calls/s are medians over rounds, and gate / floor is the paired
ratio (``harness``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import paired, paired_ratio  # noqa: E402
from netproxy import ProxyProcess  # noqa: E402
from scratch_db import scratch_database, sqlalchemy_url  # noqa: E402

DELAY_MS = 1.0
"""Added to each direction in the networked measurement (2 ms a round trip)."""
TARGET_ROUND_TRIPS = 2
TARGET_RATIO = 0.5


class Floor:
    """The two commits of an at-most-once call on raw psycopg, through the proxy."""

    def __init__(self, conninfo: str, port: int) -> None:
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS floor_calls (id BIGSERIAL PRIMARY KEY, "
                "task TEXT NOT NULL, call TEXT NOT NULL, state TEXT NOT NULL, "
                "result TEXT, UNIQUE (task, call))"
            )
        self.conn = psycopg.connect(
            psycopg.conninfo.make_conninfo(conninfo, host="127.0.0.1", port=port),
            autocommit=True,
        )
        self.ran: list[str] = []

    def call(self, task: str, call_id: str) -> None:
        row = self.conn.execute(
            "INSERT INTO floor_calls (task, call, state) VALUES (%s, %s, 'executing') "
            "ON CONFLICT DO NOTHING RETURNING id", (task, call_id),
        ).fetchone()
        if row is None:
            return  # recorded before: never run twice
        self.ran.append(call_id)
        self.conn.execute(
            "UPDATE floor_calls SET state = 'succeeded', result = %s "
            "WHERE id = %s AND state = 'executing'", ('{"ok":true}', row[0]),
        )

    def close(self) -> None:
        self.conn.close()


def _gate(url: str, port: int, ran: list[str]) -> Any:
    from sqlalchemy.engine import make_url

    from agent_gate import Gate, ToolRegistry
    from agent_gate.ledger.store import Ledger

    tools = ToolRegistry()

    def noop(n: str) -> dict[str, Any]:
        ran.append(n)
        return {"ok": True}

    tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "string"}}})
    proxied = make_url(url).set(host="127.0.0.1", port=port)
    return Gate(tools, Ledger(proxied.render_as_string(hide_password=False), storage="fast"))


def _measure(url: str, conninfo: str, delay_ms: float, quick: bool) -> dict[str, Any]:
    from agent_gate import CallState

    upstream = ("127.0.0.1", 5432)
    rounds = 5 if quick else 9
    calls = 20 if quick else 50
    counted = 10 if quick else 30
    gate_ran: list[str] = []
    # Each proxy in a process of its own: not competing for this one's GIL.
    with ProxyProcess(upstream, delay_ms=delay_ms) as gate_proxy, \
            ProxyProcess(upstream, delay_ms=delay_ms) as floor_proxy:
        gate = _gate(url, gate_proxy.port, gate_ran)
        floor = Floor(conninfo, floor_proxy.port)
        task = f"rt-{delay_ms}"
        seq = iter(range(10**9))

        def via_gate() -> None:
            for _ in range(calls):
                n = f"g{next(seq)}"
                outcome = gate.execute(task, {"call_id": n, "name": "noop",
                                              "arguments": {"n": n}})
                assert outcome.state is CallState.SUCCEEDED

        def via_floor() -> None:
            for _ in range(calls):
                floor.call(task, f"f{next(seq)}")

        try:
            via_gate()  # warm: the task row, pooled connection, prepared statements
            via_floor()
            gate_proxy.reset()
            floor_proxy.reset()
            for _ in range(counted):
                n = f"c{next(seq)}"
                gate.execute(task, {"call_id": n, "name": "noop", "arguments": {"n": n}})
                floor.call(task, n)
            gate_trips = gate_proxy.round_trips() / counted
            floor_trips = floor_proxy.round_trips() / counted
            series = paired({"agent-gate": via_gate, "floor": via_floor}, rounds)
        finally:
            gate.close()
            floor.close()
    assert len(gate_ran) == len(set(gate_ran)), "a gate call ran twice"
    assert len(floor.ran) == len(set(floor.ran)), "a floor call ran twice"
    assert len(gate_ran) == len(floor.ran) == (1 + rounds) * calls + counted
    return {
        "delay_ms_each_way": delay_ms,
        "calls_per_round": calls,
        "rounds": rounds,
        "gate_round_trips_per_call": gate_trips,
        "floor_round_trips_per_call": floor_trips,
        "gate_calls_per_s": calls / series["agent-gate"].median,
        "floor_calls_per_s": calls / series["floor"].median,
        "gate_vs_floor": paired_ratio(series, "agent-gate", "floor"),
    }


def run_section(quick: bool) -> dict[str, Any] | None:
    with scratch_database("agent_gate_rt_bench") as conninfo:
        if conninfo is None:
            return None
        url = sqlalchemy_url(conninfo)
        from agent_gate.ledger.store import Ledger

        Ledger(url, auto_upgrade=True).close()
        return {"runs": [_measure(url, conninfo, delay, quick) for delay in (0.0, DELAY_MS)]}


def markdown(section: dict[str, Any] | None) -> list[str]:
    if section is None:
        return ["PostgreSQL: no server available in this run.", ""]
    lines = [
        "One process, a no-op tool on a known task, through a counting loopback proxy; "
        "the floor is raw psycopg committing the intent and the outcome (autocommit). "
        "PostgreSQL with fsync and synchronous_commit on.",
        "",
        "| added delay each way | round trips per call: gate / floor | gate calls/s "
        "| floor calls/s | gate / floor (paired) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for run in section["runs"]:
        lines.append(
            f"| {run['delay_ms_each_way']:g} ms | {run['gate_round_trips_per_call']:.1f} / "
            f"{run['floor_round_trips_per_call']:.1f} | {run['gate_calls_per_s']:,.0f} | "
            f"{run['floor_calls_per_s']:,.0f} | {run['gate_vs_floor']:.2f}x |"
        )
    lines.append("")
    return lines


def targets(section: dict[str, Any] | None) -> list[tuple[str, bool, str]]:
    """Judged as the issue measured them: on this machine, no delay added; the
    networked run is shown beside (there round trips weigh more than fsyncs)."""
    if section is None:
        return []
    first, networked = section["runs"][0], section["runs"][-1]
    return [
        (
            f"PostgreSQL: at most {TARGET_ROUND_TRIPS} round trips per call",
            first["gate_round_trips_per_call"] <= TARGET_ROUND_TRIPS,
            f"{first['gate_round_trips_per_call']:.1f} (floor "
            f"{first['floor_round_trips_per_call']:.1f})",
        ),
        (
            f"PostgreSQL: gate >= {TARGET_RATIO}x the psycopg two-commit floor (paired)",
            first["gate_vs_floor"] >= TARGET_RATIO,
            f"{first['gate_vs_floor']:.2f}x; {networked['gate_vs_floor']:.2f}x with "
            f"{networked['delay_ms_each_way']:g} ms added each way",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    section = run_section(args.quick)
    print(json.dumps(section, indent=2))
    print("\n".join(markdown(section)))


if __name__ == "__main__":
    main()
