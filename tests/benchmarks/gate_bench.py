"""Section 3: the ledger and the whole gate, against the physical floor.

Calls per second through ``Gate.execute`` with a no-op tool on SQLite (WAL,
``synchronous=FULL`` as the ledger sets it, and ``NORMAL``), paired round by
round with the floor measured in the same run and on the same file system: raw
``sqlite3`` doing only the commits the design requires for one call (the call
recorded, decided and claimed before the tool runs; its outcome: two commits).
A second floor, "the ledger's statements", runs on raw ``sqlite3`` the twelve
statements the ledger issues per call of a task it already knows (the call insert
returning the new row, the compare-and-set updates, the audit chain's head read,
entry inserts and head move) in the same two commits: the gap between it and the
gate is what the library adds above its own SQL. CPU per state transition is
user-mode CPU (``getrusage``): the kernel's share, of which fsync is most, is
excluded.

On PostgreSQL (``AGENT_GATE_TEST_POSTGRES_URL``, or a server that trusts local
connections on 127.0.0.1:5432), 1, 2, 4 and 8 worker processes execute
disjoint calls of a task each (throughput), then all of them race on the same
calls, and every run of the tool is logged: each call must have run exactly once.
Then the throughput run again behind ``netproxy``, which adds a fixed delay each
way: on one machine the server answers in microseconds and workers contend for its
two cores; across a network each round trip costs milliseconds, workers wait on it,
and what bounds scaling is rows they all lock (the audit chain's head) and the
round trips each call spends (counted by the proxy).
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import paired, paired_ratio
from netproxy import Proxy
from scratch_db import scratch_database, sqlalchemy_url
from sqlalchemy import event

from agent_gate import Gate, ToolRegistry
from agent_gate.ledger.store import Ledger

HERE = Path(__file__).resolve().parent
TRANSITIONS = 3  # authorized (recorded with its decision), executing, succeeded
COMMITS = 2  # received+authorized+executing in one, the outcome in the other


def _tools() -> ToolRegistry:
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        return {"ok": True}

    tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    return tools


class _Commits:
    """Counts the COMMITs the gate's SQLite connections run, while ``counting``.

    Counted on the driver (sqlite3's trace callback sees every statement it runs,
    ``connection.commit()`` included), not with a Core ``commit`` listener: a
    listener makes the ledger run its transactions through Core so that it sees
    them, and the path counted would not be the path timed. ``stop`` removes the
    callbacks before anything is timed.
    """

    def __init__(self) -> None:
        self.count = 0
        self.counting = True
        self.drivers: list[Any] = []

    def trace(self, dbapi_connection: Any) -> None:
        if not self.counting:
            return  # a connection opened while timing is not slowed by a callback
        self.drivers.append(dbapi_connection)
        dbapi_connection.set_trace_callback(self._seen)

    def _seen(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.count += 1

    def stop(self) -> None:
        self.counting = False
        for driver in self.drivers:
            driver.set_trace_callback(None)
        self.drivers.clear()


def _gate(path: Path, sync: str) -> tuple[Gate, _Commits]:
    ledger = Ledger(f"sqlite:///{path}", create=True)
    commits = _Commits()

    @event.listens_for(ledger.engine, "connect")
    def _sync(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA synchronous = {sync}")
        commits.trace(dbapi_connection)

    ledger.engine.dispose()
    with ledger.engine.connect() as conn:
        level = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    assert level == {"FULL": 2, "NORMAL": 1}[sync], (sync, level)
    return Gate(_tools(), ledger), commits


class Floor:
    """Raw sqlite3: the two commits one call needs, and nothing else."""

    def __init__(self, path: Path, sync: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {sync}")
        self.db.execute(
            "CREATE TABLE calls (id INTEGER PRIMARY KEY, task TEXT, call TEXT, tool TEXT, "
            "state TEXT, version INTEGER DEFAULT 0, args_hash TEXT, result TEXT, "
            "UNIQUE (task, call))"
        )
        self.db.execute("CREATE TABLE tasks (id TEXT PRIMARY KEY, at TEXT)")
        self.db.execute(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY, call INTEGER, event TEXT, "
            "seq INTEGER UNIQUE, prev TEXT, hash TEXT)"
        )
        self.db.execute("CREATE TABLE head (id INTEGER PRIMARY KEY, seq INTEGER, hash TEXT)")
        self.db.execute("INSERT INTO head VALUES (1, 0, '')")

    def _link(self, row: int, *events: str) -> None:
        db = self.db
        seq, prev = db.execute("SELECT seq, hash FROM head WHERE id = 1").fetchone()
        for name in events:
            seq += 1
            db.execute(
                "INSERT INTO audit (call, event, seq, prev, hash) VALUES (?, ?, ?, ?, ?)",
                (row, name, seq, prev, "h" * 64),
            )
        db.execute("UPDATE head SET seq = ?, hash = ? WHERE id = 1", (seq, "h" * 64))

    def _cas(self, row: int, old: str, new: str, version: int, result: str | None) -> None:
        got = self.db.execute(
            "UPDATE calls SET state = ?, version = ?, result = ? "
            "WHERE id = ? AND state = ? AND version = ? RETURNING *",
            (new, version + 1, result, row, old, version),
        ).fetchall()
        assert len(got) == 1

    def ledger_call(self, task: str, call_id: str) -> None:
        """The ledger's twelve statements for one call, in its two commits.

        The task is known to the ledger after its first call, so it is not inserted
        again; the new call's row comes back from its insert (``RETURNING``).
        """
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "INSERT INTO calls (task, call, tool, state, args_hash) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING RETURNING *",
            (task, call_id, "noop", "received", "0" * 64),
        ).fetchall()[0][0]
        self._cas(row, "received", "authorized", 0, None)
        self._cas(row, "authorized", "executing", 1, None)
        self._link(row, "received", "allow", "claim")
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        self._cas(row, "executing", "succeeded", 2, '{"ok":true}')
        self._link(row, "succeed")
        db.execute("COMMIT")

    def call(self, task: str, call_id: str) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        cur = db.execute(
            "INSERT INTO calls (task, call, tool, state, args_hash) VALUES (?, ?, ?, ?, ?)",
            (task, call_id, "noop", "executing", "0" * 64),
        )
        row = cur.lastrowid
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE calls SET state = 'succeeded', result = ? WHERE id = ? AND state = 'executing'",
            ('{"ok":true}', row),
        )
        db.execute("COMMIT")


def _wal_pages(path: Path, run: Callable[[], None], calls: int) -> float:
    """WAL frames (pages) one call appends: what each commit hands to fsync.

    The WAL is emptied first (``TRUNCATE`` checkpoint on a side connection) and the
    round is far below the auto-checkpoint threshold, so its size afterwards is
    exactly the frames the calls appended (a frame is a page plus its header).
    """
    wal = Path(f"{path}-wal")
    side = sqlite3.connect(path)
    try:
        side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = side.execute("PRAGMA page_size").fetchone()[0]
        start = wal.stat().st_size if wal.exists() else 0
        run()
        return (wal.stat().st_size - start) / (page + 24) / calls
    finally:
        side.close()


def _user_cpu() -> float:
    """This process's user-mode CPU seconds (all threads): CPU without the kernel's
    share, of which fsync is most."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _sqlite(quick: bool) -> dict[str, Any]:
    # Quick runs too take enough calls per round that one slow fsync does not swing a
    # round's ratio (20 calls a round once read 0.27x against 0.46-0.56x around it).
    rounds = 7 if quick else 9
    calls = 40 if quick else 60
    ids = itertools.count()
    out: dict[str, Any] = {"rounds": rounds, "calls_per_round": calls, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:  # same file system as the repository here
        for sync in ("FULL", "NORMAL"):
            gate, commits = _gate(Path(tmp) / f"gate-{sync}.db", sync)
            floor = Floor(Path(tmp) / f"floor-{sync}.db", sync)

            def via_gate(gate: Gate = gate) -> None:
                for _ in range(calls):
                    n = next(ids)
                    outcome = gate.execute(
                        "bench", {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}}
                    )
                    assert outcome.result == {"ok": True}

            def via_floor(floor: Floor = floor) -> None:
                for _ in range(calls):
                    floor.call("bench", f"c{next(ids)}")

            def via_statements(floor: Floor = floor) -> None:
                for _ in range(calls):
                    floor.ledger_call("bench", f"s{next(ids)}")

            via_gate()
            before = commits.count
            via_gate()
            per_call = (commits.count - before) / calls
            commits.stop()
            pages = {
                "gate": _wal_pages(Path(tmp) / f"gate-{sync}.db", via_gate, calls),
                "floor": _wal_pages(Path(tmp) / f"floor-{sync}.db", via_floor, calls),
                "statements": _wal_pages(Path(tmp) / f"floor-{sync}.db", via_statements, calls),
            }
            trio = {"gate": via_gate, "floor": via_floor, "statements": via_statements}
            series = paired(trio, rounds)
            cpu = paired(trio, rounds, clock=time.process_time)
            # fsync is the kernel's work: user CPU is the CPU with fsync excluded.
            user = paired(trio, rounds, clock=_user_cpu)
            gate.close()
            floor.db.close()
            out["modes"][sync] = {
                "gate_calls_per_s": calls / series["gate"].median,
                "floor_calls_per_s": calls / series["floor"].median,
                "gate_vs_floor": paired_ratio(series, "gate", "floor"),
                "gate_commits_per_call": per_call,
                "floor_commits_per_call": COMMITS,
                "gate_cpu_us_per_call": cpu["gate"].median / calls * 1e6,
                "gate_cpu_us_per_transition": user["gate"].median / calls / TRANSITIONS * 1e6,
                "gate_user_cpu_us_per_call": user["gate"].median / calls * 1e6,
                "floor_cpu_us_per_call": cpu["floor"].median / calls * 1e6,
                "floor_user_cpu_us_per_call": user["floor"].median / calls * 1e6,
                "statements_calls_per_s": calls / series["statements"].median,
                "gate_vs_statements": paired_ratio(series, "gate", "statements"),
                "statements_vs_floor": paired_ratio(series, "statements", "floor"),
                "statements_user_cpu_us_per_call": user["statements"].median / calls * 1e6,
                "wal_pages_per_call": pages,
            }
    return out


