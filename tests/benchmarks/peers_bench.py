"""Section 6: agent-gate beside the durable-execution peers, on one workload.

Every candidate runs the same calls of a no-op tool with small arguments
(``{"n": i}``), each a durable step whose intent is stored before the tool runs
and whose outcome after (peers/candidates.py): agent-gate's ``Gate.execute``,
the two-commit floor (raw driver: intent commit, run, outcome commit), DBOS (a
step per call, as one workflow per call and as a batch of steps in one
workflow), LangGraph's ``ToolNode`` with its SQLite or PostgreSQL saver, and
Powertools' idempotency over Redis. The durability is the same everywhere:
SQLite files in WAL with ``synchronous=FULL`` (checked in each process), Redis
with ``appendonly yes`` and ``appendfsync always`` (a server of the bench's own,
in a temporary directory), PostgreSQL with ``fsync`` and
``synchronous_commit`` on (checked).

Each candidate is a process of its own (peers/worker.py), so that DBOS, one
instance per process, can be measured twice and ``strace`` can count each
one's fsyncs. Rounds are paired (harness.paired): a candidate's ratio to
agent-gate is the median over rounds of their time ratio. Every run of the tool
is appended to a file outside every framework; after the timed rounds each
candidate is handed two finished calls again (``replay``: the same call id,
workflow id, thread or payload, as after a restart) and the file must hold each
call exactly once. A peer whose package is missing is skipped, and said so.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness import paired, paired_ratio
from scratch_db import scratch_database

HERE = Path(__file__).resolve().parent
WORKER = HERE / "peers" / "worker.py"
SQLITE = "sqlite"
POSTGRES = "postgres"


@dataclass(frozen=True)
class Peer:
    """A candidate: its worker name, its label, the modules it needs, where it stores."""

    name: str
    label: str
    needs: tuple[str, ...]
    stores: tuple[str, ...] = (SQLITE, POSTGRES)


PEERS = (
    Peer("agent-gate", "agent-gate `Gate.execute`", ("agent_gate",)),
    Peer("floor", "two-commit floor (raw driver)", ()),
    Peer("dbos", "DBOS, a workflow per call", ("dbos",)),
    Peer("dbos-steps", "DBOS, {batch} steps in one workflow", ("dbos",)),
    Peer("langgraph", "LangGraph `ToolNode` + saver", ("langgraph.prebuilt",)),
    # Its persistence layers are DynamoDB and Redis; Redis is the one run here.
    Peer(
        "powertools",
        "Powertools idempotency (Redis)",
        ("aws_lambda_powertools", "boto3", "redis", "jmespath"),
        (SQLITE,),
    ),
)
SAVER = {SQLITE: "langgraph.checkpoint.sqlite", POSTGRES: "langgraph.checkpoint.postgres"}


def _missing(peer: Peer, store: str) -> list[str]:
    needs = list(peer.needs)
    if peer.name == "langgraph":
        needs.append(SAVER[store])
    if store == POSTGRES:
        needs.append("psycopg")
    missing = []
    for module in needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(module)
    return missing


# -- processes -----------------------------------------------------------------------


class Worker:
    """One candidate's process; ``ask`` sends a command and waits for its answer."""

    def __init__(
        self, peer: str, where: str, runs: Path, log: Path, trace: Path | None = None
    ) -> None:
        command = [sys.executable, str(WORKER), peer, where, str(runs)]
        if trace is not None:
            syscalls = "trace=fsync,fdatasync,sendto,recvfrom,chdir"
            command = [
                "strace",
                "-f",
                "-qq",
                "--seccomp-bpf",
                "-e",
                syscalls,
                "-o",
                str(trace),
                *command,
            ]
        self.log: IO[str] = log.open("w")
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.peer = peer
        self.runs = runs
        self.issued = 0

    def wait(self, word: str = "ready") -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                got = line[3:].strip()
                if got != word:
                    raise RuntimeError(f"{self.peer}: {got} (see {self.log.name})")
                return
        raise RuntimeError(f"{self.peer} exited (see {self.log.name})")

    def ask(self, command: str, expect: str = "ok") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.wait(expect)

    def batch(self, count: int) -> None:
        self.ask(f"run {self.issued} {count}")
        self.issued += count

    def quit(self) -> None:
        self.ask("quit", "bye")
        self.proc.wait(timeout=60)
        self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(directory: Path, trace: Path | None = None) -> Iterator[int]:
    """A Redis of the bench's own: loopback, free port, AOF with a sync per write."""
    import redis

    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    command = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
        "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
        "--logfile", str(directory / "redis.log"),
    ]  # fmt: skip
    if trace is not None:
        command = [
            "strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=fsync,fdatasync",
            "-o", str(trace), *command,
        ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.025)
        config = client.config_get("append*")
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always", config
        yield port
    finally:
        # SHUTDOWN, not a signal to the process: under strace the signal stops at strace.
        # On a bare socket: redis-py retries a command whose connection closes, and
        # the connection closing is how SHUTDOWN answers.
        client.close()
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"SHUTDOWN NOSAVE\r\n")
            while s.recv(4096):
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- counting ------------------------------------------------------------------------


