"""Operator listings on a large ledger: a page costs O(page), not O(ledger).

    python tests/benchmarks/listing_bench.py [--entries 100000] [--db PATH] [--rounds 7]

Builds (once; ``--db`` keeps it between runs) a real SQLite ledger whose audit trail
holds ``--entries`` entries, written by a real ``Gate`` (task created, received,
allowed, claimed, succeeded: five entries for a task's first call, four after), then
times what an operator runs: the first page, a page deep in the trail, a task's page,
the tasks page, one call's details, and the same through the console script
(``agent-gate audit --limit 50``, ``agent-gate audit | head -3``, start-up included).
The full read the old ``audit`` did (every entry, every call) is timed next to them.

Not collected by pytest: a measurement, never an assertion. The target (issue 19):
the first page of a 100,000-entry ledger within a second. Writes
``results/listing.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENT_GATE = Path(sys.executable).with_name("agent-gate")
CALLS_PER_TASK = 100


def build(path: Path, entries: int) -> None:
    from agent_gate import Gate, ToolRegistry

    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    def lookup(n: int) -> dict[str, int]:
        return {"n": n}

    calls = entries // 4
    url = f"sqlite:///{path}"
    start = time.perf_counter()
    with Gate(tools, url, create=True) as gate:
        for i in range(calls):
            task = f"task-{i // CALLS_PER_TASK:05d}"
            gate.execute(task, {"call_id": f"call-{i:07d}", "name": "lookup",
                                "arguments": {"n": i}})
    print(f"built {path} ({calls:,} calls) in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float, float]:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), min(seconds), max(seconds)


def cli(*args: str, head: int | None = None) -> Callable[[], object]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}

    def run() -> object:
        proc = subprocess.Popen([str(AGENT_GATE), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, text=True)
        assert proc.stdout is not None
        if head is not None:
            lines = [proc.stdout.readline() for _ in range(head)]
            proc.stdout.close()  # as `| head` does: the writer gets EPIPE
            proc.wait(timeout=120)
            return lines
        out = proc.stdout.read()
        proc.wait(timeout=120)
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/agent-gate-listing-bench.db"))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not args.db.exists():
        build(args.db, args.entries)

    from agent_gate.ledger import Ledger
    from agent_gate.ledger.views.pages import AuditQuery, TaskQuery

    url = f"sqlite:///{args.db}"
    ledger = Ledger(url)
    head = ledger.audit_page(AuditQuery(newest=True, limit=1))[-1].seq
    task = "task-00042"
    rows: list[tuple[str, Callable[[], object]]] = [
        ("audit: first page (50)", lambda: ledger.audit_page(AuditQuery(limit=50))),
        ("audit: page after #(head-100)",
         lambda: ledger.audit_page(AuditQuery(after=head - 100, limit=50))),
        ("audit: one task's page", lambda: ledger.audit_page(
            AuditQuery(task_id=task, after=head // 2, limit=50))),
        ("audit: newest 10 (--follow start)",
         lambda: ledger.audit_page(AuditQuery(newest=True, limit=10))),
        ("tasks: first page (50)", lambda: ledger.tasks_page(TaskQuery(limit=50))),
        ("call show: one call's details",
         lambda: ledger.call_details(task, "call-0004242")),
        ("old audit: every entry (O(ledger))", lambda: ledger.audit()),
        ("old audit: every call (O(ledger))", lambda: ledger.calls()),
        ("cli: agent-gate audit --limit 50", cli("audit", "--limit", "50", "--db", url)),
        ("cli: agent-gate audit | head -3", cli("audit", "--db", url, head=3)),
        ("cli: agent-gate tasks --limit 50", cli("tasks", "--limit", "50", "--db", url)),
        ("cli: agent-gate call show", cli("call", "show", "call-0004242", "--db", url)),
    ]
    lines = [f"# Operator listings on a {head:,}-entry audit trail (SQLite)", "",
             "| what | median | min-max |", "|---|---:|---:|"]
    for label, fn in rows:
        median, low, high = timed(fn, args.rounds)
        lines.append(f"| {label} | {median * 1000:.1f} ms | "
                     f"{low * 1000:.1f}-{high * 1000:.1f} ms |")
        print(lines[-1], file=sys.stderr)
    ledger.close()
    out = HERE / "results" / "listing.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