# -- PostgreSQL ----------------------------------------------------------------------


def _workers(
    url: str,
    shares: list[tuple[str, int, int]],
    log: Path,
    on_ready: Callable[[], None] | None = None,
) -> float:
    """Start one process per share (task, first call, count), release them together
    (``on_ready`` runs once all are connected, before the release), return the wall time."""
    go = log.with_suffix(".go")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "gate_worker.py"),
                url,
                task,
                str(a),
                str(n),
                str(log),
                str(go),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for task, a, n in shares
    ]
    while len(list(go.parent.glob(go.name + ".*.ready"))) < len(procs):
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError("a gate worker failed to start")
        time.sleep(0.02)
    if on_ready is not None:
        on_ready()
    go.touch()
    times = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, "gate worker failed"
        times.append(json.loads(stdout.strip().splitlines()[-1])["seconds"])
    return max(times)


def _ran(*logs: Path) -> list[Counter[str]]:
    return [Counter(path.read_text().split()) for path in logs]


RUN = uuid.uuid4().hex[:8]
"""In every task id of this run: a ledger a previous run wrote (the same
``AGENT_GATE_TEST_POSTGRES_URL``) holds the same call ids already settled, which
would be answered from the ledger instead of run, and counted as never run."""

NET_DELAY_MS = 1.5
"""Added by the proxy in each direction: a round trip costs at least 3 ms, as between
machines of one region, so that workers wait on the network rather than on this
machine's two cores."""


