"""The inbox's first page with 10,000 calls waiting, on SQLite and PostgreSQL.

    python tests/benchmarks/inbox_bench.py [--calls 10000] [--rounds 15]
        [--sqlite PATH] [--postgres URL]

Builds (once per database; a ledger that already holds the calls is reused) a real
ledger where ``--calls`` calls wait for approval, recorded by a real ``Gate`` under a
policy that asks a person for each (three tools, a hundred tasks), then serves it with
the real application under uvicorn on loopback and times what an operator's browser
asks for over HTTP, logged in: the first page of the list (50 rows and the counts by
tool and rule), the same filtered by tool, a page deep in the list (keyset), the poll
that finds nothing new (304), the API's first page of calls with their whole details,
and the list's ledger read alone.

Not collected by pytest: a measurement, never an assertion. The target (issue 32):
the first page within 200 ms. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASKS = 100
POLICY = """
version: 1
tools:
  send_email:
    effect: write
    idempotency: none
    rules:
      - {id: mail-needs-a-person, effect: approve, reason: Every mail is read first.}
  refund:
    effect: write
    idempotency: none
    rules:
      - {id: refunds-need-a-person, effect: approve, reason: Finance approves refunds.}
  open_ticket:
    effect: write
    idempotency: none
    rules:
      - {id: tickets-need-a-person, effect: approve, reason: Support reads tickets.}
"""


def tools() -> Any:
    from agent_gate import ToolRegistry

    registry = ToolRegistry()

    @registry.tool(effect="write", idempotency="none")
    def send_email(to: str, subject: str, body: str) -> dict[str, bool]:
        return {"queued": True}

    @registry.tool(effect="write", idempotency="none")
    def refund(order: str, cents: int) -> dict[str, int]:
        return {"refunded": cents}

    @registry.tool(effect="write", idempotency="none")
    def open_ticket(title: str, text: str) -> dict[str, bool]:
        return {"opened": True}

    return registry


def build(url: str, policy: Path, calls: int) -> None:
    from agent_gate import Gate, Principal
    from agent_gate.ledger import CallState, Ledger

    with Ledger(url, create=True, auto_upgrade=True) as ledger:
        have = len(ledger.calls(states=[CallState.AWAITING_APPROVAL]))
    if have >= calls:
        return
    start = time.perf_counter()
    with Gate(tools(), url, policy=str(policy)) as gate:
        for i in range(have, calls):
            task = f"task-{i % TASKS:03d}"
            kind = i % 3
            name, args = (
                ("send_email", {"to": f"customer{i}@example.org", "subject": f"Order {i}",
                                "body": "Dear customer, your order has shipped. " * 4}),
                ("refund", {"order": f"o-{i}", "cents": 100 + i}),
                ("open_ticket", {"title": f"Ticket {i}", "text": "The printer is on fire."}),
            )[kind]
            gate.execute(task, {"call_id": f"call-{i:06d}", "name": name, "arguments": args},
                         principal=Principal(id="agent"))
    print(f"built {calls - have:,} waiting calls in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)


Timing = tuple[float, float, float, float]


def timed(fn: Callable[[], object], rounds: int) -> Timing:
    """Wall time (median, min, max) and this process's CPU time (median): on a loaded
    machine the wall time also counts the waits for a core, the CPU time does not
    (it covers the server and the client, both in this process, and on PostgreSQL not
    the database server's own work)."""
    fn()  # warm: templates compiled, connections opened
    seconds, cpu = [], []
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(seconds), min(seconds), max(seconds), statistics.median(cpu)


def measure(url: str, policy: Path, rounds: int) -> list[tuple[str, Timing]]:
    import httpx
    import uvicorn

    from agent_gate.ledger import Ledger
    from agent_gate.ledger.views.inbox import InboxQuery, read_inbox
    from agent_gate.ledger.views.operators import Operators
    from agent_gate.serve import create_app

    with Ledger(url) as ledger:
        ops = Operators(ledger.engine)
        ops.remove("bench")
        _, token = ops.add("bench", approve=["*"])
    app = create_app(url, str(policy))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    out: list[tuple[str, Timing]] = []
    try:
        with httpx.Client(base_url=base, headers={"Origin": base}) as http:
            assert http.post("/login", data={"token": token}).status_code == 303
            first = http.get("/inbox")
            assert first.status_code == 200
            rows = re.findall(r'id="row-(\d+)"', first.text)
            total = re.search(r'<b id="total">(\d+)</b>', first.text)
            assert len(rows) == 50 and total is not None, "the first page shows 50 rows"
            deep = int(rows[0]) + int(total.group(1)) // 2
            tag = http.get("/inbox/rows").headers["etag"]

            def get(path: str, **params: str) -> Callable[[], object]:
                def run() -> object:
                    got = http.get(path, params=params)
                    assert got.status_code == 200
                    return got
                return run

            def poll() -> object:
                got = http.get("/inbox/rows", headers={"If-None-Match": tag})
                assert got.status_code == 304
                return got

            out.append((f"first page, {total.group(1)} waiting (HTTP, 50 rows + counts)",
                        timed(get("/inbox"), rounds)))
            out.append(("first page, one tool (HTTP)", timed(get("/inbox", tool="refund"),
                                                             rounds)))
            out.append(("a page deep in the list (HTTP, keyset)",
                        timed(get("/inbox", after=str(deep)), rounds)))
            out.append(("newest first (HTTP)", timed(get("/inbox", sort="newest"), rounds)))
            out.append(("the poll, nothing new (HTTP 304)", timed(poll, rounds)))

            def details() -> object:
                got = http.get("/api/approvals", headers={"Authorization": f"Bearer {token}"})
                assert got.status_code == 200 and len(got.json()) == 100
                return got

            out.append(("/api/approvals: 100 calls with their details (HTTP)",
                        timed(details, rounds)))
        with Ledger(url) as ledger:
            out.append(("the ledger read alone (page + counts)", timed(
                lambda: read_inbox(ledger.engine, InboxQuery()), rounds)))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sqlite", type=Path, default=None,
                        help="the SQLite ledger file to build or reuse")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL to build or reuse")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="inbox-bench-"))
    policy = work / "policy.yaml"
    policy.write_text(POLICY)
    urls = [("SQLite", f"sqlite:///{args.sqlite or work / 'ledger.db'}")]
    if args.postgres:
        urls.append(("PostgreSQL", args.postgres))
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| database | what | median ms | min | max | CPU ms (median) |\n"
          "|---|---|---:|---:|---:|---:|")
    for label, url in urls:
        build(url, policy, args.calls)
        for what, (med, low, high, cpu) in measure(url, policy, args.rounds):
            print(f"| {label} | {what} | {med * 1000:.1f} | {low * 1000:.1f} | "
                  f"{high * 1000:.1f} | {cpu * 1000:.1f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