def _once(worker: Worker) -> dict[str, int]:
    """What the side-effect file says: calls issued, calls run once, more, never."""
    ran = Counter(worker.runs.read_text().split())
    return {
        "issued": worker.issued,
        "ran_once": sum(1 for k in range(worker.issued) if ran[str(k)] == 1),
        "ran_more": sum(1 for k in range(worker.issued) if ran[str(k)] > 1),
        "never_ran": sum(1 for k in range(worker.issued) if ran[str(k)] == 0),
        "strays": sum(n for k, n in ran.items() if not k.isdigit() or int(k) >= worker.issued),
    }


TRACED_FIRST_CALL = 1_000_000
_SYNC = re.compile(r"^\d+\s+(fsync|fdatasync)\(")
_SEND = re.compile(r"^\d+\s+sendto\(")
_MARK = re.compile(r"^\d+\s+chdir\(")
_RECEIVED = re.compile(r"^(\d+)\s+(?:<\.\.\. )?recvfrom(?: resumed>)?.*\)\s+=\s+[1-9]\d*$")
"""A ``recvfrom`` that returned bytes (a finished call, or the resumed end of one): an
answer arrived. One that returned -1 (EAGAIN: a non-blocking poll of the socket) or
is still unfinished is not one."""


def _between_marks(trace: Path, syscall: re.Pattern[str]) -> int:
    inside, count = False, 0
    for line in trace.read_text().splitlines():
        if _MARK.match(line):
            inside = not inside
        elif inside and syscall.match(line):
            count += 1
    return count


def _round_trips(trace: Path) -> int:
    """Round trips between the marks: per thread, a run of ``sendto`` calls ended by a
    ``recvfrom`` that returned bytes. A client that waits for each statement's answer
    makes one per send; a pipelined one (agent-gate's writes: libpq pipeline mode, each
    statement written as it is queued, one sync) sends several requests and then
    reads, and that is one round trip, as ``netproxy`` counts it in section 8."""
    inside, count = False, 0
    waiting: set[str] = set()
    for line in trace.read_text().splitlines():
        if _MARK.match(line):
            inside = not inside
            continue
        if not inside:
            continue
        if _SEND.match(line):
            waiting.add(line.split(None, 1)[0])
        elif (got := _RECEIVED.match(line)) is not None and got.group(1) in waiting:
            waiting.discard(got.group(1))
            count += 1
    return count


def _counts(wheres: dict[str, str], tmp: Path, calls: int) -> dict[str, dict[str, float]]:
    """Per call of each candidate's process, warm, under strace: fsync + fdatasync,
    and on PostgreSQL round trips (``_round_trips``: sends answered by a receive;
    background threads' count too) and ``sendto`` calls.

    The processes start together (imports are the slow part) and are driven one
    at a time; only the syscalls between the two ``mark`` commands count.
    """
    workers = {
        peer: Worker(peer, where, tmp / f"{peer}.runs", tmp / f"{peer}.log", tmp / f"{peer}.strace")
        for peer, where in wheres.items()
    }
    try:
        for worker in workers.values():
            worker.wait()
        for worker in workers.values():
            # New call ids: on PostgreSQL the timed run's calls are still in the database.
            worker.issued = TRACED_FIRST_CALL
            worker.batch(10)  # warm: psycopg prepares a statement at its fifth run
            worker.ask("mark")
            worker.batch(calls)
            worker.ask("mark")
            worker.quit()
    finally:
        for worker in workers.values():
            worker.kill()
    return {
        peer: {
            "fsyncs_per_call": _between_marks(tmp / f"{peer}.strace", _SYNC) / calls,
            "sends_per_call": _between_marks(tmp / f"{peer}.strace", _SEND) / calls,
            "round_trips_per_call": _round_trips(tmp / f"{peer}.strace") / calls,
        }
        for peer in workers
    }


def _redis_fsyncs(tmp: Path, calls: int) -> float:
    """Powertools' fsyncs are Redis's: the server's count for 3 + calls, less for 3."""
    totals = []
    for extra in (0, calls):
        trace = tmp / f"redis-{extra}.strace"
        with redis_server(tmp / f"redis-{extra}", trace) as port:
            worker = Worker(
                "powertools", str(port), tmp / f"pt-{extra}.runs", tmp / f"pt-{extra}.log"
            )
            try:
                worker.wait()
                worker.batch(3 + extra)
                worker.quit()
            finally:
                worker.kill()
        totals.append(sum(1 for line in trace.read_text().splitlines() if _SYNC.match(line)))
    return (totals[1] - totals[0]) / calls