def _vacuum(url: str) -> None:
    """``VACUUM ANALYZE`` the ledger's database, outside any timing, before each phase.

    Every call leaves dead row versions behind (a state change is an update that moves
    the row), and a phase measured on the dead rows of the phases before it pays for
    them: the 8-worker phase, last, ran on the most and read 4.3x of one where the
    same phase after a vacuum read 4.9-5.9x. Each phase starts from a vacuumed table
    instead, as autovacuum keeps a running ledger."""
    from sqlalchemy import create_engine

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        engine.dispose()


def _cpu_ticks() -> tuple[int, int] | None:
    """All CPUs' (total, idle) ticks since boot (Linux ``/proc/stat``), or None."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(n) for n in stat.readline().split()[1:]]
    except OSError:
        return None
    return sum(ticks), ticks[3] + ticks[4]  # idle + iowait


def _busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time that was busy between two ``_cpu_ticks``."""
    if before is None or after is None or after[0] == before[0]:
        return None
    return 1 - (after[1] - before[1]) / (after[0] - before[0])


def _share(busy: float | None) -> str:
    return "?" if busy is None else f"{busy:.0%}"


def _networked(url: str, tmp: Path) -> dict[str, Any]:
    """Workers on distinct tasks behind a delaying proxy: how throughput scales when
    the database is across a network, and the round trips each call costs."""
    from sqlalchemy.engine import make_url

    # As many calls per worker in a quick run: with 15, a worker's start and finish
    # weighed on its calls/s and the 8-to-1 ratio read 4.3x where full runs read
    # 5.0-5.75x; 60 cost a few seconds.
    per = 60
    target = make_url(url)
    rows = []
    with Proxy((target.host or "127.0.0.1", target.port or 5432),
               delay_ms=NET_DELAY_MS) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False)
        for workers in (1, 2, 4, 8):
            _vacuum(url)
            log = tmp / f"net-{workers}.log"
            shares = [(f"net-{RUN}-{workers}-{k}", k * per, per) for k in range(workers)]
            released: list[tuple[int, int] | None] = []

            def release(proxy: Proxy = proxy, released: list[Any] = released) -> None:
                proxy.reset()
                released.append(_cpu_ticks())

            wall = _workers(proxied, shares, log, on_ready=release)
            # Busy from the release to the last worker's exit (its teardown included:
            # an upper bound): near 100% says the cores bound throughput, not a lock.
            busy = _busy(released[0], _cpu_ticks())
            trips = proxy.round_trips()
            (ran,) = _ran(log)
            rows.append({
                "workers": workers,
                "calls": per * workers,
                "calls_per_s": per * workers / wall,
                "round_trips_per_call": trips / (per * workers),
                "machine_busy": busy,
                "duplicate_executions": sum(n - 1 for n in ran.values() if n > 1),
                "calls_never_run": per * workers - len(ran),
            })
    return {"delay_ms": NET_DELAY_MS, "rows": rows}


