"""Retention: a ledger that archived 90% of its calls against a new one with the same live calls.

    python tests/benchmarks/retention_bench.py              # 1,000,000 calls (issue 34)
    python tests/benchmarks/retention_bench.py --quick      # 20,000 calls: a smoke run

Two real SQLite ledgers hold the same live calls (the newest 10%, in tasks of
``PER_TASK``), each as a gate leaves it: a ``tool_calls`` row in ``succeeded`` and
its chained audit entries (``received``, ``allow``, ``claim``, ``succeed``, after the
task's ``task_created``), copied from what a real ``Gate.execute`` writes and hashed
by the ledger's own chain code, written straight into the tables (a gate takes
about an hour to write a million calls).

* ``archived``: every call written, a checkpoint taken, then the oldest 90% of the
  tasks pruned by ``audit archive``'s own pruning (``evidence.archive._prune``, in
  its batches of 50 tasks): tombstones in ``archived_calls``, pruned leaves in
  ``audit_pruned``, subtrees in ``audit_subtrees``, chain ends in ``archived_heads``,
  an archive record per batch. The per-task bundle export that
  comes before it in ``audit archive`` is skipped: it is not part of the state
  measured, and exporting 90,000 bundles would take most of a day.
* ``new``: only the live calls ever written, and a checkpoint taken.

Then, paired (``harness``: both ledgers in each round, the order rotating), the
median of per-round time ratios archived / new (1.0: as fast; above: slower):

* ``insert``: ``Gate.execute`` of a read tool, ``--calls`` new calls in a new task
  (the insert passes the archived-call trigger; two synced commits a call);
* ``listing``: the tasks page, the newest audit page, a live task's page, one call's
  details (what ``agent-gate tasks``, ``audit`` and ``call show`` read);
* ``verify``: a full ``audit verify`` (every chain, every checkpoint's Merkle tree:
  live leaves and, for pruned ones, the perfect subtrees their batch kept), and ``audit
  verify`` from the newest checkpoint (what came after it only).

Not collected by pytest: a measurement, never an assertion. Writes
``results/retention.md`` (``results/retention-quick.md`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Series, paired  # noqa: E402

PER_TASK = 10
ARCHIVED_SHARE = 0.9
_START = datetime(2026, 1, 1, tzinfo=UTC)
_ACTOR = "bench"
_GENESIS = "0" * 64


def _sql_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def build(path: Path, first: int, calls: int) -> None:
    """A ledger at head holding calls ``first .. first + calls - 1`` as a gate leaves them."""
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.chain import entry_hash

    with Ledger(f"sqlite:///{path}", create=True):
        pass
    db = sqlite3.connect(path)
    tasks, rows, entries, heads = [], [], [], {}
    for i in range(first, first + calls):
        task = f"task-{i // PER_TASK:07d}"
        at = _START + timedelta(milliseconds=10 * i)
        seq, prev = heads.get(task, (0, _GENESIS))
        steps: list[tuple[Any, ...]] = []
        if seq == 0:
            tasks.append((task, _sql_time(at), _sql_time(at)))
            steps.append(("task_created", None, None, None, None, None))
        row_id = i - first + 1
        call, digest = f"call-{i:07d}", f"{i:064x}"
        steps += [
            ("received", row_id, call, None, "received", json.dumps(
                {"args_hash": digest, "idem_key": f"call:{call}", "tool": "lookup"},
                sort_keys=True, separators=(",", ":"))),
            ("allow", row_id, call, "received", "authorized",
             '{"code":"allowed","version":1}'),
            ("claim", row_id, call, "authorized", "executing", '{"attempt":1,"version":2}'),
            ("succeed", row_id, call, "executing", "succeeded",
             f'{{"result_sha256":"{digest}","version":3}}'),
        ]
        for event, call_row, call_id, before, after, detail in steps:
            seq += 1
            fields = dict(at=at, task_id=task, call_row_id=call_row, call_id=call_id,
                          event=event, from_state=before, to_state=after,
                          actor=None if event == "task_created" else _ACTOR, detail=detail)
            digest_of = entry_hash(seq=seq, prev_hash=prev, **fields)
            entries.append((_sql_time(at), task, call_row, call_id, event, before, after,
                            fields["actor"], detail, seq, prev, digest_of))
            prev = digest_of
        heads[task] = (seq, prev)
        stamp = _sql_time(at)
        rows.append((row_id, task, call, f"call:{call}", "lookup", "read", "none", digest,
                     f'{{"n":{i}}}', "succeeded", 3, 1, f'{{"n":{i}}}', digest, 7, stamp,
                     stamp, stamp, stamp))
        if len(entries) >= 50_000:
            _flush(db, tasks, rows, entries)
    _flush(db, tasks, rows, entries)
    db.executemany("INSERT INTO audit_heads (task_id, seq, hash) VALUES (?, ?, ?)",
                   [(t, s, h) for t, (s, h) in heads.items()])
    db.commit()
    db.close()


def _flush(db: sqlite3.Connection, tasks: list[Any], rows: list[Any], entries: list[Any]
           ) -> None:
    db.executemany("INSERT INTO tasks (id, created_at, updated_at) VALUES (?, ?, ?)", tasks)
    db.executemany(
        "INSERT INTO tool_calls (id, task_id, call_id, idem_key, tool, effect, idempotency, "
        "args_hash, arguments, state, version, attempt, result, result_sha256, result_bytes, "
        "created_at, updated_at, started_at, finished_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.executemany(
        "INSERT INTO audit_events (at, task_id, call_row_id, call_id, event, from_state, "
        "to_state, actor, detail, seq, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", entries)
    tasks.clear()
    rows.clear()
    entries.clear()


def prune_oldest(url: str, calls: int, signer: Any) -> int:
    """``audit archive``'s pruning of the oldest ``ARCHIVED_SHARE`` of the tasks; the
    number of calls pruned."""
    from sqlalchemy import select

    from agent_gate.evidence import archive as retention
    from agent_gate.evidence.export import signed_checkpoint
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.backend import begin_read
    from agent_gate.ledger.models import AUDIT_EVENTS

    cut = int(calls * ARCHIVED_SHARE) // PER_TASK
    tasks = [f"task-{t:07d}" for t in range(cut)]
    with Ledger(url) as ledger:
        engine = ledger.engine
        signed = signed_checkpoint(engine, signer, None)
        exported: dict[str, set[int]] = {task: set() for task in tasks}
        with begin_read(engine) as conn:
            for task, row in conn.execute(select(AUDIT_EVENTS.c.task_id, AUDIT_EVENTS.c.id)
                                          .where(AUDIT_EVENTS.c.task_id < tasks[-1] + "~")):
                if task in exported:
                    exported[task].add(int(row))
        report = retention.ArchiveReport("bench", "-", signed.tree.size,
                                         signed.tree.root().hex())
        before = _START + timedelta(days=3650)
        with begin_read(engine) as conn:
            cuts = retention.cuts_of(conn, signed)
        for start in range(0, len(tasks), 50):
            retention._prune(engine, report, tasks[start:start + 50], exported, before,
                             signed, cuts)
    return report.calls


def _tools(ran: list[int]) -> Any:
    from agent_gate import ToolRegistry

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    def lookup(n: int) -> dict[str, int]:
        ran.append(n)
        return {"n": n}

    return tools


def measure(urls: dict[str, str], live_task: str, live_call: str, signer: Any,
            rounds: int, calls: int) -> list[tuple[str, dict[str, Any]]]:
    from agent_gate import Gate
    from agent_gate.ledger.backend import begin_read
    from agent_gate.ledger.checkpoints import take
    from agent_gate.ledger.trail_since import verify_since
    from agent_gate.ledger.views.pages import AuditQuery, TaskQuery

    ran: list[int] = []
    gates = {name: Gate(_tools(ran), url) for name, url in urls.items()}
    heads = {name: take(g.ledger.engine, signer=signer) for name, g in gates.items()}
    counter = iter(range(10**9))

    def insert(gate: Any) -> Callable[[], object]:
        def run() -> object:
            task = f"bench-{next(counter)}"
            for n in range(calls):
                gate.execute(task, {"call_id": f"new-{n}", "name": "lookup",
                                    "arguments": {"n": n}})
            return None
        return run

    def listing(gate: Any) -> Callable[[], object]:
        ledger = gate.ledger

        def run() -> object:
            return (ledger.tasks_page(TaskQuery(limit=50)),
                    ledger.audit_page(AuditQuery(newest=True, limit=50)),
                    ledger.audit_page(AuditQuery(task_id=live_task, limit=50)),
                    ledger.call_details(live_task, live_call))
        return run

    def verify(gate: Any) -> Callable[[], object]:
        def run() -> object:
            report = gate.ledger.verify_audit()
            assert report.ok, report.problem
            return report
        return run

    def since(name: str, gate: Any) -> Callable[[], object]:
        from agent_gate.evidence.checkpoint import TreeHead

        made = heads[name]
        head = TreeHead(signer.name, made.tree_size, bytes.fromhex(made.tree_root))

        def run() -> object:
            with begin_read(gate.ledger.engine) as conn:
                report = verify_since(conn, head)
            assert report.ok, report.problem
            return report
        return run

    results = []
    try:
        for label, make, n in (
                (f"insert: {calls} gate calls", insert, rounds),
                ("listing: tasks page, audit page, a task's page, a call", listing, rounds),
                ("full `audit verify`", verify, max(1, rounds // 3)),
                ("`audit verify` from the newest checkpoint", None, rounds)):
            candidates = {name: (make(g) if make else since(name, g))
                          for name, g in gates.items()}
            for warm in candidates.values():  # statements compiled, pages cached
                warm()
            series = paired(candidates, n, clock=time.process_time)
            walls = paired(candidates, 1)  # one wall-clock round each, for scale
            results.append((label, {
                "rounds": n,
                "cpu_s": {k: statistics.median(s.seconds) for k, s in series.items()},
                "wall_s": {k: s.seconds[0] for k, s in walls.items()},
                "ratio": _ratio(series["archived"], series["new"]),
            }))
    finally:
        for g in gates.values():
            g.close()
    return results


def _ratio(archived: Series, new: Series) -> float:
    """Median over rounds of time(archived) / time(new): 1.0 as fast, above it slower."""
    return statistics.median(a / n for a, n in zip(archived.seconds, new.seconds, strict=True)
                             if n > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 calls, 3 rounds")
    parser.add_argument("--total", type=int, default=None, help="calls ever made")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=50, help="gate calls per insert round")
    parser.add_argument("--work", type=Path, default=None, help="keep the ledgers here")
    args = parser.parse_args()
    total = args.total or (20_000 if args.quick else 1_000_000)
    rounds = args.rounds or (3 if args.quick else 9)
    from agent_gate.evidence.note import SignerKey

    signer = SignerKey.generate("bench.example/retention")
    work = args.work or Path(tempfile.mkdtemp(prefix="retention-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    live_first = int(total * ARCHIVED_SHARE)
    paths = {"archived": work / f"archived-{total}.db", "new": work / f"new-{total}.db"}
    built = {}
    for name, path in paths.items():
        if path.exists():
            continue
        start = time.perf_counter()
        if name == "archived":
            build(path, 0, total)
            pruned = prune_oldest(f"sqlite:///{path}", total, signer)
            assert pruned == live_first, (pruned, live_first)
        else:
            build(path, live_first, total - live_first)
        built[name] = time.perf_counter() - start
        print(f"built {path} in {built[name]:.1f} s", file=sys.stderr)
    urls = {name: f"sqlite:///{path}" for name, path in paths.items()}
    live_task = f"task-{(live_first // PER_TASK) + 1:07d}"
    live_call = f"call-{live_first + PER_TASK + 1:07d}"
    results = measure(urls, live_task, live_call, signer, rounds, args.calls)
    lines = [
        f"# Retention on SQLite: {total:,} calls, {ARCHIVED_SHARE:.0%} archived, "
        f"against a new ledger with the same {total - live_first:,} live calls",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {sys.version.split()[0]}, "
        f"{PER_TASK} calls per task; CPU seconds of this process (medians of paired "
        f"rounds), one wall-clock round for scale; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end.",
        "",
        "| what | rounds | archived CPU s | new CPU s | archived / new (paired) "
        "| wall s archived / new |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in results:
        lines.append(
            f"| {label} | {row['rounds']} | {row['cpu_s']['archived']:.4f} | "
            f"{row['cpu_s']['new']:.4f} | {row['ratio']:.2f} | "
            f"{row['wall_s']['archived']:.3f} / {row['wall_s']['new']:.3f} |")
    out = HERE / "results" / ("retention-quick.md" if args.quick else "retention.md")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
