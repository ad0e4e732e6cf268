"""The audit trail's evidence on a large SQLite ledger: full verify, checkpoints, proofs.

    python tests/benchmarks/audit_bench.py [--entries 1000000] [--db PATH] [--rounds 3]

Builds (once; ``--db`` keeps it between runs) a real SQLite ledger whose trail holds
``--entries`` entries in tasks of 100, hashed and linked by the ledger's own chain code
(``chain.entry_hash``) and written straight into ``audit_events``/``audit_heads``: a
gate would take an hour to write a million. The entries are audit-only (no call rows),
so the per-call checks of a full verify (state, charges: one row per call, a quarter
of the entries in a gate's trail) are not in these figures.

Then times: the full ``audit verify`` (every chain, the Merkle tree, every checkpoint),
the first checkpoint (hashes the whole trail once), a checkpoint after 1,000 more
entries (O(new + log n): the frontier), ``audit verify --checkpoint`` from the first
checkpoint (reads the 1,000 only), and building a signed proof's tree (``audit prove``
reads every leaf once).

Not collected by pytest: a measurement, never an assertion. The target (issue 34): a
full verify of 1,000,000 entries under 60 s on SQLite. Writes ``results/audit.md``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_TASK = 100
_START = datetime(2026, 1, 1, tzinfo=UTC)


def append(path: Path, first: int, count: int) -> None:
    """``count`` more entries, continuing every task's chain from its head."""
    from agent_gate.ledger.chain import GENESIS, entry_hash

    db = sqlite3.connect(path)
    heads = {t: (s, h) for t, s, h in db.execute("SELECT task_id, seq, hash FROM audit_heads")}
    rows = []
    for i in range(first, first + count):
        task = f"task-{i // PER_TASK:06d}"
        seq, prev = heads.get(task, (0, GENESIS))
        at = _START + timedelta(milliseconds=i)
        detail = f'{{"n":{i}}}'
        fields = dict(at=at, task_id=task, call_row_id=None, call_id=None, event="noted",
                      from_state=None, to_state=None, actor="bench", detail=detail)
        digest = entry_hash(seq=seq + 1, prev_hash=prev, **fields)
        rows.append((at.strftime("%Y-%m-%d %H:%M:%S.%f"), task, "noted", "bench", detail,
                     seq + 1, prev, digest))
        heads[task] = (seq + 1, digest)
        if len(rows) == 20_000:
            _flush(db, rows)
    _flush(db, rows)
    db.executemany("INSERT INTO audit_heads (task_id, seq, hash) VALUES (?, ?, ?) "
                   "ON CONFLICT (task_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
                   [(t, s, h) for t, (s, h) in heads.items()])
    db.commit()
    db.close()


def _flush(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.executemany("INSERT INTO audit_events (at, task_id, event, actor, detail, seq, "
                   "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    rows.clear()


def build(path: Path, entries: int) -> None:
    from agent_gate.ledger import Ledger

    start = time.perf_counter()
    with Ledger(f"sqlite:///{path}", create=True):
        pass
    append(path, 0, entries)
    print(f"built {path} ({entries:,} entries) in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)


def timed(fn: Callable[[], object], rounds: int) -> tuple[str, object]:
    """Median wall and CPU seconds of this process (the work is in-process: SQLite, the
    hashing), as ``"CPU (wall)"``: on a shared machine the CPU figure is the one that
    says what the code costs."""
    wall, cpu, result = [], [], None
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return f"{statistics.median(cpu):.3f} ({statistics.median(wall):.3f})", result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import tempfile

    from agent_gate.evidence.checkpoint import TreeHead
    from agent_gate.evidence.export import signed_checkpoint
    from agent_gate.evidence.note import SignerKey
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.backend import begin_read
    from agent_gate.ledger.checkpoints import take
    from agent_gate.ledger.trail_since import verify_since

    work = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    path = args.db or work / "audit.db"
    if not path.exists():
        build(path, args.entries)
    url = f"sqlite:///{path}"
    signer = SignerKey.generate("bench.example/audit")
    lines = []
    with Ledger(url) as ledger:
        total = ledger.verify_audit().entries
        # On a kept --db the first checkpoint exists: the figure is then a no-op's.
        first_s, first = timed(lambda: take(ledger.engine, signer=signer), 1)
        verify_s, report = timed(ledger.verify_audit, args.rounds)
        assert report.ok, report.problem  # type: ignore[attr-defined]
        append(path, total, 1000)
        next_s, _ = timed(lambda: take(ledger.engine, signer=signer), 1)
        head = TreeHead(signer.name, first.tree_size, bytes.fromhex(first.tree_root))  # type: ignore[attr-defined]

        def since() -> object:
            with begin_read(ledger.engine) as conn:
                return verify_since(conn, head)

        since_s, since_report = timed(since, args.rounds)
        assert since_report.ok and since_report.entries == 1000  # type: ignore[attr-defined]
        prove_s, _ = timed(lambda: signed_checkpoint(ledger.engine, None, None), 1)
    lines += [
        f"# Audit evidence on SQLite ({total:,} entries, {PER_TASK} per task)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python "
        f"{sys.version.split()[0]}; medians of {args.rounds} rounds where repeated; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end.",
        "",
        "| what | CPU seconds (wall) |",
        "|---|---:|",
        f"| full `audit verify` ({total:,} entries: chains, Merkle tree, checkpoints) | "
        f"{verify_s} |",
        f"| first checkpoint (the whole trail hashed once) | {first_s} |",
        f"| next checkpoint after 1,000 more entries (frontier) | {next_s} |",
        f"| `audit verify --checkpoint` from the first checkpoint (1,000 newer) | "
        f"{since_s} |",
        f"| a proof's tree (`audit prove`/`export`: every leaf read once) | {prove_s} |",
    ]
    out = HERE / "results" / "audit.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