def _postgres(quick: bool) -> dict[str, Any] | None:
    url = os.environ.get("AGENT_GATE_TEST_POSTGRES_URL")
    if url:
        return _postgres_on(url, quick)
    with scratch_database("agent_gate_bench") as found:
        return None if found is None else _postgres_on(sqlalchemy_url(found), quick)


def _postgres_on(url: str, quick: bool) -> dict[str, Any]:
    Ledger(url, auto_upgrade=True).close()
    calls = 80 if quick else 400
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2, 4, 8):
            _vacuum(url)
            per = calls // workers
            log = Path(tmp) / f"run-{workers}.log"
            # Each worker its own task, as each agent run is: calls of one task share
            # that task's audit chain head, calls of different tasks share no row.
            wall = _workers(url, [(f"tp-{RUN}-{workers}-{k}", k * per, per)
                                  for k in range(workers)],
                            log)
            race_log = Path(tmp) / f"race-{workers}.log"
            race_calls = calls // 4
            _workers(url, [(f"race-{RUN}-{workers}", 0, race_calls)] * workers, race_log)
            # Each phase has its own tasks, so a call number may appear once per log.
            runs = _ran(log, race_log)
            duplicates = sum(n - 1 for ran in runs for n in ran.values() if n > 1)
            missing = (per * workers - len(runs[0])) + (race_calls - len(runs[1]))
            rows.append(
                {
                    "workers": workers,
                    "calls": per * workers,
                    "calls_per_s": per * workers / wall,
                    "race_calls": race_calls,
                    "duplicate_executions": duplicates,
                    "calls_never_run": missing,
                }
            )
        networked = _networked(url, Path(tmp))
    return {"url": url.split("@")[-1], "rows": rows, "networked": networked}


