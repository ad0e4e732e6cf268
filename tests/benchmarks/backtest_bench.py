"""Section 9: backtesting a draft policy over 100,000 past calls on SQLite.

The ledger is made by the gate itself for a few tasks (the example policy, the demo's
tools, no redaction so that rows can be copied), then those tasks' rows (task, calls,
their audit entries, their quota charges) are copied under new task ids until it
holds ``CALLS`` calls: every copied call keeps what a real one has, its arguments,
task context, first decision and charges. ``agent-gate policy backtest``'s work
(``gate.backtest.backtest``) is then timed end to end: read-only open, reading,
judging every call under a draft whose refund threshold moved, the report.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_gate import Gate
from agent_gate.demo.tools import tools
from agent_gate.gate.backtest import backtest
from agent_gate.policy import Policy, Principal, TaskScope

REPO = Path(__file__).resolve().parents[2]
SEED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("refund", {"order_id": "ORD-123456", "amount": 40}),
    ("refund", {"order_id": "ORD-123456", "amount": 80}),
    ("refund", {"order_id": "ORD-123456", "amount": 400}),
    ("send_email", {"to": "ana@example.com", "subject": "s", "body": "b"}),
    ("send_email", {"to": "x@elsewhere.org", "subject": "s", "body": "b"}),
    ("get_weather", {"city": "Oslo"}),
    ("fetch_url", {"url": "https://docs.python.org/3/"}),
    ("fetch_url", {"url": "https://169.254.169.254/latest"}),
    ("delete_file", {"path": "/srv/agent-gate/workspace/a.txt"}),
    ("delete_file", {"path": "/etc/passwd"}),
]


def _unredacted(text: str) -> str:
    """The example policy without its redactions (copied rows cannot be sealed)."""
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("redact:") or line.strip().startswith("redact:"):
            skip = not line.rstrip().endswith("]")
            continue
        if skip and (line.startswith("  - ") or line.startswith("        ")
                     or line.startswith("      - ")):
            continue
        skip = False
        out.append(line)
    return "\n".join(out) + "\n"


def build(folder: Path, calls: int) -> tuple[str, Policy, Policy]:
    original = Policy.from_text(_unredacted((REPO / "policies/example.yaml").read_text()),
                                source="example-unredacted.yaml")
    assert not original.document.redact and not any(
        t.redact for t in original.document.tools.values())
    draft = Policy.from_text(
        _unredacted((REPO / "policies/example.yaml").read_text())
        .replace("number: {gt: 0, max: 100}", "number: {gt: 0, max: 50}")
        .replace("number: {gt: 100, max: 5000}", "number: {gt: 50, max: 5000}"),
        source="draft.yaml",
    )
    db = folder / "ledger.db"
    url = f"sqlite:///{db}"
    os.environ["AGENT_GATE_DEMO_OUTBOX"] = str(folder / "outbox.jsonl")
    with Gate(tools, url, policy=original, create=True,
              principal=Principal(id="u1", roles={"support"}),
              scope=TaskScope(name="support")) as gate:
        for index, (tool, arguments) in enumerate(SEED_CALLS):
            gate.execute("seed", {"call_id": f"c{index}", "name": tool, "arguments": arguments})
    conn = sqlite3.connect(db)
    with conn:
        _copy(conn, calls)
    conn.close()
    return url, original, draft


def _copy(conn: sqlite3.Connection, calls: int) -> None:
    """Copies of the seed task's rows under new task ids until ``calls`` calls exist."""
    def columns(table: str) -> list[str]:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]

    task_cols, call_cols = columns("tasks"), columns("tool_calls")
    audit_cols, charge_cols = columns("audit_events"), columns("quota_charges")
    task = conn.execute("SELECT * FROM tasks WHERE id = 'seed'").fetchone()
    seed_calls = conn.execute(
        "SELECT * FROM tool_calls WHERE task_id = 'seed' ORDER BY id").fetchall()
    audit = conn.execute(
        "SELECT * FROM audit_events WHERE task_id = 'seed' AND call_row_id IS NOT NULL "
        "ORDER BY id").fetchall()
    charges = conn.execute("SELECT * FROM quota_charges WHERE task_id = 'seed'").fetchall()
    next_call = conn.execute("SELECT max(id) FROM tool_calls").fetchone()[0] + 1
    copies = -(-(calls - len(seed_calls)) // len(seed_calls))
    ti, ci = task_cols.index("id"), call_cols.index("id")
    ct = call_cols.index("task_id")
    for copy in range(copies):
        name = f"task-{copy:06d}"
        conn.execute(f"INSERT INTO tasks VALUES ({','.join('?' * len(task_cols))})",
                     [name if i == ti else v for i, v in enumerate(task)])
        ids: dict[int, int] = {}
        rows = []
        for row in seed_calls:
            ids[row[ci]] = next_call
            rows.append([next_call if i == ci else name if i == ct else v
                         for i, v in enumerate(row)])
            next_call += 1
        conn.executemany(f"INSERT INTO tool_calls VALUES ({','.join('?' * len(call_cols))})",
                         rows)
        a_id, a_task = audit_cols.index("id"), audit_cols.index("task_id")
        a_row = audit_cols.index("call_row_id")
        conn.executemany(
            f"INSERT INTO audit_events ({','.join(audit_cols[1:])}) "
            f"VALUES ({','.join('?' * (len(audit_cols) - 1))})",
            [[name if i == a_task else ids[v] if i == a_row else v
              for i, v in enumerate(row) if i != a_id] for row in audit],
        )
        q_id, q_task = charge_cols.index("id"), charge_cols.index("task_id")
        q_row = charge_cols.index("call_row_id")
        conn.executemany(
            f"INSERT INTO quota_charges ({','.join(charge_cols[1:])}) "
            f"VALUES ({','.join('?' * (len(charge_cols) - 1))})",
            [[name if i == q_task else ids[v] if i == q_row else v
              for i, v in enumerate(row) if i != q_id] for row in charges],
        )


def run_section(quick: bool) -> dict[str, Any]:
    calls = 20_000 if quick else 100_000
    with tempfile.TemporaryDirectory(prefix="ag-backtest-bench-") as folder:
        url, original, draft = build(Path(folder), calls)
        start = time.perf_counter()
        same = backtest(original, url)
        same_s = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        report = backtest(draft, url)
        draft_s = time.perf_counter() - start
        draft_cpu = time.process_time() - cpu
    assert same.changes == (), "the ledger's own policy must change nothing"
    total = report.judged + len(report.unjudged)
    return {
        "calls": total,
        "judged": report.judged,
        "changed": len(report.changes),
        "unjudged": len(report.unjudged),
        "seconds_draft": draft_s,
        "cpu_seconds_draft": draft_cpu,
        "seconds_same_policy": same_s,
        "us_per_call": draft_s / total * 1e6,
    }


def targets(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    scaled = section["seconds_draft"] * 100_000 / section["calls"]
    return [(
        "Backtest of 100,000 past calls under 30 s on SQLite",
        scaled <= 30,
        f"{section['seconds_draft']:.1f} s for {section['calls']:,} calls "
        f"({section['us_per_call']:.0f} us a call, {section['cpu_seconds_draft']:.1f} s of CPU; "
        f"{section['changed']:,} would change)",
    )]


def markdown(section: dict[str, Any]) -> list[str]:
    return [
        f"{section['calls']:,} past calls on SQLite ({section['judged']:,} judged, "
        f"{section['unjudged']:,} the draft cannot judge): the draft in "
        f"{section['seconds_draft']:.1f} s ({section['us_per_call']:.0f} us a call, "
        f"{section['cpu_seconds_draft']:.1f} s of CPU), "
        f"{section['changed']:,} decisions would change; the ledger's own policy in "
        f"{section['seconds_same_policy']:.1f} s, changing none.",
        "",
    ]


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run_section("--quick" in sys.argv), indent=2))
