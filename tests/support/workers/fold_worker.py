"""Worker process for tests/ledger/backend/test_sqlite_fast_fold_faults.py (run as a script).

Each worker is its own process with its own ``Gate`` on one SQLite ledger file, so
that the folded intake (``intake._free_id`` under ``BEGIN IMMEDIATE``, the call's row
written once by ``fast.Folded``) meets other processes and real deaths. Every run of
a tool appends one line to a shared runs file (``O_APPEND``, one ``write``): the
test counts side effects from it, not from the ledger.

Commands:

``race URL GO RUNS ORDER``: wait for the GO file, then execute the shared call list
(``CALLS``) in the order ORDER names (``fwd``/``rev``); print one JSON line of
outcomes.

``die URL RUNS POINT TASK CALL [GO]``: execute one ``noop`` call and die by SIGKILL
at POINT: ``tool`` (inside the tool, its run noted), ``intake`` (the folded
``INSERT`` sent, the intake transaction not committed), ``outcome`` (the tool
returned, its outcome not committed). With GO, wait for that file first. A worker
that did not die (another one had the call) prints its outcome.

``again URL RUNS TASK CALL``: execute that call again (a restarted worker); print
its outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agent_gate import Gate, ToolRegistry, current_call
from agent_gate.ledger import Ledger

NOOP_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}
PAY_SCHEMA = {"type": "object", "properties": {"order": {"type": "string"},
                                               "amount": {"type": "integer"}}}

CALLS: list[tuple[str, dict[str, Any]]] = [
    # The same (task, call id) in every worker, and the same call id in two tasks.
    *[("t1", {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}}) for n in range(6)],
    *[("t2", {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}}) for n in range(6)],
    # One dedupe key (order o1) under several call ids: one run per task.
    *[("t1", {"call_id": f"p{n}", "name": "pay", "arguments": {"order": "o1", "amount": 5}})
      for n in range(4)],
    *[("t3", {"call_id": f"p{n}", "name": "pay", "arguments": {"order": "o1", "amount": 5}})
      for n in range(4)],
]


def note(runs: Path, line: str) -> None:
    """One line, one ``write`` on an ``O_APPEND`` file: lines of racing processes
    never interleave."""
    fd = os.open(runs, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def tools_for(runs: Path, die_in_tool: bool = False) -> ToolRegistry:
    tools = ToolRegistry()

    def noop(n: int) -> dict[str, Any]:
        info = current_call()
        note(runs, f"noop {info.task_id} {info.call_id} {n} {os.getpid()}")
        if die_in_tool:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"ok": n}

    def pay(order: str, amount: int) -> str:
        info = current_call()
        note(runs, f"pay {info.task_id} {info.call_id} {order} {os.getpid()}")
        return "paid"

    tools.register(noop, schema=NOOP_SCHEMA, effect="write", idempotency="none")
    tools.register(pay, schema=PAY_SCHEMA, effect="write", idempotency="none",
                   dedupe=["order"])
    return tools


def wait_for(go: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("go file never appeared")
        time.sleep(0.002)


def outcome(out: Any) -> dict[str, Any]:
    return {"state": out.state.value, "replayed": out.replayed, "code": out.code,
            "duplicate_of": out.duplicate_of}


def main() -> None:
    command, url, *rest = sys.argv[1:]
    if command == "race":
        go, runs, order = Path(rest[0]), Path(rest[1]), rest[2]
        calls = CALLS if order == "fwd" else CALLS[::-1]
        with Gate(tools_for(runs), Ledger(url)) as gate:
            gate.ledger.get("t0", "warm")  # connect before the start line
            wait_for(go)
            seen = [[task, call["call_id"], outcome(gate.execute(task, call))]
                    for task, call in calls]
        print(json.dumps(seen))
    elif command == "die":
        runs, point, task, call_id = Path(rest[0]), rest[1], rest[2], rest[3]
        if point == "intake":
            from agent_gate.ledger.backend import fast

            send = fast.Folded.send

            def send_then_die(self: Any) -> None:
                send(self)
                os.kill(os.getpid(), signal.SIGKILL)

            fast.Folded.send = send_then_die  # type: ignore[method-assign]
        if point == "outcome":
            def die_on_outcome(*_args: Any, **_kwargs: Any) -> Any:
                os.kill(os.getpid(), signal.SIGKILL)

            Ledger.finish = die_on_outcome  # type: ignore[method-assign]
        with Gate(tools_for(runs, die_in_tool=point == "tool"), Ledger(url)) as gate:
            if len(rest) > 4:
                gate.ledger.get("t0", "warm")  # connect before the start line
                wait_for(Path(rest[4]))
            out = gate.execute(task, {"call_id": call_id, "name": "noop", "arguments": {"n": 1}})
            print(json.dumps(outcome(out)))
    elif command == "again":
        runs, task, call_id = Path(rest[0]), rest[1], rest[2]
        with Gate(tools_for(runs), Ledger(url)) as gate:
            out = gate.execute(task, {"call_id": call_id, "name": "noop", "arguments": {"n": 1}})
            print(json.dumps(outcome(out)))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