# -- one store -----------------------------------------------------------------------


def _measure(
    store: str, wheres: dict[str, str], tmp: Path, rounds: int, batch: int, count: bool
) -> dict[str, Any]:
    workers = {
        name: Worker(name, where, tmp / f"{store}-{name}.runs", tmp / f"{store}-{name}.log")
        for name, where in wheres.items()
    }
    try:
        for worker in workers.values():  # started together, waited for in turn
            worker.wait()
        for worker in workers.values():
            worker.batch(batch)  # warm: first statements, caches, lazy imports
        series = paired({name: (lambda w=w: w.batch(batch)) for name, w in workers.items()}, rounds)
        replayed: dict[str, bool] = {}
        for name, worker in workers.items():
            if name == "floor":
                continue  # the floor is only its two commits: nothing to replay
            for n in (0, worker.issued - 1):
                worker.ask(f"replay {n}")
            replayed[name] = True
        for worker in workers.values():
            worker.quit()
    finally:
        for worker in workers.values():
            worker.kill()
    rows = []
    for name, worker in workers.items():
        once = _once(worker)
        row: dict[str, Any] = {
            "candidate": name,
            "calls_per_s": batch / series[name].median,
            "us_per_call": series[name].median / batch * 1e6,
            "min_us": series[name].low / batch * 1e6,
            "max_us": series[name].high / batch * 1e6,
            "ratio_vs_agent_gate": paired_ratio(series, name, "agent-gate")
            if "agent-gate" in series
            else None,
            "replayed_without_rerun": replayed.get(name),
            "exactly_once": once["ran_once"] == once["issued"] and once["strays"] == 0,
            **once,
        }
        rows.append(row)
    if count:
        traced = tmp / "traced"
        traced.mkdir()
        # Fresh files for SQLite; PostgreSQL's fsyncs are the server's, its round trips
        # this process's. Powertools' fsyncs are its Redis server's, counted apart.
        where = {name: url for name, url in wheres.items() if name != "powertools"}
        if store == SQLITE:
            for name in where:
                (traced / name).mkdir()
                where[name] = str(traced / name)
        counted = _counts(where, traced, max(batch, 10))
        if "powertools" in wheres:
            counted["powertools"] = {"fsyncs_per_call": _redis_fsyncs(traced, max(batch, 10))}
        for row in rows:
            got = counted.get(row["candidate"], {})
            if store == SQLITE:
                row["fsyncs_per_call"] = got.get("fsyncs_per_call")
            else:
                row["round_trips_per_call"] = got.get("round_trips_per_call")
                row["sends_per_call"] = got.get("sends_per_call")
    return {"store": store, "rows": rows}


@contextmanager
def _postgres_database() -> Iterator[str | None]:
    """A fresh database for the PostgreSQL candidates, dropped after; None without a
    server. The candidates must run with fsync and synchronous_commit on."""
    with scratch_database("agent_gate_peers") as url:
        if url is not None:
            import psycopg

            with psycopg.connect(url) as conn:
                settings = {
                    key: conn.execute(f"SHOW {key}").fetchone()[0]  # type: ignore[index]
                    for key in ("fsync", "synchronous_commit")
                }
            assert settings == {"fsync": "on", "synchronous_commit": "on"}, settings
        yield url

def run_section(
    quick: bool, count_fsyncs: bool = True, stores: tuple[str, ...] = (SQLITE, POSTGRES)
) -> dict[str, Any]:
    rounds = 3 if quick else 15  # many: the machines these run on are shared and noisy
    batch = 10 if quick else 40  # calls per round; the DBOS batch workflow runs them all
    out: dict[str, Any] = {
        "rounds": rounds,
        "calls_per_round": batch,
        "skipped": [],
        "stores": {},
        "fsyncs_counted": count_fsyncs and shutil.which("strace") is not None,
    }
    with tempfile.TemporaryDirectory(dir=os.environ.get("AGENT_GATE_PEERS_TMP")) as name:
        tmp = Path(name)
        for store in stores:
            database = _postgres_database() if store == POSTGRES else nullcontext(None)
            with database as url, redis_or_none(tmp, store) as port:
                if store == POSTGRES and url is None:
                    out["skipped"].append("PostgreSQL: no server reachable")
                    continue
                wheres: dict[str, str] = {}
                for peer in PEERS:
                    if store not in peer.stores:
                        continue
                    missing = _missing(peer, store)
                    if peer.name == "powertools" and port is None:
                        missing.append("redis-server")
                    if missing:
                        out["skipped"].append(
                            f"{peer.name} on {store}: not installed ({', '.join(missing)})"
                        )
                        continue
                    if peer.name == "powertools":
                        wheres[peer.name] = str(port)
                    elif store == POSTGRES:
                        wheres[peer.name] = str(url)
                    else:
                        wheres[peer.name] = str(tmp / "files")
                (tmp / "files").mkdir(exist_ok=True)
                run = tmp / store
                run.mkdir()
                out["stores"][store] = _measure(
                    store, wheres, run, rounds, batch, out["fsyncs_counted"]
                )
    return out