def run_section(quick: bool) -> dict[str, Any]:
    return {"sqlite": _sqlite(quick), "postgres": _postgres(quick), "cpus": os.cpu_count()}


def markdown(section: dict[str, Any]) -> list[str]:
    sq = section["sqlite"]
    lines = [
        f"SQLite, WAL, one process; {sq['calls_per_round']} calls per round, {sq['rounds']} "
        "rounds. The floor is raw `sqlite3` doing the two commits one call needs; "
        "\"ledger's statements\" is raw `sqlite3` running the twelve statements the ledger "
        "issues per call in the same two commits. User CPU excludes the kernel (fsync).",
        "",
        "| synchronous | gate calls/s | floor calls/s | gate / floor (paired) "
        "| ledger's statements calls/s | gate / statements | commits per call (gate) "
        "| user CPU per call: gate / statements / floor | CPU per transition (user) "
        "| WAL pages per call: gate / statements / floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sync, m in sq["modes"].items():
        lines.append(
            f"| {sync} | {m['gate_calls_per_s']:,.0f} | {m['floor_calls_per_s']:,.0f} | "
            f"{m['gate_vs_floor']:.2f}x | {m['statements_calls_per_s']:,.0f} | "
            f"{m['gate_vs_statements']:.2f}x | {m['gate_commits_per_call']:.1f} | "
            f"{m['gate_user_cpu_us_per_call']:,.0f} / {m['statements_user_cpu_us_per_call']:,.0f}"
            f" / {m['floor_user_cpu_us_per_call']:,.0f} us | "
            f"{m['gate_cpu_us_per_transition']:,.0f} us | "
            f"{m['wal_pages_per_call']['gate']:.1f} / {m['wal_pages_per_call']['statements']:.1f}"
            f" / {m['wal_pages_per_call']['floor']:.1f} |"
        )
    lines.append("")
    pg = section["postgres"]
    if pg is None:
        lines += ["PostgreSQL: no server available in this run.", ""]
        return lines
    lines += [
        f"PostgreSQL ({pg['url']}), worker processes on {section['cpus']} CPUs: disjoint calls "
        "for throughput, then all workers racing on the same calls; every tool run logged.",
        "",
        "| workers | calls | calls/s | racing calls | duplicate executions | calls never run |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in pg["rows"]:
        lines.append(
            f"| {row['workers']} | {row['calls']} | {row['calls_per_s']:,.0f} | "
            f"{row['race_calls']} | {row['duplicate_executions']} | {row['calls_never_run']} |"
        )
    lines.append("")
    net = pg["networked"]
    lines += [
        f"Behind a loopback proxy adding {net['delay_ms']} ms each way (a round trip costs "
        f"{2 * net['delay_ms']:.0f} ms or more, as across a network): workers on distinct "
        "tasks, round trips counted by the proxy.",
        "",
        "| workers | calls | calls/s | vs 1 worker | round trips per call "
        "| machine CPU busy | duplicate executions | calls never run |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    one = net["rows"][0]["calls_per_s"]
    for row in net["rows"]:
        busy = row.get("machine_busy")
        lines.append(
            f"| {row['workers']} | {row['calls']} | {row['calls_per_s']:,.0f} | "
            f"{row['calls_per_s'] / one:.1f}x | {row['round_trips_per_call']:.1f} | "
            f"{'-' if busy is None else f'{busy:.0%}'} | "
            f"{row['duplicate_executions']} | {row['calls_never_run']} |"
        )
    lines.append("")
    return lines


def targets(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    full = section["sqlite"]["modes"]["FULL"]
    # The gate's time per call is at least the floor's (the same commits) plus its own
    # CPU, so 0.8x of the floor leaves a quarter of the floor's time per call for it.
    budget = 0.25 / full["floor_calls_per_s"] / TRANSITIONS * 1e6
    verdicts = [
        (
            f"SQLite: {COMMITS} synced commits per call that runs at once",
            full["gate_commits_per_call"] <= COMMITS,
            f"{full['gate_commits_per_call']:.1f} commits per call (counted on the driver)",
        ),
        (
            "Gate on SQLite synchronous=FULL >= 0.8x the two-commit floor (paired)",
            full["gate_vs_floor"] >= 0.8,
            f"{full['gate_vs_floor']:.2f}x ({full['gate_commits_per_call']:.1f} commits vs "
            f"{COMMITS}); "
            f"bound: 0.8x leaves {budget:.0f} us of CPU per transition beyond what the floor "
            f"spends (the CPU target allows 150); the ledger's own statements on raw sqlite3 "
            f"reach {full['statements_vs_floor']:.2f}x (they append "
            f"{full['wal_pages_per_call']['statements']:.1f} WAL pages per call to fsync, "
            f"the gate {full['wal_pages_per_call']['gate']:.1f}, the floor "
            f"{full['wal_pages_per_call']['floor']:.1f})",
        ),
        (
            "CPU per state transition <= 150 us (fsync excluded)",
            full["gate_cpu_us_per_transition"] <= 150,
            f"{full['gate_cpu_us_per_transition']:,.0f} us with synchronous=FULL "
            f"({section['sqlite']['modes']['NORMAL']['gate_cpu_us_per_transition']:,.0f} us "
            "with NORMAL)",
        ),
    ]
    pg = section["postgres"]
    if pg is not None:
        rows = pg["rows"]
        cpus = section["cpus"] or 1
        upto = [r for r in rows if r["workers"] <= cpus]
        grows = all(b["calls_per_s"] > a["calls_per_s"] for a, b in itertools.pairwise(upto))
        verdicts.append(
            (
                f"PostgreSQL throughput grows with workers up to {cpus} cores",
                grows,
                " -> ".join(f"{r['calls_per_s']:,.0f}" for r in rows) + " calls/s",
            )
        )
        net = pg["networked"]["rows"]
        scale = net[-1]["calls_per_s"] / net[0]["calls_per_s"]
        verdicts.append(
            (
                f"PostgreSQL behind {pg['networked']['delay_ms']} ms each way: "
                f"{net[-1]['workers']} workers >= 5x one",
                scale >= 5,
                f"{scale:.1f}x ({net[0]['calls_per_s']:,.0f} -> {net[-1]['calls_per_s']:,.0f} "
                f"calls/s; {net[0]['round_trips_per_call']:.1f} round trips per call; "
                f"{_share(net[-1].get('machine_busy'))} of this machine's CPU busy with "
                f"{net[-1]['workers']} workers, {_share(net[0].get('machine_busy'))} with one)",
            )
        )
        dups = sum(r["duplicate_executions"] for r in rows + net)
        verdicts.append(
            ("PostgreSQL: zero duplicate executions in every run", dups == 0, f"{dups}")
        )
    return verdicts