@contextmanager
def redis_or_none(tmp: Path, store: str) -> Iterator[int | None]:
    if store != SQLITE or shutil.which("redis-server") is None:
        yield None
        return
    try:
        import redis  # noqa: F401
    except ImportError:
        yield None
        return
    with redis_server(tmp / "redis") as port:
        yield port


# -- report --------------------------------------------------------------------------

STORE_TITLE = {
    SQLITE: "SQLite files in WAL with synchronous=FULL; Powertools on Redis with "
    "appendfsync always",
    POSTGRES: "PostgreSQL with fsync and synchronous_commit on",
}


def _label(name: str, batch: int, store: str) -> str:
    peer = next(p for p in PEERS if p.name == name)
    label = peer.label.format(batch=batch)
    if name == "langgraph":
        label = label.replace("saver", "SqliteSaver" if store == SQLITE else "PostgresSaver")
    return label


def markdown(section: dict[str, Any]) -> list[str]:
    batch = section["calls_per_round"]
    lines = [
        f"One no-op tool call with small arguments, each a durable step; {batch} calls per "
        f"round, {section['rounds']} rounds, every candidate in its own process; ratio = "
        'paired speed-up over agent-gate (above 1 is faster). "Ran once" is read from a file '
        "the tool appends to outside every framework, after each candidate was also handed "
        "two finished calls again (same call id, workflow id, thread or payload); the floor, "
        "only its two commits, has nothing to hand them to.",
        "",
    ]
    for store, result in section["stores"].items():
        count = "fsyncs per call" if store == SQLITE else "round trips (sends) per call"
        key = "fsyncs_per_call" if store == SQLITE else "round_trips_per_call"
        lines += [
            f"**{STORE_TITLE[store]}**",
            "",
            f"| candidate | calls/s | per call (min-max) | ratio | {count} | ran once |",
            "|---|---:|---:|---:|---:|---|",
        ]
        # agent-gate first, then by the paired ratio (the comparison that saw the same moments)
        for row in sorted(result["rows"], key=lambda r: -(r["ratio_vs_agent_gate"] or 0)):
            ratio = row["ratio_vs_agent_gate"]
            counted = row.get(key)
            sends = row.get("sends_per_call") if store != SQLITE else None
            once = (
                f"yes, {row['issued']} of {row['issued']}"
                if row["exactly_once"]
                else f"**no**: {row['ran_more']} more than once, {row['never_ran']} never"
            )
            lines.append(
                f"| {_label(row['candidate'], batch, store)} | {row['calls_per_s']:,.0f} | "
                f"{row['us_per_call'] / 1000:,.2f} ms ({row['min_us'] / 1000:,.2f}-"
                f"{row['max_us'] / 1000:,.2f}) | {f'{ratio:.2f}x' if ratio else '-'} | "
                f"{'-' if counted is None else f'{counted:.1f}'}"
                f"{'' if sends is None else f' ({sends:.1f})'} | {once} |"
            )
        lines.append("")
    if section["fsyncs_counted"]:
        lines += [
            "Counted by `strace` on a separate warm run of each process: fsync and fdatasync "
            "(Powertools: its Redis server's); on PostgreSQL the client's round trips (a run "
            "of `sendto` calls answered by a `recvfrom`) and, in brackets, its `sendto` calls: "
            "a client that waits for each answer sends once per round trip, agent-gate's "
            "pipelined writes once per statement, all answered in one round trip (the "
            "server's fsyncs are shared with its other clients and not counted).",
            "",
        ]
    for note in section["skipped"]:
        lines.append(f"Skipped: {note}.")
    if section["skipped"]:
        lines.append("")
    return lines


def targets(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    rows = [(store, row) for store, result in section["stores"].items() for row in result["rows"]]
    wrong = [f"{row['candidate']} on {store}" for store, row in rows if not row["exactly_once"]]
    return [
        (
            "Peers: every candidate ran every call exactly once",
            not wrong,
            f"{len(rows) - len(wrong)} of {len(rows)}"
            + (f" (not: {', '.join(wrong)})" if wrong else ""),
        )
    ]
